package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/shadow"
	"github.com/vigil-gw/vigil/sim"
)

// startCalledSim serves a simulator of model m1 behind a spy that answers
// 404 on the refused paths.
func startCalledSim(t *testing.T, knobs func(*sim.Knobs), refuse ...string) (*spy, string) {
	t.Helper()
	s, _ := startSim(t, "m1", knobs)
	sp := &spy{refuse: map[string]bool{}}
	for _, p := range refuse {
		sp.refuse[p] = true
	}
	srv := httptest.NewServer(sp.wrap(s.Handler()))
	t.Cleanup(srv.Close)
	return sp, srv.URL
}

// shadows is a shadow.Sink that keeps every comparison.
type shadows struct {
	mu  sync.Mutex
	got []*exchange.Shadow
}

func (s *shadows) OnShadow(sh *exchange.Shadow) {
	s.mu.Lock()
	s.got = append(s.got, sh)
	s.mu.Unlock()
}

func (s *shadows) wait(t *testing.T, n int) []*exchange.Shadow {
	t.Helper()
	var out []*exchange.Shadow
	waitFor(t, "the shadow comparisons", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		out = append(out[:0], s.got...)
		return len(out) >= n
	})
	return out
}

// precisionPair starts a gateway with backend q (knobs) naming ref as its
// reference, every request compared with up to 8 tokens.
func precisionPair(t *testing.T, q, ref string) (*testGateway, *shadows) {
	t.Helper()
	sink := &shadows{}
	b := backend("q", q, "m1")
	b.Reference = "ref"
	// Clients' m1 requests go to q only; shadow requests reach ref
	// directly, for the model the client asked (m1, which it serves).
	r := backend("ref", ref, "unrouted")
	gw := startGateway(t, []config.Backend{b, r}, func(c *config.Config) {
		c.Balancer.Strategy = config.StrategyRoundRobin
		p := &c.Analyzers.Precision
		p.SampleRatio, p.MaxTokens, p.TopLogprobs = 1, 8, 5
	}, func(o *Options) { o.Shadow = sink })
	return gw, sink
}

