package sim

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"hash"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"unicode/utf8"
)

// vocab is the simulated model's output vocabulary, most frequent first; a
// token's id is its index. Words carry their leading space, as BPE tokens do.
var vocab = []string{
	" the", " of", " and", " to", " a", " in", ".", ",", " is", " that",
	" for", " it", " as", " was", " with", " be", " by", " on", " not", " he",
	" this", " are", " or", " his", " from", " at", " which", " but", " have", " an",
	" had", " they", " you", " were", " their", " one", " all", " we", " can", " her",
	" has", " there", " been", " if", " more", " when", " will", " would", " who", " so",
	" no", " she", " other", " its", " may", " these", " what", " them", " than", " some",
	" him", " time", " into", " only", " do", " could", " new", " about", " two", " then",
	" first", " also", " any", " like", " our", " over", " such", " people", " very", " most",
	" model", " data", " system", " value", " result", " answer", " question", " token", " number", " example",
	" request", " server", " model's", " output", " input", " signal", " latency", " gateway", " backend", " trace",
	" because", " however", " therefore", " while", " where", " each", " every", " both", " between", " through",
	" should", " must", " might", " shall", " does", " did", " made", " make", " gave", " used",
	" use", " using", " work", " works", " well", " good", " great", " small", " large", " long",
	" short", " high", " low", " fast", " slow", " early", " late", " old", " young", " simple",
	" clear", " true", " false", " same", " different", " many", " much", " few", " little", " own",
	" way", " day", " year", " world", " life", " part", " place", " case", " point", " group",
	" problem", " fact", " hand", " end", " form", " line", " name", " word", " kind", " side",
	" water", " light", " sound", " color", " home", " city", " country", " state", " law", " book",
	" see", " know", " think", " take", " come", " find", " give", " tell", " say", " show",
	" ask", " try", " call", " need", " feel", " become", " leave", " put", " mean", " keep",
	" let", " begin", " seem", " help", " talk", " turn", " start", " run", " move", " live",
	" believe", " hold", " bring", " happen", " write", " provide", " sit", " stand", " lose", " pay",
	" meet", " include", " continue", " set", " learn", " change", " lead", " understand", " watch", " follow",
	" stop", " create", " speak", " read", " allow", " add", " spend", " grow", " open", " walk",
	" win", " offer", " remember", " love", " consider", " appear", " buy", " wait", " serve", " die",
	" send", " expect", " build", " stay", " fall", " cut", " reach", " kill", " remain", " suggest",
}

// promptIDBase puts prompt-piece token ids above the vocabulary; pieces are
// hashed into [promptIDBase, promptIDSpace).
const (
	promptIDBase  = 1000
	promptIDSpace = 32000
)

// byteIDBase is the first of 256 token ids that stand for one byte each,
// between the vocabulary and the prompt pieces: /tokenize answers with
// them, so that a prompt it tokenized reads back as the same text, and is
// the same context, when given as token ids (teacher forcing).
const byteIDBase = 700

// Salts keep the generator streams of different draws apart.
const (
	saltToken  uint64 = 0x9e3779b97f4a7c15
	saltNoise  uint64 = 0xc2b2ae3d27d4eb4f
	saltChoice uint64 = 0x165667b19e3779f9
)

