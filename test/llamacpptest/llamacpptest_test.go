package llamacpptest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// texts are the sequences the divergence figures are measured on.
var texts = []string{
	"the people of the world said that water is little and long. hello world, what time is it now?",
	"we can make a model that will find the first words of his time, if you use it.",
	"Yes: 1, 2, 3! How many people were there when she made it over the water?",
}

func TestLlamaWriteModels(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	m, err := WriteModels(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("three models written in %v", time.Since(start))
	m2, err := WriteModels(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{m.F32, m2.F32}, {m.Q8_0, m2.Q8_0}, {m.Q4_0, m2.Q4_0}} {
		a, b := sum(t, p[0]), sum(t, p[1])
		if a != b {
			t.Errorf("%s: the same seed wrote different files", p[0])
		}
		f, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if string(f[:4]) != "GGUF" || binary.LittleEndian.Uint32(f[4:]) != 3 {
			t.Errorf("%s: not a GGUF v3 file", p[0])
		}
	}
	if sum(t, m.F32) == sum(t, writeSeed(t, 2).F32) {
		t.Error("seeds 1 and 2 wrote the same weights")
	}
}

func writeSeed(t *testing.T, seed uint64) Models {
	m, err := WriteModels(t.TempDir(), seed)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sum(t *testing.T, path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestLlamaFP16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00},
		{0.1, 0x2e66}, {5.960464477539063e-08, 0x0001}, {6.103515625e-05, 0x0400},
		{1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, // halfway: to even
	} {
		if got := fp16(c.in); got != c.want {
			t.Errorf("fp16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

// TestLlamaQuantizers decodes the blocks back and checks ggml's error
// bounds: half a step for q8_0; for q4_0 half a step, except the value of
// largest magnitude, which ggml maps to -8 exactly.
func TestLlamaQuantizers(t *testing.T) {
	r := &rng{s: 7}
	x := make([]float32, 4*qk)
	for i := range x {
		x[i] = float32(r.norm())
	}
	q8 := quantizeQ8_0(x)
	q4 := quantizeQ4_0(x)
	if len(q8) != 4*34 || len(q4) != 4*18 {
		t.Fatalf("block sizes: q8_0 %d bytes, q4_0 %d bytes", len(q8), len(q4))
	}
	for b := range 4 {
		blk := x[b*qk : (b+1)*qk]
		d8 := half(binary.LittleEndian.Uint16(q8[b*34:]))
		d4 := half(binary.LittleEndian.Uint16(q4[b*18:]))
		for j, v := range blk {
			got8 := float32(int8(q8[b*34+2+j])) * d8
			if e := math.Abs(float64(got8 - v)); e > float64(d8)*0.5+1e-3 {
				t.Errorf("q8_0 block %d value %d: %g decodes as %g", b, j, v, got8)
			}
			nib := q4[b*18+2+j%16]
			if j >= 16 {
				nib >>= 4
			}
			got4 := float32(int(nib&15)-8) * d4
			if e := math.Abs(float64(got4 - v)); e > math.Abs(float64(d4))*0.5+1e-2 {
				t.Errorf("q4_0 block %d value %d: %g decodes as %g (d %g)", b, j, v, got4, d4)
			}
		}
	}
}

// half decodes a normal IEEE binary16 value (enough for block scales).
func half(h uint16) float32 {
	sign := float32(1)
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10&0x1f) - 15
	return sign * float32(math.Ldexp(1+float64(h&0x3ff)/1024, exp))
}

// models writes the three models once per test.
func models(t *testing.T) Models {
	start := time.Now()
	m, err := WriteModels(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("models written in %v", time.Since(start))
	return m
}

func TestLlamaServer(t *testing.T) {
	if os.Getenv(EnvDir) == "" {
		t.Skip(EnvDir + " unset: run ./test/run, which installs node-llama-cpp (llama.cpp) for these tests")
	}
	m := models(t)
	start := time.Now()
	s := Start(t, m.Q8_0, "tiny-q8")
	t.Logf("server started in %v", time.Since(start))

	var list struct {
		Object string
		Data   []struct{ ID, Object, OwnedBy string }
	}
	get(t, s.URL()+"/v1/models", &list)
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "tiny-q8" {
		t.Errorf("/v1/models = %+v", list)
	}

	messages := []map[string]string{{"role": "user", "content": "hello world, what time is it now?"}}
	var tok struct {
		Count       int
		MaxModelLen int `json:"max_model_len"`
		Tokens      []int
	}
	post(t, s.URL()+"/tokenize", map[string]any{"model": "tiny-q8", "messages": messages, "add_generation_prompt": true}, &tok)
	if tok.Count != len(tok.Tokens) || tok.Count < 10 || tok.Tokens[0] != BOSID || tok.MaxModelLen != nCtx {
		t.Fatalf("/tokenize = %+v", tok)
	}
	var plain struct{ Tokens []int }
	post(t, s.URL()+"/tokenize", map[string]any{"prompt": "hello world", "add_special_tokens": false}, &plain)
	if len(plain.Tokens) != 2 || slices.Contains(plain.Tokens, BOSID) {
		t.Errorf("/tokenize of %q without special tokens = %v, want two word tokens", "hello world", plain.Tokens)
	}

	// A greedy chat completion of 32 tokens, with token ids.
	const n, k = 32, 5
	var chat chatResponse
	start = time.Now()
	post(t, s.URL()+"/v1/chat/completions", map[string]any{
		"model": "tiny-q8", "messages": messages, "max_tokens": n, "temperature": 0,
		"logprobs": true, "top_logprobs": k, "return_tokens_as_token_ids": true,
	}, &chat)
	t.Logf("chat completion of %d tokens in %v", chat.Usage.CompletionTokens, time.Since(start))
	c := chat.Choices[0]
	content := c.Logprobs.Content
	if chat.Usage.PromptTokens != tok.Count || chat.Usage.CompletionTokens != len(content) || len(content) == 0 {
		t.Fatalf("usage %+v, %d logprobs, tokenize counted %d", chat.Usage, len(content), tok.Count)
	}
	if c.FinishReason == "length" && len(content) != n {
		t.Errorf("finish_reason length after %d tokens, want %d", len(content), n)
	}
	gen := make([]int, len(content))
	for i, e := range content {
		gen[i] = tokenID(t, e.Token)
		if len(e.TopLogprobs) != k {
			t.Fatalf("token %d: %d top_logprobs, want %d", i, len(e.TopLogprobs), k)
		}
		for j := 1; j < k; j++ {
			if e.TopLogprobs[j].Logprob > e.TopLogprobs[j-1].Logprob {
				t.Errorf("token %d: top_logprobs not sorted: %+v", i, e.TopLogprobs)
			}
		}
		// Greedy: the chosen token is the most likely one.
		if e.TopLogprobs[0].Token != e.Token || e.TopLogprobs[0].Logprob != e.Logprob {
			t.Errorf("token %d: greedy chose %s (%g), most likely is %+v", i, e.Token, e.Logprob, e.TopLogprobs[0])
		}
		if e.Logprob > 0 || e.Logprob < -30 {
			t.Errorf("token %d: logprob %g", i, e.Logprob)
		}
	}
	if !strings.HasPrefix(content[0].Token, "token_id:") {
		t.Errorf("token = %q, want vLLM's token_id:<id>", content[0].Token)
	}

	// Teacher forcing: scoring the prompt followed by the generated tokens
	// gives, at each generated position, the logprob generation reported.
	// Tolerance 1e-3 nats: one batch and token-by-token decoding take
	// different matrix-multiplication paths in llama.cpp (float32 sums in
	// another order), never more than ~1e-4 apart in practice.
	ids := append(slices.Clone(tok.Tokens), gen...)
	var score completionResponse
	start = time.Now()
	post(t, s.URL()+"/v1/completions", map[string]any{
		"model": "tiny-q8", "prompt": ids, "max_tokens": 0, "prompt_logprobs": k,
	}, &score)
	t.Logf("prompt_logprobs of %d tokens in %v", len(ids), time.Since(start))
	pl := score.Choices[0].PromptLogprobs
	if len(pl) != len(ids) || pl[0] != nil || score.Usage.PromptTokens != len(ids) || score.Usage.CompletionTokens != 0 {
		t.Fatalf("prompt_logprobs: %d entries (first %v) for %d tokens, usage %+v", len(pl), pl[0], len(ids), score.Usage)
	}
	var maxDiff float64
	for i := 1; i < len(ids); i++ {
		e := pl[i][strconv.Itoa(ids[i])]
		if e == nil || len(pl[i]) > k+1 || len(pl[i]) < k {
			t.Fatalf("prompt_logprobs[%d] = %v: want token %d and the top %d", i, pl[i], ids[i], k)
		}
		ranks := 0
		for _, v := range pl[i] {
			if v.Rank <= k {
				ranks++
			}
		}
		if ranks != k {
			t.Errorf("prompt_logprobs[%d]: %d entries ranked 1..%d, want %d", i, ranks, k, k)
		}
		if g := i - len(tok.Tokens); g >= 0 {
			d := math.Abs(e.Logprob - content[g].Logprob)
			maxDiff = max(maxDiff, d)
			if d > 1e-3 {
				t.Errorf("generated token %d: prompt_logprob %g, generation logprob %g", g, e.Logprob, content[g].Logprob)
			}
			if e.Rank != 1 {
				t.Errorf("generated token %d: rank %d when scored, want 1 (greedy)", g, e.Rank)
			}
		}
	}

	t.Logf("teacher forcing: generation and scoring logprobs differ by at most %.2g", maxDiff)

	// Scoring time of a 64-token prompt.
	ids64 := append(slices.Clone(ids), ids[1:]...)[:64]
	start = time.Now()
	post(t, s.URL()+"/v1/completions", map[string]any{"prompt": ids64, "max_tokens": 0, "prompt_logprobs": k}, &score)
	t.Logf("prompt_logprobs of %d tokens in %v", len(score.Choices[0].PromptLogprobs), time.Since(start))

	// The OpenAI completions shape, with echo.
	var comp completionResponse
	post(t, s.URL()+"/v1/completions", map[string]any{
		"model": "tiny-q8", "prompt": "hello world", "max_tokens": 4, "logprobs": 2, "echo": true,
	}, &comp)
	lp := comp.Choices[0].Logprobs
	if lp == nil || len(lp.Tokens) != comp.Usage.TotalTokens || lp.TokenLogprobs[0] != nil || lp.TopLogprobs[0] != nil ||
		len(lp.TextOffset) != len(lp.Tokens) || !strings.HasPrefix(comp.Choices[0].Text, " hello world") {
		t.Errorf("echo completion = %+v", comp.Choices[0])
	}
	for i := 1; i < len(lp.Tokens); i++ {
		if lp.TokenLogprobs[i] == nil || len(lp.TopLogprobs[i]) < 2 || len(lp.TopLogprobs[i]) > 3 {
			t.Errorf("logprobs at %d: %v %v", i, lp.TokenLogprobs[i], lp.TopLogprobs[i])
		}
	}

	// Errors are OpenAI error bodies.
	for _, c := range []struct {
		path   string
		body   map[string]any
		status int
	}{
		{"/v1/chat/completions", map[string]any{"model": "tiny-q8", "messages": messages, "stream": true}, 400},
		{"/v1/completions", map[string]any{"model": "nope", "prompt": "x"}, 404},
		{"/v1/completions", map[string]any{"prompt": []int{1, 99999}}, 400},
		{"/v1/completions", map[string]any{"prompt": "x", "max_tokens": 5000}, 400},
	} {
		status, body := do(t, http.MethodPost, s.URL()+c.path, c.body)
		var e struct {
			Error struct{ Message, Type string }
		}
		if err := json.Unmarshal(body, &e); status != c.status || err != nil || e.Error.Message == "" {
			t.Errorf("POST %s %v: %d %s, want %d and an error body", c.path, c.body, status, body, c.status)
		}
	}
}

// TestLlamaDivergence measures llama.cpp's own full-vocabulary divergence
// of the quantized copies from f32. Bounds are loose (×5 around the
// figures measured with seed 1): they catch a broken quantizer or a model
// whose distributions became flat or one-hot, not small drift.
func TestLlamaDivergence(t *testing.T) {
	if os.Getenv(EnvDir) == "" {
		t.Skip(EnvDir + " unset: run ./test/run, which installs node-llama-cpp (llama.cpp) for these tests")
	}
	m := models(t)
	start := time.Now()
	q8 := Reference(t, m.F32, m.Q8_0, texts...)
	t.Logf("q8_0 vs f32: %v (%v)", q8, time.Since(start))
	q4 := Reference(t, m.F32, m.Q4_0, texts...)
	t.Logf("q4_0 vs f32: %v", q4)
	if !(q8.KLMean < q4.KLMean) || q8.Top1Agreement < q4.Top1Agreement {
		t.Errorf("q8_0 (%v) should stay closer to f32 than q4_0 (%v)", q8, q4)
	}
	if q8.KLMean < 2e-4 || q8.KLMean > 0.01 {
		t.Errorf("q8_0 KL %g, want about 0.002", q8.KLMean)
	}
	if q4.KLMean < 0.05 || q4.KLMean > 1.5 {
		t.Errorf("q4_0 KL %g, want about 0.3", q4.KLMean)
	}
	if q8.RefTop1Prob < 0.05 || q8.RefTop1Prob > 0.6 {
		t.Errorf("mean top-1 probability %g, want distributions neither flat nor one-hot", q8.RefTop1Prob)
	}
	self := Reference(t, m.F32, m.F32, texts[0])
	if self.KLMean > 1e-6 || self.Top1Agreement != 1 {
		t.Errorf("f32 vs itself: %v", self)
	}
}

type logprobEntry struct {
	Token   string
	Logprob float64
	Bytes   []int
}

type chatResponse struct {
	Choices []struct {
		Message      struct{ Role, Content string }
		FinishReason string `json:"finish_reason"`
		Logprobs     struct {
			Content []struct {
				logprobEntry
				TopLogprobs []logprobEntry `json:"top_logprobs"`
			}
		}
	}
	Usage usage
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type promptLogprob struct {
	Logprob      float64
	Rank         int
	DecodedToken string `json:"decoded_token"`
}

type completionResponse struct {
	Choices []struct {
		Text     string
		Logprobs *struct {
			Tokens        []string
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
			TextOffset    []int                `json:"text_offset"`
		}
		FinishReason   string                      `json:"finish_reason"`
		PromptLogprobs []map[string]*promptLogprob `json:"prompt_logprobs"`
	}
	Usage usage
}

func tokenID(t *testing.T, s string) int {
	id, err := strconv.Atoi(strings.TrimPrefix(s, "token_id:"))
	if err != nil {
		t.Fatalf("token %q: %v", s, err)
	}
	return id
}

func do(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func get(t *testing.T, url string, out any) {
	t.Helper()
	decode(t, "GET "+url, http.MethodGet, url, nil, out)
}

func post(t *testing.T, url string, body, out any) {
	t.Helper()
	decode(t, "POST "+url, http.MethodPost, url, body, out)
}

func decode(t *testing.T, what, method, url string, body, out any) {
	t.Helper()
	status, b := do(t, method, url, body)
	if status != http.StatusOK {
		t.Fatalf("%s: %d %s", what, status, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v in %s", what, err, b)
	}
}
