package analyzers

import (
	"math"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// answer is a good answer with a time to first token and, for a stream,
// the longest pause within it (0: not a stream).
func answer(ttft, maxGap time.Duration) *exchange.Response {
	r := &exchange.Response{Status: 200, TTFT: ttft, FirstToken: ttft, Latency: ttft + 10*maxGap}
	if maxGap > 0 {
		r.Gaps = exchange.Gaps{Count: 10, P50: maxGap / 2, P95: maxGap, Max: maxGap}
	}
	return r
}

// TestSlowness: a backend's slowness is its median time to first token,
// or longest pause in a stream, over its peers', whichever is larger,
// from its latest answers within the window, with enough of them.
func TestSlowness(t *testing.T) {
	ms := time.Millisecond
	now := time.Unix(1000, 0)
	type batch struct {
		backend   string
		n         int
		ttft, gap time.Duration
		age       time.Duration // before now
	}
	tests := []struct {
		name    string
		batches []batch
		want    map[string]float64 // absent: no slowness
	}{
		{"alike", []batch{{"a", 8, 60 * ms, 15 * ms, 0}, {"b", 8, 60 * ms, 15 * ms, 0}, {"c", 8, 60 * ms, 15 * ms, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"one backend's TTFT ×30", []batch{{"a", 8, 60 * ms, 15 * ms, 0}, {"b", 8, 1800 * ms, 15 * ms, 0}, {"c", 8, 60 * ms, 15 * ms, 0}},
			map[string]float64{"a": 1, "b": 30, "c": 1}}, // a and c: their pauses are their peers'
		{"one backend stalls mid-stream", []batch{{"a", 8, 60 * ms, 15 * ms, 0}, {"b", 8, 60 * ms, 3000 * ms, 0}, {"c", 8, 60 * ms, 15 * ms, 0}},
			map[string]float64{"a": 1, "b": 200, "c": 1}},
		{"every backend ×10: none slower than the others", []batch{{"a", 8, 600 * ms, 15 * ms, 0}, {"b", 8, 600 * ms, 15 * ms, 0}, {"c", 8, 600 * ms, 15 * ms, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"too few answers of b: b has none", []batch{{"a", 8, 60 * ms, 0, 0}, {"b", minSlowSamples - 1, 1800 * ms, 0, 0}, {"c", 8, 60 * ms, 0, 0}},
			// a's peers: 8 × 60 and 3 × 1800 ms; their upper quartile
			// (numpy's, at 7.5 of 0…10) 930 ms.
			map[string]float64{"a": 60.0 / 930, "c": 60.0 / 930}},
		{"b's slow answers older than the window do not count", []batch{{"a", 8, 60 * ms, 0, 0}, {"b", 8, 1800 * ms, 0, 2 * time.Minute}, {"c", 8, 60 * ms, 0, 0}},
			map[string]float64{"a": 1, "c": 1}},
		{"a Messages stream's first byte is no first token", []batch{{"b", 8, 60 * ms, 15 * ms, 0}, {"m", 16, 60 * ms, 15 * ms, 0}},
			map[string]float64{"b": 1, "m": 1}},
		{"only b's latest speedSamples answers count", []batch{{"a", 8, 60 * ms, 0, 0}, {"b", 30, 1800 * ms, 0, 10 * time.Second}, {"b", speedSamples, 60 * ms, 0, 0}, {"c", 8, 60 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpeeds()
			for _, b := range tt.batches {
				for range b.n {
					ans := answer(b.ttft, b.gap)
					if b.backend == "m" { // a Messages stream: message_start at once
						ans.TTFT = time.Millisecond
					}
					s.add(b.backend, now.Add(-b.age), ans)
				}
			}
			got := s.slowness(now, time.Minute, time.Second)
			if len(got) != len(tt.want) {
				t.Errorf("slowness %v, want %v", got, tt.want)
			}
			for name, w := range tt.want {
				if g, ok := got[name]; !ok || math.Abs(g-w) > 1e-9*w {
					t.Errorf("%s: slowness %v (%v), want %v", name, g, ok, w)
				}
			}
		})
	}
}

// TestSlownessSameSpan: when a slowdown of every backend ends, a backend
// with few answers still has slow ones among its latest while busy peers'
// latest are all fast; read over the same span of time, the two sides
// hold the slowdown alike, and the sparse backend is not slow.
func TestSlownessSameSpan(t *testing.T) {
	now := time.Unix(1000, 0)
	end := now.Add(-1500 * time.Millisecond) // the slowdown's end
	ttft := func(at time.Time) time.Duration {
		if at.Before(end) {
			return 600 * time.Millisecond
		}
		return 60 * time.Millisecond
	}
	s := newSpeeds()
	for i := 30 * 20; i > 0; i-- { // a and c: 20 answers a second for 30 s
		at := now.Add(-time.Duration(i) * 50 * time.Millisecond)
		s.add("a", at, answer(ttft(at), 0))
		s.add("c", at, answer(ttft(at), 0))
	}
	for i := 8; i > 0; i-- { // b: one a second
		at := now.Add(-time.Duration(i) * time.Second)
		s.add("b", at, answer(ttft(at), 0))
	}
	got := s.slowness(now, time.Minute, time.Second)
	if got["b"] > 1.5 {
		t.Errorf("b's slowness %v after a slowdown of every backend, want about 1", got["b"])
	}
	// b's latest 4 answers, 3 slow and 1 fast, span 4 s, in which the
	// others' answers are five eighths slow. Their latest 16 alone, all
	// fast, would make b 7.75 times slower.
	if _, ok := got["a"]; !ok {
		t.Errorf("a has no slowness: %v", got)
	}
}

// TestBackendSlowAlert: VigilBackendSlow fires for the backend that
// answers 30 times slower than the others, not for them, and resolves
// once its latest answers are fast again; a fleet-wide slowdown fires it
// for none.
func TestBackendSlowAlert(t *testing.T) {
	cfg := config.Default()
	cfg.Alerts.Consecutive = 1
	period := cfg.Alerts.Period
	now := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	backends := []config.Backend{{Name: "a", Models: []string{"m"}}, {Name: "b", Models: []string{"m"}}, {Name: "c", Models: []string{"m"}}}
	p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now }, Backends: backends})
	if err != nil {
		t.Fatal(err)
	}
	send := func(backend string, n int, ttft time.Duration) {
		for range n {
			ans := answer(ttft, 10*time.Millisecond)
			// Answered now: the span compared is the backend's latest
			// answers'.
			p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: backend, Start: now.Add(-ans.Latency), Stream: true}, ans)
			// Non-streamed answers do not count: their first byte is
			// their last.
			p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: now.Add(-time.Second)},
				answer(100*ttft, 0))
		}
	}
	state := func(backend string) alert.State {
		for _, a := range p.alerts.Alerts() {
			if a.Rule == alert.RuleBackendSlow && a.Labels["backend"] == backend {
				return a.State
			}
		}
		return ""
	}
	step := func(what string, want map[string]alert.State) {
		t.Helper()
		p.ObserveAlerts(t.Context())
		for name, w := range want {
			if got := state(name); got != w {
				t.Errorf("%s: %s's backend_slow %q, want %q", what, name, got, w)
			}
		}
		now = now.Add(period + time.Second) // the last period's answers out of the span
	}
	ms := time.Millisecond
	send("a", 10, 600*ms)
	send("b", 10, 600*ms)
	send("c", 10, 600*ms)
	step("every backend slow alike", map[string]alert.State{"a": "", "b": "", "c": ""})
	send("a", 10, 60*ms)
	send("b", 10, 1800*ms)
	send("c", 10, 60*ms)
	step("b ×30", map[string]alert.State{"a": "", "b": alert.Firing, "c": ""})
	send("a", 10, 60*ms)
	send("b", speedSamples, 60*ms)
	send("c", 10, 60*ms)
	step("b fast again", map[string]alert.State{"a": "", "b": alert.Resolved, "c": ""})
}