// mix is SplitMix64's finalizer: spreads nearby inputs over all 64 bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// requestRNG returns the generator of everything a request draws outside
// the language model: the error decision, then ids. It is seeded with a
// hash of the body without its top-level logprobs and top_logprobs members
// (see hashRequest), so that asking for logprobs changes nothing else in
// the response.
func requestRNG(seed int64, body []byte) *rand.Rand {
	h := fnv.New64a()
	hashRequest(h, body)
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// hashRequest writes body to h without the top-level members "logprobs",
// "top_logprobs", "stream_options" and "include" (the Responses API's way
// of asking for logprobs). A real engine's tokens do not
// depend on whether logprobs or usage are returned; Vigil's logprob and
// usage injection rely on the simulator behaving alike:
// a request and the same request with those members appended get the same
// ids, hence the same bytes once what they add is removed.
//
// A removed member takes with it the comma before it and the whitespace
// between that comma and its key (the first member: the comma after it and
// the whitespace up to the next key), so that appending
// `,"logprobs":true,"top_logprobs":5` before the final '}' and removing it
// again gives back the original bytes, and so does a client's
// `"logprobs":false` followed by an injected `"logprobs":true`. Keys are
// compared as raw bytes (an escaped key is another key here). Bodies that
// are not a JSON object, or that do not parse, are hashed whole.
func hashRequest(h hash.Hash64, body []byte) {
	if !bytes.Contains(body, []byte("logprobs")) && !bytes.Contains(body, []byte("stream_options")) && !bytes.Contains(body, []byte("include")) {
		h.Write(body) // the usual case, and the hash of every body from before logprob injection
		return
	}
	from := 0 // body[from:] is not written yet
	drop := func(start, end int) {
		start = max(start, from)
		h.Write(body[from:start])
		from = end
	}
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		h.Write(body)
		return
	}
	comma := -1 // the comma before the current member, -1 for the first
	for i = skipSpace(body, i+1); i < len(body) && body[i] != '}'; {
		keyStart := i
		keyEnd := skipValue(body, i)
		if body[i] != '"' || keyEnd < 0 {
			break
		}
		j := skipSpace(body, keyEnd)
		if j == len(body) || body[j] != ':' {
			break
		}
		valEnd := skipValue(body, skipSpace(body, j+1))
		if valEnd < 0 {
			break
		}
		next := skipSpace(body, valEnd)
		key := body[keyStart+1 : keyEnd-1]
		if string(key) == "logprobs" || string(key) == "top_logprobs" || string(key) == "stream_options" || string(key) == "include" {
			switch {
			case comma >= 0:
				drop(comma, valEnd)
			case next < len(body) && body[next] == ',':
				drop(keyStart, skipSpace(body, next+1))
			default:
				drop(keyStart, valEnd)
			}
		}
		if next == len(body) || body[next] != ',' {
			break
		}
		comma = next
		i = skipSpace(body, next+1)
	}
	h.Write(body[from:])
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the JSON value starting at b[i], or -1 when
// it does not end. It checks only what it needs to find the end.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	depth := 0
	for ; i < len(b); i++ {
		switch c := b[i]; c {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return -1
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a scalar before its container's end
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
		}
	}
	if depth > 0 {
		return -1
	}
	return i
}

