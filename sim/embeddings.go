package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
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

// embed returns a deterministic unit vector for the text under seed, so the
// same text always embeds the same way and different texts look unrelated.
func embed(seed int64, text string, dim int) []float32 {
	r := rand.New(rand.NewPCG(mix(uint64(seed)^saltToken^0xe6b), uint64(newContext(text))))
	v := make([]float64, embeddingDim)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	// Matryoshka-style: a shorter vector is the normalized prefix.
	v = v[:dim]
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	if norm == 0 {
		norm = 1
	}
	out := make([]float32, dim)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
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
