package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// embeddingDim is the dimension of the simulated embeddings.
const embeddingDim = 64

// maxEmbeddingInputs is OpenAI's limit on inputs per request.
const maxEmbeddingInputs = 2048

type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
}

type embeddingResponse struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Data    []embeddingData `json:"data"`
	Usage   *usageInfo      `json:"usage"`
}

type embeddingData struct {
	Index  int    `json:"index"`
	Object string `json:"object"`
	// Embedding is a []float32, or a base64 string of little-endian
	// float32s when encoding_format is "base64".
	Embedding any `json:"embedding"`
}

// parseEmbeddingInput reads input: a string, an array of strings, an array
// of token ids, or an array of arrays of token ids. It reuses the
// completions prompt forms, which are the same.
func parseEmbeddingInput(raw json.RawMessage) ([]promptText, *apiError) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return nil, badRequest("input: field required")
	}
	ps, e := parsePrompts(raw)
	if e != nil {
		if rest, ok := strings.CutPrefix(e.msg, "prompt"); ok {
			e.msg = "input" + rest
		}
		return nil, e
	}
	if len(ps) > maxEmbeddingInputs {
		return nil, badRequest("input: at most %d inputs, got %d", maxEmbeddingInputs, len(ps))
	}
	return ps, nil
}

// maxEmbeddingWords bounds the work per input: words past it do not count.
const maxEmbeddingWords = 4096

// embed returns a deterministic unit vector for the text under seed: the
// normalized sum of one Gaussian vector per distinct word. Texts that share
// words point the same way (cosine near shared/sqrt(n1·n2)), so clients that
// cluster or search by topic see topic in the vectors, offline.
func embed(seed int64, text string, dim int) []float32 {
	hashes := wordHashes(text)
	if len(hashes) == 0 {
		hashes = append(hashes, uint64(fnvOffset64)) // the empty word
	}
	// One generator reseeded per word: no allocation per word. Only the
	// first dim draws matter, as a shorter vector is the normalized prefix
	// of the full one (Matryoshka-style).
	pcg := rand.NewPCG(0, 0)
	r := rand.New(pcg)
	var v [embeddingDim]float64
	for _, h := range hashes {
		pcg.Seed(mix(uint64(seed)^saltToken^0xe6b), mix(h))
		for i := range dim {
			v[i] += r.NormFloat64()
		}
	}
	var norm float64
	for _, x := range v[:dim] {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	out := make([]float32, dim)
	for i, x := range v[:dim] {
		out[i] = float32(x / norm)
	}
	return out
}

// wordHashes returns the sorted FNV-1a hashes of the distinct words among
// the first maxEmbeddingWords of text. A word is a maximal run of letters
// and digits, lower-cased, or a single Han, Hiragana or Katakana character,
// as a simple tokenizer splits text that has no spaces between words.
func wordHashes(text string) []uint64 {
	var hashes []uint64
	h, inWord := fnvOffset64, false
	for _, c := range text {
		if len(hashes) >= maxEmbeddingWords {
			break
		}
		cjk := unicode.In(c, unicode.Han, unicode.Hiragana, unicode.Katakana)
		alnum := unicode.IsLetter(c) || unicode.IsDigit(c)
		if inWord && (cjk || !alnum) {
			hashes = append(hashes, uint64(h))
			h, inWord = fnvOffset64, false
		}
		switch {
		case cjk:
			hashes = append(hashes, uint64(foldRune(fnvOffset64, c)))
		case alnum:
			h, inWord = foldRune(h, unicode.ToLower(c)), true
		}
	}
	if inWord {
		hashes = append(hashes, uint64(h))
	}
	hashes = hashes[:min(len(hashes), maxEmbeddingWords)]
	slices.Sort(hashes)
	return slices.Compact(hashes)
}

// foldRune adds the UTF-8 bytes of c to the FNV-1a hash h.
func foldRune(h fnv64a, c rune) fnv64a {
	var b [utf8.UTFMax]byte
	n := utf8.EncodeRune(b[:], c)
	for _, x := range b[:n] {
		h ^= fnv64a(x)
		h *= fnvPrime64
	}
	return h
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req embeddingRequest
	body, decoded := decodeOpenAI(s, w, r, &req, func() string { return req.Model })
	if !decoded {
		return
	}
	inputs, e := parseEmbeddingInput(req.Input)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	switch req.EncodingFormat {
	case "", "float", "base64":
	default:
		s.failOpenAI(w, badRequest("encoding_format: must be \"float\" or \"base64\", got %q", req.EncodingFormat))
		return
	}
	dim := embeddingDim
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > embeddingDim {
			s.failOpenAI(w, badRequest("dimensions: must be in [1, %d], got %d", embeddingDim, *req.Dimensions))
			return
		}
		dim = *req.Dimensions
	}
	k := s.Knobs()
	tokens := 0
	for _, in := range inputs {
		tokens += in.tokens()
		if k.MaxModelLen > 0 && in.tokens() > k.MaxModelLen {
			s.failOpenAI(w, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens in the input for embedding generation. Please reduce the length of the input.",
				k.MaxModelLen, in.tokens()))
			return
		}
	}

	rng := requestRNG(s.seed, body)
	if s.failNext(k.ErrorRate) {
		s.failOpenAI(w, errSimulated)
		return
	}
	id := "embd-" + hexID(rng)
	created := s.createdAt()

	// Embeddings do not use the prefix cache (vLLM's pooling models
	// turn it off), but they prefill every token.
	rn := s.begin(r.Context(), k, admission{plans: []choicePlan{{tokens: tokens}}, noCache: true})
	if rn == nil {
		return
	}
	defer rn.end()
	// An embedding is one forward pass: the time to a first token, and it
	// generates no token to stall before.
	if !rn.pause(rn.ttft()) {
		return
	}
	resp := embeddingResponse{ID: id, Object: "list", Created: created, Model: s.model,
		Data: make([]embeddingData, len(inputs)), Usage: newUsage(tokens, 0)}
	for i, in := range inputs {
		v := embed(s.seed, in.text, dim)
		var enc any = v
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			enc = base64.StdEncoding.EncodeToString(b)
		}
		resp.Data[i] = embeddingData{Index: i, Object: "embedding", Embedding: enc}
	}
	writeJSON(w, http.StatusOK, resp)
}
