package analyzers

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// answer is a good streamed answer with a time to first token and the
// longest pause within it (0: a single chunk); its median pause is half
// the longest.
func answer(ttft, maxGap time.Duration) *exchange.Response {
	r := &exchange.Response{Status: 200, TTFT: ttft, FirstToken: ttft, Latency: ttft + 10*maxGap}
	if maxGap > 0 {
		r.Gaps = exchange.Gaps{Count: 10, P50: maxGap / 2, P95: maxGap, Max: maxGap}
	}
	return r
}

// whole is a good non-streamed answer: its latency and output tokens.
func whole(latency time.Duration, tokens int) *exchange.Response {
	return &exchange.Response{Status: 200, TTFT: latency, Latency: latency, CompletionTokens: tokens}
}

// TestSlowness: each of a backend's latest answers within the window is
// measured against the others' (a stream by its time to first token or
// longest pause, a non-streamed answer by its latency against the
// others' streams for as many tokens); its slowness is the largest ratio
// that three quarters of them reach, with enough of them.
func TestSlowness(t *testing.T) {
	ms := time.Millisecond
	now := time.Unix(1000, 0)
	type batch struct {
		backend   string
		n         int
		ttft, gap time.Duration // a non-streamed answer's latency in ttft, when tokens > 0
		tokens    int
		// age: the batch's n answers start evenly within the second
		// that ends age before now, none at its ends.
		age time.Duration
	}
	const notSlow = -1 // want: a slowness of at most 1
	tests := []struct {
		name    string
		batches []batch
		want    map[string]float64 // absent: no slowness
	}{
		{"alike", []batch{{"a", 16, 60 * ms, 15 * ms, 0, 0}, {"b", 8, 60 * ms, 15 * ms, 0, 0}, {"c", 16, 60 * ms, 15 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"one backend's TTFT ×30", []batch{{"a", 16, 60 * ms, 15 * ms, 0, 0}, {"b", 8, 1800 * ms, 15 * ms, 0, 0}, {"c", 16, 60 * ms, 15 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 30, "c": 1}}, // a and c: their pauses are their peers'
		{"one backend stalls mid-stream", []batch{{"a", 16, 60 * ms, 15 * ms, 0, 0}, {"b", 8, 60 * ms, 3000 * ms, 0, 0}, {"c", 16, 60 * ms, 15 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 200, "c": 1}},
		{"every backend ×10: none slower than the others", []batch{{"a", 16, 600 * ms, 15 * ms, 0, 0}, {"b", 8, 600 * ms, 15 * ms, 0, 0}, {"c", 16, 600 * ms, 15 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"too few answers of b: b has none", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", minSlowSamples - 1, 1800 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			// a's answers around b's are measured against b's too.
			map[string]float64{"a": notSlow, "c": notSlow}},
		{"three slow answers are enough", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 3, 1800 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": notSlow, "b": 30, "c": notSlow}},
		{"two slow of three are not", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 2, 1800 * ms, 0, 0, 0}, {"b", 1, 60 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": notSlow, "b": 1, "c": notSlow}},
		{"three slow of four are", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 3, 1800 * ms, 0, 0, 0}, {"b", 1, 60 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": notSlow, "b": 30, "c": notSlow}},
		{"two slow of four are not", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 2, 1800 * ms, 0, 0, 0}, {"b", 2, 60 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": notSlow, "b": 1, "c": notSlow}},
		{"b's slow answers older than the window do not count", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 8, 1800 * ms, 0, 0, 2 * time.Minute}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": 1, "c": 1}},
		{"a Messages stream's first byte is no first token", []batch{{"b", 16, 60 * ms, 15 * ms, 0, 0}, {"m", 16, 60 * ms, 15 * ms, 0, 0}},
			map[string]float64{"b": 1, "m": 1}},
		{"only b's latest speedSamples answers count", []batch{{"a", 16, 60 * ms, 0, 0, 0}, {"b", 30, 1800 * ms, 0, 0, 10 * time.Second}, {"b", speedSamples, 60 * ms, 0, 0, 0}, {"c", 16, 60 * ms, 0, 0, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		// a and c stream with a median pause of 15 ms: 32 tokens take
		// them 60 + 31 × 15 = 525 ms.
		{"non-streamed answers as fast as the others' streams", []batch{{"a", 16, 60 * ms, 30 * ms, 0, 0}, {"b", 8, 525 * ms, 0, 32, 0}, {"c", 16, 60 * ms, 30 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 1, "c": 1}},
		{"non-streamed answers of one backend with TTFT ×30", []batch{{"a", 16, 60 * ms, 30 * ms, 0, 0}, {"b", 8, (1800 + 31*15) * ms, 0, 32, 0}, {"c", 16, 60 * ms, 30 * ms, 0, 0}},
			map[string]float64{"a": 1, "b": 2265.0 / 525, "c": 1}},
		{"non-streamed answers need the others' streams", []batch{{"a", 16, 525 * ms, 0, 32, 0}, {"b", 8, 2265 * ms, 0, 32, 0}, {"c", 16, 525 * ms, 0, 32, 0}},
			map[string]float64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSpeeds()
			for _, b := range tt.batches {
				for k := range b.n {
					at := now.Add(-b.age - time.Second + time.Duration(k+1)*time.Second/time.Duration(b.n+1))
					if b.tokens > 0 {
						s.add(b.backend, at, false, whole(b.ttft, b.tokens))
						continue
					}
					ans := answer(b.ttft, b.gap)
					if b.backend == "m" { // a Messages stream: message_start at once
						ans.TTFT = time.Millisecond
					}
					s.add(b.backend, at, true, ans)
				}
			}
			got := s.slowness(now, time.Minute, time.Second)
			if len(got) != len(tt.want) {
				t.Errorf("slowness %v, want %v", got, tt.want)
			}
			for name, w := range tt.want {
				if g, ok := got[name]; w == notSlow && ok && g <= 1 {
					continue
				}
				if g, ok := got[name]; !ok || math.Abs(g-w) > 1e-9*w {
					t.Errorf("%s: slowness %v (%v), want %v", name, g, ok, w)
				}
			}
		})
	}
}

// TestSlownessSameSpan: when a slowdown of every backend ends, a backend
// with few answers still has slow ones among its latest while busy peers'
// latest are all fast; each of its answers is measured against the
// others' started around the same time, and it is not slow.
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
		s.add("a", at, true, answer(ttft(at), 0))
		s.add("c", at, true, answer(ttft(at), 0))
	}
	for i := 8; i > 0; i-- { // b: one a second
		at := now.Add(-time.Duration(i) * time.Second)
		s.add("b", at, true, answer(ttft(at), 0))
	}
	got := s.slowness(now, time.Minute, time.Second)
	if got["b"] > 1.5 {
		t.Errorf("b's slowness %v after a slowdown of every backend, want about 1", got["b"])
	}
	// Each of b's latest answers is measured against the others' answers
	// started around it, slow or fast alike. Their latest answers alone,
	// all fast, would make b ten times slower.
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
	// send gives each backend n answers, to requests started 100 ms
	// apart over the last n/10 s, all three at the same moments.
	send := func(n int, ttft map[string]time.Duration) {
		for i := range n {
			for _, backend := range []string{"a", "b", "c"} {
				start := now.Add(-time.Duration(n-i) * 100 * time.Millisecond)
				ans := answer(ttft[backend], 10*time.Millisecond)
				p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: backend, Start: start, Stream: true}, ans)
				// A non-streamed answer of 32 tokens at the stream's
				// pace (a median pause of 5 ms): its first byte is its
				// last.
				lat := ttft[backend] + 31*5*time.Millisecond
				p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: backend, Start: start}, whole(lat, 32))
			}
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
	send(10, map[string]time.Duration{"a": 600 * ms, "b": 600 * ms, "c": 600 * ms})
	step("every backend slow alike", map[string]alert.State{"a": "", "b": "", "c": ""})
	send(10, map[string]time.Duration{"a": 60 * ms, "b": 1800 * ms, "c": 60 * ms})
	step("b ×30", map[string]alert.State{"a": "", "b": alert.Firing, "c": ""})
	send(10, map[string]time.Duration{"a": 60 * ms, "b": 60 * ms, "c": 60 * ms})
	step("b fast again", map[string]alert.State{"a": "", "b": alert.Resolved, "c": ""})
}

// TestSlownessFleetWideChange: every backend's time to first token turns
// ten times longer for the requests that start after a moment; 8 requests
// a second arrive at random and go to a backend at random, streams of 16
// to 47 tokens 15 ms apart. Answers come in as they end, so for a while
// the first slow answers of one backend end among fast answers of the
// others that started before the change, and one backend may get most of
// the first requests after it. No backend is ever slower than the others.
// (Seed 20 made b ten times slower 2 s in when each side was read as a
// whole over the same span, by start or by end.)
func TestSlownessFleetWideChange(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Unix(1000, 0) // the change
	type req struct {
		backend    string
		start, end time.Time
		resp       *exchange.Response
	}
	rng := rand.New(rand.NewPCG(20, 2))
	var reqs []req
	// From 60 s before the change to 10 s after it.
	for at := t0.Add(-time.Minute); at.Before(t0.Add(10 * time.Second)); at = at.Add(time.Duration(rng.ExpFloat64() * float64(125*ms))) {
		ttft := 60 * ms
		if !at.Before(t0) {
			ttft *= 10
		}
		tokens := 16 + rng.IntN(32)
		gen := time.Duration(tokens-1) * 15 * ms
		resp := &exchange.Response{Status: 200, FirstToken: ttft, TTFT: ttft, Latency: ttft + gen,
			Gaps: exchange.Gaps{Count: tokens - 1, P50: 15 * ms, P95: 15 * ms, Max: 15 * ms}}
		reqs = append(reqs, req{[]string{"a", "b", "c"}[rng.IntN(3)], at, at.Add(resp.Latency), resp})
	}
	slices.SortFunc(reqs, func(x, y req) int { return x.end.Compare(y.end) })
	s := newSpeeds()
	next := 0
	worst, worstAt, worstOf := 0.0, time.Duration(0), ""
	for now := t0.Add(-10 * time.Second); now.Before(t0.Add(10 * time.Second)); now = now.Add(50 * ms) {
		for ; next < len(reqs) && !reqs[next].end.After(now); next++ {
			s.add(reqs[next].backend, reqs[next].start, true, reqs[next].resp)
		}
		for name, v := range s.slowness(now, 30*time.Second, time.Second) {
			if v > worst {
				worst, worstAt, worstOf = v, now.Sub(t0), name
			}
		}
	}
	if worst > 1.5 {
		t.Errorf("%s's slowness %.2f at %v after a change of every backend, want at most 1.5", worstOf, worst, worstAt)
	}
}
