package output

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/config"
)

// feed adds perRate responses a minute for d from t, perplexities drawn
// log-normal around median (σ 0.15 of one response's log), and returns
// the time after.
func feed(m *Monitor, rng *rand.Rand, t time.Time, d time.Duration, perMinute int, median float64) time.Time {
	end := t.Add(d)
	step := time.Minute / time.Duration(perMinute)
	for ; t.Before(end); t = t.Add(step) {
		ppl := median * math.Exp(0.15*rng.NormFloat64())
		m.Add(t, &logprob.Summary{Tokens: 8, Perplexity: ppl, MeanLogprob: -math.Log(ppl)})
	}
	return t
}

// TestBandFollowsTraffic: a model's traffic falls from 600 to 10
// responses a minute, its answers unchanged: its minute means scatter
// eight times wider, and judged against the baseline's spread at 600 a
// minute they left the ±3σ band for 5 minutes in a row in most seeds
// (the mix of models changed, not the model). Judged against the spread
// of a minute of their own count, no seed alarms; a 50 % rise of the
// perplexity at 10 a minute still alarms in every seed.
func TestBandFollowsTraffic(t *testing.T) {
	cfg := config.Default().Analyzers
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var quiet, moved int
	const seeds = 20
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 3))
		m := New(cfg)
		at := feed(m, rng, t0, 30*time.Minute, 600, 1.3)
		m.Pin(at)
		for range 12 { // minutes at 10 a minute, unchanged
			at = feed(m, rng, at, time.Minute, 10, 1.3)
			if m.Evaluate(at).State == StateDrift {
				break
			}
		}
		if m.Evaluate(at).State != StateDrift {
			quiet++
		}
		at = feed(m, rng, at, 8*time.Minute, 10, 1.3*1.5)
		if m.Evaluate(at).State == StateDrift {
			moved++
		}
	}
	if quiet != seeds || moved != seeds {
		t.Errorf("%d of %d seeds quiet when the traffic fell, %d alarmed at a 50 %% rise; want all", quiet, seeds, moved)
	}
}
