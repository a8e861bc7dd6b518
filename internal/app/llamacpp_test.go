package app

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/test/llamacpptest"
)

// llamaPrompts are the clients' questions of TestPrecisionLlamaCpp.
var llamaPrompts = []string{
	"Tell me about the sea and the ships that sail on it.",
	"What is the time in the city when the sun goes down?",
	"Write a short story about a dog who wanted to fly.",
	"Why do people like to read books in the evening?",
	"Explain how water turns into ice in the winter.",
	"List the things a child needs for the first day at school.",
	"How would you describe the color of the sky to a friend?",
	"What makes a good home for a family of four?",
	"Give me three reasons to walk to work every day.",
	"What did the old man say to the young woman at the door?",
}

// TestPrecisionLlamaCpp: signal 5 against a real inference engine. Three
// llama.cpp servers (node-llama-cpp) serve the same tiny random-weight
// model at f32 (the reference), q8_0 and q4_0, made by the test. Clients'
// chat requests go through the gateway to q8_0 and q4_0; every one is
// compared by teacher forcing with default thresholds. q8_0 must read
// KL < 0.01 and `ok`, q4_0 more than 20× its KL, an agreement below 0.8
// and below q8_0's, and `divergent`. llama.cpp's own full-vocabulary
// comparison of the files is logged beside Vigil's figures.
func TestPrecisionLlamaCpp(t *testing.T) {
	m, err := llamacpptest.WriteModels(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	const model = "tiny"
	f32 := llamacpptest.Start(t, m.F32, model)
	q8 := llamacpptest.Start(t, m.Q8_0, model)
	q4 := llamacpptest.Start(t, m.Q4_0, model)

	cfg := testConfig(f32.URL())
	cfg.Backends[0].Name = "f32"
	cfg.Backends[0].Models = []string{"unrouted"} // the reference serves shadows only
	for _, b := range []struct{ name, url string }{{"q8_0", q8.URL()}, {"q4_0", q4.URL()}} {
		cfg.Backends = append(cfg.Backends, config.Backend{Name: b.name, URL: b.url, Kind: "openai", Weight: 100,
			Reference: "f32", Models: []string{model}})
	}
	cfg.Balancer.Strategy = config.StrategyRoundRobin
	pc := &cfg.Analyzers.Precision
	pc.SampleRatio, pc.Concurrency = 1, 100 // every request compared; the defaults otherwise
	cfg.Analyzers.Consecutive = 1
	a, gwURL := startApp(t, cfg)

	const rounds = 2 // 2 × 10 prompts: 10 comparisons of 32 tokens per backend
	for r := range rounds {
		for i, p := range llamaPrompts {
			body := fmt.Sprintf(`{"model":%q,"max_tokens":32,"messages":[{"role":"user","content":%q}]}`, model, fmt.Sprintf("%s (%d)", p, r*len(llamaPrompts)+i))
			resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("client got %d %s", resp.StatusCode, b)
			}
		}
	}
	var p map[string]precision.PairResult
	// The comparisons run off the request path, each a scoring request to
	// the reference engine; two minutes only stop a hang.
	if !testutil.Poll(2*time.Minute, 100*time.Millisecond, func() bool {
		p = precisionPairs(a)
		return p["q8_0"].Responses >= int64(rounds*len(llamaPrompts)/2) && p["q4_0"].Responses >= int64(rounds*len(llamaPrompts)/2)
	}) {
		t.Fatalf("timed out waiting for the comparisons: %+v", p)
	}
	q8r, q4r := p["q8_0"], p["q4_0"]
	for _, r := range []precision.PairResult{q8r, q4r} {
		t.Logf("vigil %s vs f32: %s, KL %.4g (lower bound %.4g, max %.3g), top-1 agreement %.3f over %d positions of %d responses, state %s",
			r.Backend, r.Method, r.KL, r.KLLowerBound, r.KLMax, r.Top1Agreement, r.Tokens, r.Responses, r.State)
		if r.Method != precision.MethodTeacherForced {
			t.Errorf("%s: method %q, want teacher_forced", r.Backend, r.Method)
		}
	}
	t.Logf("llama.cpp q8_0 vs f32: %s", llamacpptest.Reference(t, m.F32, m.Q8_0, llamaPrompts...))
	t.Logf("llama.cpp q4_0 vs f32: %s", llamacpptest.Reference(t, m.F32, m.Q4_0, llamaPrompts...))

	if !(q8r.KL < 0.01) || q8r.State != precision.StateOK {
		t.Errorf("q8_0: KL %.4g, state %s; want < 0.01 and ok", q8r.KL, q8r.State)
	}
	if ratio := float64(q4r.KL / q8r.KL); !(ratio > 20) {
		t.Errorf("KL(q4_0) / KL(q8_0) = %.3g, want > 20", ratio)
	}
	if !(q4r.Top1Agreement < q8r.Top1Agreement) || !(q4r.Top1Agreement < 0.8) {
		t.Errorf("top-1 agreement q8_0 %.3f, q4_0 %.3f; want q4_0 below q8_0 and below 0.8", q8r.Top1Agreement, q4r.Top1Agreement)
	}
	if q4r.State != precision.StateDivergent {
		t.Errorf("q4_0: state %s, want divergent", q4r.State)
	}
}
