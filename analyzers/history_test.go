package analyzers

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
)

// TestHistoryRecordsEvaluations: the pipeline's history holds each
// evaluation's headline values, the gateway's backends and the thresholds.
func TestHistoryRecordsEvaluations(t *testing.T) {
	f := newFeeder(t, config.Default().Analyzers, 5)
	ttfb, rate := 80.0, 0.01
	f.p.backendStates = func() []exchange.BackendState {
		return []exchange.BackendState{{Name: "a", Healthy: true, Weight: 97, TTFBMs: &ttfb, ErrorRate: &rate, Load: map[string]float64{}}}
	}
	start := f.now
	for range 3 {
		for range 20 {
			f.send()
		}
		f.p.record(t.Context(), f.p.Evaluate())
	}
	h, err := f.p.History(t.Context(), start, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Points) != 3 {
		t.Fatalf("%d points, want 3", len(h.Points))
	}
	last := h.Points[2]
	if last.Confidence == nil || math.IsNaN(float64(last.Confidence.Confidence)) || last.Latency == nil || math.IsNaN(float64(last.Latency.E2EP95)) {
		t.Errorf("last point lacks current values: confidence %+v, latency %+v", last.Confidence, last.Latency)
	}
	if last.Output == nil || math.IsNaN(float64(last.Output.Current)) || last.Output.State != "unknown" {
		t.Errorf("output %+v: want the current minute's perplexity while the baseline is missing", last.Output)
	}
	if d := cmp.Diff([]exchange.BackendState{{Name: "a", Healthy: true, Weight: 97, TTFBMs: &ttfb, ErrorRate: &rate, Load: map[string]float64{}}}, last.Backends); d != "" {
		t.Errorf("backends (-want +got):\n%s", d)
	}
	if last.Drift != nil {
		t.Errorf("drift is disabled in the feeder, got %+v", last.Drift)
	}
}

// TestHistoryShared: a replica that starts later reads the span it did
// not record from the others' points in the store.
func TestHistoryShared(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg := config.Default().Analyzers
	cfg.Interval = time.Second
	newReplica := func(name string) *Pipeline {
		p, err := New(Options{Config: cfg, Now: func() time.Time { return now }, Sharing: &share.Config{Store: store, Replica: name}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := newReplica("a")
	for range 120 { // two minutes of evaluations on a
		a.record(t.Context(), a.Evaluate())
		a.Flush(t.Context())
		now = now.Add(time.Second)
	}
	b := newReplica("b")
	b.record(t.Context(), b.Evaluate())
	h, err := b.History(t.Context(), now.Add(-3*time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Points) != 121 || !h.Points[0].Time.Equal(now.Add(-120*time.Second)) || !h.Points[120].Time.Equal(now) {
		t.Fatalf("b's history: %d points from %v to %v; want a's 120 and its own 1", len(h.Points), h.Points[0].Time, h.Points[len(h.Points)-1].Time)
	}
}