// TestShadowTeacherForced: the backend and the reference score the
// backend's own greedy continuation, by token id, on the prompt as the
// reference tokenized it; the reference generates nothing. Where the
// client's answer names token ids, the backend generates no shadow copy.
func TestShadowTeacherForced(t *testing.T) {
	qc, q := startCalledSim(t, func(k *sim.Knobs) { k.Noise = 0.5 })
	rc, ref := startCalledSim(t, nil)
	gw, sink := precisionPair(t, q, ref)

	chat := `{"model":"m1","max_tokens":6,"messages":[{"role":"user","content":"Tell me about the sea"}]}`
	if code, _, b := post(t, gw.URL+"/v1/chat/completions", chat); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	sh := sink.wait(t, 1)[0]
	if sh.Method != exchange.ShadowTeacherForced {
		t.Fatalf("method %q, want teacher_forced", sh.Method)
	}
	if got := rc.list("/v1/chat/completions"); len(got) != 0 {
		t.Errorf("the reference generated: %q", got)
	}
	tok, scored := rc.list("/tokenize"), rc.list("/v1/completions")
	if len(tok) != 1 || !strings.Contains(tok[0], `"messages":[{"role":"user","content":"Tell me about the sea"}]`) || len(scored) != 1 {
		t.Fatalf("reference requests: tokenize %q, completions %q", tok, scored)
	}
	var score struct {
		Prompt         []int `json:"prompt"`
		MaxTokens      int   `json:"max_tokens"`
		PromptLogprobs int   `json:"prompt_logprobs"`
	}
	json.Unmarshal([]byte(strings.TrimPrefix(scored[0], "/v1/completions ")), &score)
	if score.MaxTokens != 1 || score.PromptLogprobs != 5 || len(score.Prompt) != sh.PromptTokens+8 {
		t.Errorf("scoring request %+v: want max_tokens 1, prompt_logprobs 5, %d prompt + 8 continuation ids", score, sh.PromptTokens)
	}
	if shadow := qc.list(`"return_tokens_as_token_ids":true`); len(shadow) != 1 {
		t.Errorf("backend shadow requests naming token ids: %d, want 1", len(shadow))
	}
	// The backend scores the same ids as the reference.
	if got := qc.list("/v1/completions"); len(got) != 1 || got[0] != scored[0] {
		t.Errorf("backend scoring requests %q, want the reference's %q", got, scored)
	}

	c, err := precision.FromShadow(sh)
	if err != nil || c.Compared != 8 || c.Method != precision.MethodTeacherForced || len(sh.Continuation) != 8 {
		t.Fatalf("FromShadow: %+v, %v, continuation %v; want 8 positions compared", c, err, sh.Continuation)
	}

	// The client asks for logprobs by token id itself: its answer is the
	// backend's side, and the backend sees no shadow request.
	own := `{"model":"m1","max_tokens":6,"logprobs":true,"top_logprobs":5,"return_tokens_as_token_ids":true,"messages":[{"role":"user","content":"And the mountains?"}]}`
	if code, _, b := post(t, gw.URL+"/v1/chat/completions", own); code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	sh = sink.wait(t, 2)[1]
	if sh.Method != exchange.ShadowTeacherForced {
		t.Fatalf("method %q, want teacher_forced", sh.Method)
	}
	if n := len(qc.list("/v1/chat/completions")); n != 3 {
		t.Errorf("backend chat requests: %d, want 3 (two clients', one shadow)", n)
	}
	if c, err := precision.FromShadow(sh); err != nil || c.Compared != 6 {
		t.Errorf("the client's 6-token answer: %d compared, %v; want 6", c.Compared, err)
	}

	// The backend named ids when asked: a client that asks for no
	// logprobs gets them asked for by id upstream and stripped from its
	// answer, which is the backend's side; its first max_tokens (8) are
	// compared.
	plain := `{"model":"m1","max_tokens":20,"messages":[{"role":"user","content":"And the rivers?"}]}`
	code, _, body := post(t, gw.URL+"/v1/chat/completions", plain)
	if code != 200 || shadow.HasTokenIDs(body) || !strings.Contains(string(body), `"logprobs":null`) {
		t.Fatalf("client got %d %s: want its answer without logprobs", code, body)
	}
	sh = sink.wait(t, 3)[2]
	if n := len(qc.list("/v1/chat/completions")); n != 4 {
		t.Errorf("backend chat requests: %d, want 4 (three clients', one shadow)", n)
	}
	if up := qc.list("And the rivers?"); len(up) != 1 || !strings.Contains(up[0], `"return_tokens_as_token_ids":true`) {
		t.Errorf("the client's request upstream: %q, want logprobs asked by token id", up)
	}
	if c, err := precision.FromShadow(sh); err != nil || c.Compared != 8 {
		t.Errorf("a 20-token answer: %d compared, %v; want 8", c.Compared, err)
	}
}

// TestShadowFallsBackToWalk: a reference without /tokenize is compared by
// the greedy walk, and is not asked to tokenize again for a while.
func TestShadowFallsBackToWalk(t *testing.T) {
	_, q := startCalledSim(t, func(k *sim.Knobs) { k.Noise = 0.5 })
	rc, ref := startCalledSim(t, nil, "/tokenize")
	gw, sink := precisionPair(t, q, ref)
	for i := range 2 {
		body := `{"model":"m1","max_tokens":6,"messages":[{"role":"user","content":"question ` + string(rune('a'+i)) + `"}]}`
		if code, _, b := post(t, gw.URL+"/v1/chat/completions", body); code != 200 {
			t.Fatalf("%d %s", code, b)
		}
		sink.wait(t, i+1)
	}
	for i, sh := range sink.wait(t, 2) {
		if sh.Method != exchange.ShadowGreedyWalk {
			t.Errorf("comparison %d: method %q, want greedy_walk", i, sh.Method)
		}
		if _, err := precision.ParseChat(sh.ReferenceBody); err != nil {
			t.Errorf("comparison %d: reference body: %v", i, err)
		}
	}
	if n := len(rc.list("/tokenize")); n != 1 {
		t.Errorf("/tokenize asked %d times, want once (then left alone)", n)
	}
}