// hexID draws 32 hex digits, the length of vLLM's random_uuid().
func hexID(r *rand.Rand) string {
	var b [16]byte
	for i := range 2 {
		v := r.Uint64()
		for j := range 8 {
			b[i*8+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}

// candidate is one token of a position's distribution.
type candidate struct {
	id      int
	text    string
	logprob float64
}

// step is one position of a sequence: the token there and the most likely
// tokens at that position, ranked by logprob (noise included), the token
// itself among them when its rank is within the list.
type step struct {
	candidate
	// rank of the token at this position, 1 for the most likely.
	rank int
	// top holds up to k candidates, most likely first.
	top []candidate
}

// lm is the simulated language model with the knobs of one request.
type lm struct {
	seed       uint64
	confidence float64
	noise      float64
}

func newLM(seed int64, k Knobs) lm {
	return lm{seed: uint64(seed), confidence: k.Confidence, noise: k.Noise}
}

// fnv64a is FNV-1a over the text so far: the context key of the model. It
// is a value, so a prompt hashed once serves every choice.
type fnv64a uint64

const (
	fnvOffset64 fnv64a = 14695981039346656037
	fnvPrime64  fnv64a = 1099511628211
)

func newContext(text string) fnv64a {
	h := fnvOffset64
	h.write(text)
	return h
}

func (h *fnv64a) write(s string) {
	v := *h
	for i := 0; i < len(s); i++ {
		v ^= fnv64a(s[i])
		v *= fnvPrime64
	}
	*h = v
}

// sequence generates the tokens of one choice, one at a time. It is used
// by one goroutine.
type sequence struct {
	m      lm
	ctx    fnv64a
	choice int
	k      int
}

// sequence starts generating after the context ctx for choice (0 for the
// first; later choices of n > 1 differ as samples would), listing the k most
// likely tokens at each position.
func (m lm) sequence(ctx fnv64a, choice, k int) *sequence {
	return &sequence{m: m, ctx: ctx, choice: choice, k: k}
}

// next generates the next token.
func (q *sequence) next() step {
	s := q.m.generate(uint64(q.ctx), q.choice, q.k)
	q.ctx.write(s.text)
	return s
}

// generate draws the distribution after the context ctx and returns its
// most likely token (before noise) as the generated one.
func (m lm) generate(ctx uint64, choice, k int) step {
	r := rand.New(rand.NewPCG(mix(m.seed^saltToken^mix(uint64(choice)*saltChoice)), ctx))
	// Squaring a uniform draw favours the frequent words at the head of the
	// vocabulary, so output reads a little like English.
	u := r.Float64()
	chosen := min(int(u*u*float64(len(vocab))), len(vocab)-1)
	p1 := m.topProbability(r)
	cands := m.alternatives(r, chosen, p1, m.drawn(k))
	m.addNoise(ctx, choice, cands)
	return rankedStep(cands, 0, k)
}

// noiseAlternatives is how many alternatives are drawn under noise,
// whatever k the request asked for: noise is renormalized over the drawn
// tokens (addNoise), so their number must not depend on the request, or
// asking for more alternatives would change the chosen token's logprob.
const noiseAlternatives = 20

// drawn is the number of alternatives to draw for a request of k.
func (m lm) drawn(k int) int {
	if m.noise == 0 {
		return k
	}
	return max(k, noiseAlternatives)
}

// score returns the distribution at a prompt position whose actual token is
// (id, text), as vLLM's prompt_logprobs lists it: the actual token with its
// rank and logprob, and the k most likely tokens.
func (m lm) score(ctx uint64, id int, text string, k int) step {
	r := rand.New(rand.NewPCG(mix(m.seed^saltToken^mix(0)), ctx))
	u := r.Float64()
	chosen := min(int(u*u*float64(len(vocab))), len(vocab)-1)
	p1 := m.topProbability(r)
	cands := m.alternatives(r, chosen, p1, m.drawn(k))
	if i := slices.IndexFunc(cands, func(c candidate) bool { return c.id == id }); i >= 0 {
		// The model's own choice, or one of its alternatives (a
		// continuation that another model generated, scored here).
		m.addNoise(ctx, 0, cands)
		return rankedStep(cands, i, k)
	}
	// The prompt's own token is not among the model's favourites: give it a
	// rank below the listed ones and a logprob to match. Prompt pieces have
	// ids outside the vocabulary, so this is the usual case.
	behind := int(mix(ctx^m.seed) % 50)
	rest := max(1-p1, 1e-6)
	actual := candidate{id: id, text: text, logprob: math.Log(rest) - 2 - 0.25*float64(behind)}
	cands = append(cands, actual)
	m.addNoise(ctx, 0, cands)
	s := rankedStep(cands, len(cands)-1, k)
	if s.rank > k {
		// Unlisted: other unlisted tokens may rank between the listed ones
		// and this one.
		s.rank += behind
	}
	return s
}

// topProbability draws the chosen token's probability around the
// confidence; the spread vanishes at 1, so confidence 1 yields logprob 0.
func (m lm) topProbability(r *rand.Rand) float64 {
	c := m.confidence
	p := c + 0.3*c*(1-c)*r.NormFloat64()
	return min(max(p, 1e-4), 1)
}

// alternatives returns the chosen token followed by k distinct other tokens
// with decreasing probabilities that share what p1 leaves.
func (m lm) alternatives(r *rand.Rand, chosen int, p1 float64, k int) []candidate {
	k = min(k, len(vocab)-1)
	cands := make([]candidate, 0, k+2)
	cands = append(cands, candidate{id: chosen, text: vocab[chosen], logprob: math.Log(p1)})
	rest := 1 - p1
	for j := 1; j <= k; j++ {
		id := r.IntN(len(vocab))
		for slices.ContainsFunc(cands, func(c candidate) bool { return c.id == id }) {
			id = r.IntN(len(vocab))
		}
		// Each share is at least 0.35 and at most 0.5 of the previous
		// one's ceiling, so shares decrease; the cap keeps them below p1.
		share := rest * math.Pow(0.5, float64(j)) * (0.7 + 0.3*r.Float64())
		p := max(min(share, p1*math.Pow(0.95, float64(j))), 1e-9)
		cands = append(cands, candidate{id: id, text: vocab[id], logprob: math.Log(p)})
	}
	return cands
}

// addNoise perturbs every logprob with gaussian noise from its own
// generator, so that noise never changes which tokens are drawn, then
// shifts them all by one amount so that together they keep the
// probability they had: noise on a model's logits leaves a distribution
// (the softmax renormalizes), and a quantized model's top-k never sums
// above 1.
func (m lm) addNoise(ctx uint64, choice int, cands []candidate) {
	if m.noise == 0 {
		return
	}
	r := rand.New(rand.NewPCG(mix(m.seed^saltNoise^mix(uint64(choice)*saltChoice)), ctx))
	before, after := 0.0, 0.0
	for i := range cands {
		before += math.Exp(cands[i].logprob)
		cands[i].logprob += m.noise * r.NormFloat64()
		after += math.Exp(cands[i].logprob)
	}
	if shift := math.Log(before / after); !math.IsNaN(shift) && !math.IsInf(shift, 0) {
		for i := range cands {
			cands[i].logprob += shift
		}
	}
	for i := range cands {
		cands[i].logprob = finiteLogprob(cands[i].logprob)
	}
}

// finiteLogprob keeps a logprob in [-9999, 0], OpenAI's floor for "very
// unlikely", so that JSON encoding never meets NaN or infinities.
func finiteLogprob(lp float64) float64 {
	if math.IsNaN(lp) {
		return -9999
	}
	return min(max(lp, -9999), 0)
}

// rankedStep sorts cands by logprob and returns cands[pick] as the step's
// token with its rank and the k best.
func rankedStep(cands []candidate, pick, k int) step {
	for i := range cands {
		cands[i].logprob = finiteLogprob(cands[i].logprob)
	}
	s := step{candidate: cands[pick]}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.logprob, a.logprob) })
	for i, c := range cands {
		if c.id == s.id {
			s.rank = i + 1
		}
	}
	s.top = cands[:min(k, len(cands))]
	return s
}

