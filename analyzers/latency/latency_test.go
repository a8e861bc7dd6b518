package latency

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// stream makes a streaming response's timings: TTFT around ttft with 10%
// jitter, 32 tokens 15 ms apart with jitter.
func stream(rng *rand.Rand, ttft float64) *Sample {
	t := ttft * (1 + 0.1*rng.NormFloat64())
	itl := 0.015 * (1 + 0.1*rng.NormFloat64())
	gen := 31 * itl
	return &Sample{Values: [NumMetrics]float64{t + gen, t, itl, 32 / gen}, MeanLogprob: -0.2 - 0.1*rng.Float64()}
}

// TestTTFTDetection: stationary streams raise nothing; when TTFT grows 1.5×
// the signal turns anomalous within a few hundred responses and the
// anomalies are counted on ttft (and e2e), not on itl.
func TestTTFTDetection(t *testing.T) {
	cfg := config.Default().Analyzers
	m := New(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	step := 200 * time.Millisecond // 5 responses/s
	next := now.Add(cfg.Interval)
	run := func(n int, ttft float64) (first int, counts [NumMetrics]int) {
		first = -1
		for i := range n {
			for k, bad := range m.Add(now, stream(rng, ttft)) {
				if bad {
					counts[k]++
				}
			}
			now = now.Add(step)
			if !now.Before(next) {
				next = next.Add(cfg.Interval)
				if r := m.Evaluate(now); r.State == StateAnomalous && first < 0 {
					first = i + 1
				}
			}
		}
		return first, counts
	}
	if first, counts := run(10000, 0.2); first >= 0 {
		t.Errorf("stationary: anomalous after %d responses (anomalies %v)", first, counts)
	} else {
		t.Logf("stationary: 10000 responses, anomalies per metric %v (expected ~2.3%% of each for k=2)", counts)
	}
	first, counts := run(2000, 0.3)
	t.Logf("TTFT x1.5: anomalous %d responses after the change; anomalies %v", first, counts)
	if first < 0 || first > 500 {
		t.Fatalf("TTFT x1.5 flagged after %d responses, want within 500", first)
	}
	r := m.Evaluate(now)
	if !r.Metrics["ttft"].Anomalous || r.Metrics["itl"].Anomalous {
		t.Errorf("anomalous metrics: ttft %v itl %v, want ttft only (and e2e)", r.Metrics["ttft"].Anomalous, r.Metrics["itl"].Anomalous)
	}
	if p50 := float64(r.TTFT.P50); math.Abs(p50-300) > 15 {
		t.Errorf("TTFT p50 = %.1f ms, want about 300", p50)
	}
}

func TestCorrelation(t *testing.T) {
	var c coMoments
	for i := range 100 {
		x := float64(i)
		c.add(x, -0.01*x+0.5)
	}
	if r := c.r(); math.Abs(r+1) > 1e-9 {
		t.Errorf("r = %v, want -1", r)
	}
	var empty coMoments
	if !math.IsNaN(empty.r()) {
		t.Error("r of nothing should be NaN")
	}
}

// TestP95Lower: the 90% lower bound of a P95 of 25 values is their 22nd
// smallest (scipy: max r with binom.sf(r-1, 25, 0.95) >= 0.9), within the
// sketch's relative error.
func TestP95Lower(t *testing.T) {
	var q window.Sketch
	if !math.IsNaN(p95Lower(&q)) {
		t.Error("an empty window has a bound")
	}
	for i := 1; i <= 25; i++ {
		q.Add(float64(i))
	}
	if got := p95Lower(&q); math.Abs(got-22) > 22*0.02 {
		t.Errorf("lower bound %v, want 22", got)
	}
}
