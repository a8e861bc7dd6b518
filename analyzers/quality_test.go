package analyzers

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// feeder sends chat requests with logprobs to a simulator and hands each
// exchange to a Pipeline the way the gateway does, placing it on a
// simulated clock so that hours of traffic take seconds. The simulator's
// handler is called in process (httptest.NewRecorder, no sockets): the
// statistical tests built on it send tens of thousands of requests, a
// loopback round trip per request cost more than a third of their CPU time
// under -race, and the HTTP path is not what they are about (the gateway's
// and the simulator's own tests cover it).
type feeder struct {
	t    *testing.T
	sim  *sim.Server
	h    http.Handler // the simulator's handler
	p    *Pipeline
	now  time.Time
	step time.Duration
	n    int
}

func newFeeder(t *testing.T, cfg config.Analyzers, rate float64) *feeder {
	t.Helper()
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	s := sim.New(sim.Options{Model: "m", Seed: 5, Knobs: k})
	f := &feeder{t: t, sim: s, h: s.Handler(), now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC),
		step: time.Duration(float64(time.Second) / rate)}
	cfg.Drift.Enabled = false
	p, err := New(Options{Config: cfg, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

func (f *feeder) knobs(change func(*sim.Knobs)) {
	k := f.sim.Knobs()
	change(&k)
	f.sim.SetKnobs(k)
}

// send makes one request and returns the response body.
func (f *feeder) send() []byte {
	f.n++
	body := fmt.Sprintf(`{"model":"m","max_tokens":24,"logprobs":true,"top_logprobs":5,"messages":[{"role":"user","content":"question %d about the system"}]}`, f.n)
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	out := rec.Body.Bytes()
	r := &exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: f.now, Body: []byte(body)}
	f.p.OnRequest(r)
	f.p.OnResponse(r, &exchange.Response{Status: rec.Code, Latency: 800 * time.Millisecond, Body: out, CompletionTokens: 24})
	f.now = f.now.Add(f.step)
	return out
}

// run sends n requests, evaluating every interval of simulated time, and
// returns the request counts (from the first of this run) at which state
// became true.
func (f *feeder) run(n int, state func(*Signals) bool) []int {
	var hits []int
	next := f.now.Add(f.p.cfg.Interval)
	was := false
	for i := range n {
		f.send()
		if !f.now.Before(next) {
			next = next.Add(f.p.cfg.Interval)
			on := state(f.p.Evaluate())
			if on && !was {
				hits = append(hits, i+1)
			}
			was = on
		}
	}
	return hits
}

func decayed(s *Signals) bool { return s.Confidence.State == confidence.StateDecay }
func outputDrift(s *Signals) bool {
	return s.Output.State == output.StateDrift
}

// TestConfidenceDetection measures the targets of the confidence
// signal, with the simulator answering (prompts at 5/s of simulated time,
// default settings): stationary traffic raises nothing; a 10% drop of the
// simulator's confidence, and separately quantization-like noise (σ 0.5)
// on its logprobs, are flagged within 500 responses. Figures are logged with -v.
func TestConfidenceDetection(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	tests := []struct {
		name   string
		change func(*sim.Knobs)
	}{
		{"confidence -10%", func(k *sim.Knobs) { k.Confidence *= 0.9 }},
		{"noise 0.5", func(k *sim.Knobs) { k.Noise = 0.5 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeeder(t, config.Default().Analyzers, 5)
			if hits := f.run(3000, decayed); len(hits) > 0 {
				t.Errorf("stationary: decay raised after %v responses", hits)
			}
			f.knobs(tt.change)
			hits := f.run(1500, decayed)
			if len(hits) == 0 {
				t.Fatalf("not flagged within 1500 responses: %+v", f.p.Evaluate().Confidence)
			}
			d := f.p.Evaluate().Confidence
			t.Logf("%s: flagged %d responses after the change (drop %.3f, p %.3g)", tt.name, hits[0], float64(d.Drop), float64(d.PValue))
			if hits[0] > 500 {
				t.Errorf("flagged after %d responses, want within 500", hits[0])
			}
		})
	}
}

// TestOutputDriftDetection: a stable hour, then the simulator's confidence
// falls 10% (perplexity rises): the alarm comes after the configured five
// minutes outside the ±3σ band, not before, and never in the stable hour.
func TestOutputDriftDetection(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	f := newFeeder(t, config.Default().Analyzers, 2)
	if hits := f.run(2*3600, outputDrift); len(hits) > 0 {
		t.Errorf("stable hour: output drift raised after %v responses", hits)
	}
	f.knobs(func(k *sim.Knobs) { k.Confidence *= 0.9 })
	hits := f.run(20*60*2, outputDrift)
	if len(hits) == 0 {
		t.Fatalf("no alarm in 20 minutes: %+v", f.p.Evaluate().Output)
	}
	after := time.Duration(hits[0]) * f.step
	o := f.p.Evaluate().Output
	t.Logf("output drift: alarm %v after the change (perplexity %.4f, baseline %.4f ± %.4f)", after, float64(o.Perplexity), float64(o.BaselineMean), float64(o.BaselineStd))
	if after < 5*time.Minute || after > 7*time.Minute {
		t.Errorf("alarm %v after the change, want after the 5 minutes outside the band and within 7", after)
	}
}
