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
// jitter, 32 tokens with a median gap around itl (10% jitter), the P95 gap
// and the longest 1.3× and 2× that, with jitter of their own.
func stream(rng *rand.Rand, ttft, itl float64) *Sample {
	t := ttft * (1 + 0.1*rng.NormFloat64())
	p50 := itl * (1 + 0.1*rng.NormFloat64())
	gen := 31 * p50
	var s Sample
	s.Values[E2E], s.Values[TTFT], s.Values[TPS] = t+gen, t, 32/gen
	s.Values[ITL] = p50
	s.Values[ITLP95] = p50 * (1.3 + 0.05*rng.NormFloat64())
	s.Values[Stall] = p50 * (2 + 0.2*rng.NormFloat64())
	s.MeanLogprob = -0.2 - 0.1*rng.Float64()
	return &s
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
			for k, bad := range m.Add(now, stream(rng, ttft, 0.015)) {
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
	if !r.Metrics["ttft"].Anomalous {
		t.Error("ttft is not anomalous")
	}
	for _, k := range []string{"itl", "itl_p95", "stall", "tokens_per_second"} {
		if r.Metrics[k].Anomalous {
			t.Errorf("%s is anomalous, want ttft only (and e2e)", k)
		}
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

// TestStallAnomaly: among streams whose gaps are about 20 ms, one that
// pauses once for 2 s is a stall anomaly, and only that: its median and
// P95 gaps are at pace. Then, a steady share of such stalls turns the
// signal anomalous on stall.
func TestStallAnomaly(t *testing.T) {
	cfg := config.Default().Analyzers
	cfg.Consecutive = 1
	m := New(cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	step := 200 * time.Millisecond
	send := func(n, every int) {
		for i := range n {
			s := stream(rng, 0.2, 0.02)
			if every > 0 && i%every == 0 {
				s = stalled(s)
			}
			m.Add(now, s)
			now = now.Add(step)
		}
	}
	// The first evaluation sets the limits; the responses after it are
	// checked against them and make the reference's anomalous share.
	send(2*cfg.MinRequests, 0)
	r := m.Evaluate(now)
	if lim := float64(r.Metrics["stall"].Limit); !(lim > 40 && lim < 100) {
		t.Fatalf("stall limit %.1f ms, want about 2×20 ms + 2σ", lim)
	}
	send(2*cfg.MinRequests, 0)
	if r = m.Evaluate(now); r.State != StateOK {
		t.Fatalf("state %s before any stall, want ok", r.State)
	}

	got := m.Add(now, stalled(stream(rng, 0.2, 0.02)))
	if !got[Stall] || got[ITL] || got[ITLP95] || got[TTFT] {
		t.Errorf("anomalies %v, want stall (and e2e), not itl, itl_p95 or ttft", got)
	}

	// One stream in five stalls: the anomalous share of stall rises from
	// the reference's ~2% (k = 2) to ~20%.
	send(cfg.MinRequests, 5)
	r = m.Evaluate(now)
	st := r.Metrics["stall"]
	if !st.Anomalous || r.State != StateAnomalous || r.Metrics["itl"].Anomalous || r.Metrics["itl_p95"].Anomalous {
		t.Errorf("state %s, stall anomalous %v (share %.3f, reference %.3f), itl %v, itl_p95 %v; want anomalous on stall only",
			r.State, st.Anomalous, float64(st.AnomalousShare), float64(st.RefAnomalousShare),
			r.Metrics["itl"].Anomalous, r.Metrics["itl_p95"].Anomalous)
	}
	if p99 := float64(r.Stall.P99); math.Abs(p99-2000) > 2000*0.02 {
		t.Errorf("stall P99 %.0f ms, want 2000", p99)
	}
}

// stalled makes s a stream that paused once for 2 s.
func stalled(s *Sample) *Sample {
	s.Values[Stall] = 2
	s.Values[E2E] += 2
	s.Values[TPS] = 32 / (s.Values[E2E] - s.Values[TTFT])
	return s
}

// TestSummaryRoundTrip: a bucket encodes and decodes to itself, every
// metric included, and a bucket of another metric count is refused.
func TestSummaryRoundTrip(t *testing.T) {
	var s summary
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 50 {
		smp := stream(rng, 0.1, 0.01)
		if i%7 == 0 {
			smp.Values[Stall] = math.NaN()
		}
		for k, v := range smp.Values {
			if !math.IsNaN(v) {
				s.m[k].Add(v)
				s.q[k].Add(v)
			}
			s.checked[k] += int64(i % 3)
			s.anomalous[k] += int64(i % 2)
		}
		s.co.add(smp.Values[E2E], smp.MeanLogprob)
	}
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got summary
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	again, err := got.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(b) {
		t.Error("re-encoding a decoded summary differs")
	}
	for k := range NumMetrics {
		if got.m[k].Count() != s.m[k].Count() || got.m[k].Mean() != s.m[k].Mean() ||
			got.q[k].Quantile(0.95) != s.q[k].Quantile(0.95) ||
			got.checked[k] != s.checked[k] || got.anomalous[k] != s.anomalous[k] {
			t.Errorf("%s differs after a round trip", Names[k])
		}
	}
	if got.co != s.co {
		t.Errorf("co-moments %+v, want %+v", got.co, s.co)
	}
	// A bucket from a replica that measured fewer metrics (the trailer
	// counts the parts) is corrupt, not misread.
	var short summary
	if err := short.UnmarshalBinary(append(b[:len(b)-1], byte(2*NumMetrics-4))); err == nil {
		t.Error("a summary with another part count decoded")
	}
}