// promptText is a prompt as the simulator sees it.
type promptText struct {
	// text is the context the model continues.
	text string
	// ids, when not nil, are the prompt's own token ids (a completions
	// prompt given as token ids); text is then their concatenated pieces.
	ids []int
}

// tokens is the prompt's token count: ceil(characters/4), or the number of
// ids for a prompt given as ids.
func (p promptText) tokens() int {
	if p.ids != nil {
		return len(p.ids)
	}
	return (utf8.RuneCountInString(p.text) + 3) / 4
}

// pieces returns the prompt's tokens: 4-character pieces of the text, with
// ids hashed above the vocabulary, or the given ids with their vocabulary
// text.
func (p promptText) pieces() []candidate {
	if p.ids != nil {
		out := make([]candidate, len(p.ids))
		for i, id := range p.ids {
			out[i] = candidate{id: id, text: idText(id)}
		}
		return out
	}
	out := make([]candidate, 0, p.tokens())
	for s := p.text; s != ""; {
		end, n := 0, 0
		for end < len(s) && n < 4 {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
			n++
		}
		piece := s[:end]
		h := fnv.New32a()
		h.Write([]byte(piece))
		out = append(out, candidate{id: promptIDBase + int(h.Sum32()%(promptIDSpace-promptIDBase)), text: piece})
		s = s[end:]
	}
	return out
}

// idText is the text of a token id given by a client.
func idText(id int) string {
	if id >= 0 && id < len(vocab) {
		return vocab[id]
	}
	if id >= byteIDBase && id < byteIDBase+256 {
		return string([]byte{byte(id - byteIDBase)})
	}
	return "<" + strconv.Itoa(id) + ">"
}

// promptScores returns the prompt's tokens with their logprobs, as vLLM's
// prompt_logprobs and TGI's prefill list them; the first has none.
func (m lm) promptScores(p promptText, k int) []step {
	pieces := p.pieces()
	out := make([]step, len(pieces))
	h := fnvOffset64
	for i, pc := range pieces {
		if i == 0 {
			out[i] = step{candidate: pc}
		} else {
			out[i] = m.score(uint64(h), pc.id, pc.text, k)
		}
		h.write(pc.text)
	}
	return out
}
