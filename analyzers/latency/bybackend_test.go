package latency

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// sampleOf is a streamed response's sample with the given TTFT and
// end-to-end latency, in seconds.
func sampleOf(ttft, e2e float64) *Sample {
	var s Sample
	for i := range s.Values {
		s.Values[i] = math.NaN()
	}
	s.Values[TTFT], s.Values[E2E] = ttft, e2e
	return &s
}

// TestByBackend: each backend's quantiles are its own responses', over
// the last window only; a second replica's responses merge in exactly;
// the backends kept are bounded.
func TestByBackend(t *testing.T) {
	cfg := config.Default().Analyzers
	cfg.Bucket, cfg.Window = time.Second, 10*time.Second
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a, b := NewByBackend(cfg, []string{"slow"}), NewByBackend(cfg, nil)
	for i := range 100 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		a.Add(at, "fast", sampleOf(0.1, 1))
		b.Add(at, "slow", sampleOf(1, 10)) // the other replica's only
	}
	// What share.Sharer does: b's buckets go to a.
	exported := map[string][]window.Encoded{}
	b.Shared(func(name string, s window.Sharer) {
		enc, err := s.Export()
		if err != nil {
			t.Fatal(err)
		}
		exported[name] = enc
	})
	a.Shared(func(name string, s window.Sharer) {
		for _, e := range exported[name] {
			if err := s.Import("b", e); err != nil {
				t.Fatal(err)
			}
		}
	})
	now := t0.Add(5 * time.Second)
	got := a.Evaluate(now)
	if len(got) != 2 || got[0].Backend != "fast" || got[1].Backend != "slow" {
		t.Fatalf("backends %+v, want fast and slow", got)
	}
	near := func(v, want float64) bool { return math.Abs(v-want) <= 0.01*want }
	if f := got[0]; f.Responses != 100 || !near(float64(f.TTFT.P50), 100) || !near(float64(f.E2E.P95), 1000) {
		t.Errorf("fast: %+v, want 100 responses, TTFT P50 100 ms, E2E P95 1000 ms", f)
	}
	if s := got[1]; s.Responses != 100 || !near(float64(s.TTFT.P50), 1000) || !near(float64(s.E2E.P99), 10000) {
		t.Errorf("slow: %+v, want the other replica's 100 responses (a configured backend), TTFT P50 1000 ms, E2E P99 10000 ms", s)
	}
	if got := a.Evaluate(now.Add(cfg.Window + time.Second)); len(got) != 0 {
		t.Errorf("a window later: %+v, want none", got)
	}
	for i := range MaxBackends + 10 {
		a.Add(now, fmt.Sprint("b", i), sampleOf(0.1, 1))
	}
	if n := len(a.series); n > MaxBackends {
		t.Errorf("%d backends kept, want at most %d", n, MaxBackends)
	}
}
