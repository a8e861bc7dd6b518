package content

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// templates wrap each text, as an application's prompts do.
var templates = []string{"Explain: %s", "Summarize in one line: %s", "What does this mean? %s", "Rewrite this more formally: %s"}

// fillPrompts adds n prompts of texts, each in a template, to s.
func fillPrompts(s *Sample, rng *rand.Rand, texts []string, n int) {
	for range n {
		p := fmt.Sprintf(templates[rng.IntN(len(templates))], texts[rng.IntN(len(texts))])
		s.Add(rng.Uint64(), read(p, false), float64(len([]rune(p))))
	}
}

// TestCompareOnFortunes: a reference of two subjects (science and
// computers) against current windows of 1,024 prompts (the fleet's
// default sample), at the level of one feature among input drift's 16
// (0.01/16). A resample of the reference's subjects flags at most 1 seed
// in 100 (and about 5 in 100 at 0.05: the level holds); a resample of its
// longer texts only (a length change, for the length features to report)
// at most 1 in 20; a window wholly of two other subjects (food and law)
// all 20, and one 30 % of them at least 18 of 20 in one evaluation.
func TestCompareOnFortunes(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	fortuneCases(t, 18, func(rng *rand.Rand, ref []string, pool []string, k int) (Result, bool) {
		r, cur := NewSample(fortuneN), NewSample(fortuneN)
		fillPrompts(r, rng, ref, 3*fortuneN)
		fillPrompts(cur, rng, pool, k)
		fillPrompts(cur, rng, ref, 2*fortuneN-k)
		return Compare(r, cur)
	})
}

// fortuneN is the prompts of a current window in fortuneCases, the
// fleet's default sample; the reference is offered three times as many.
const fortuneN = 1024

// fortuneCases runs a held-out test on the fortunes, science + computers
// as the reference, at the level of one feature among input drift's 16
// (0.01/16): test fills a reference sample from ref and a current one of
// k prompts from pool and 2·fortuneN−k from ref, and compares them. A
// resample must flag at most 1 seed of 100 (and at most 12 at 0.05, 3
// standard deviations above the level's 5); longer texts only (a length
// change, for the length features to report) at most 1 of 20; a window
// wholly of food + law all 20; one 30 % of them at least min30 of 20. It
// returns each case's mean AUC by name. Its callers skip under the race
// detector (test/run finds them by that call, and runs them without it).
func fortuneCases(t *testing.T, min30 int, test func(rng *rand.Rand, ref, pool []string, k int) (Result, bool)) map[string]float64 {
	ref := testutil.Fortunes(t, "science", "computers")
	other := testutil.Fortunes(t, "food", "law")
	var long []string
	for _, x := range ref {
		if len(x) > 150 {
			long = append(long, x)
		}
	}
	const level = 0.01 / 16
	aucs := map[string]float64{}
	for _, c := range []struct {
		name     string
		share    float64
		pool     []string
		seeds    int
		min, max int
	}{
		{"resample", 0, ref, 100, 0, 1},
		{"longer texts", 1, long, 20, 0, 1},
		{"other subjects", 1, other, 20, 20, 20},
		{"30% other subjects", 0.3, other, 20, min30, 20},
	} {
		flagged, at05 := 0, 0
		var auc float64
		for seed := range c.seeds {
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			res, ok := test(rng, ref, c.pool, int(c.share*2*fortuneN))
			if !ok {
				t.Fatalf("%s: no test", c.name)
			}
			if res.P < level {
				flagged++
			}
			if res.P < 0.05 {
				at05++
			}
			auc += res.AUC
		}
		aucs[c.name] = auc / float64(c.seeds)
		t.Logf("%s: flagged in %d of %d seeds (%d at 0.05), mean AUC %.3f", c.name, flagged, c.seeds, at05, aucs[c.name])
		if flagged < c.min || flagged > c.max {
			t.Errorf("%s: flagged in %d of %d seeds, want %d to %d", c.name, flagged, c.seeds, c.min, c.max)
		}
		if c.share == 0 && at05 > 12 {
			t.Errorf("%s: %d of %d seeds below 0.05, where the level gives 5 (12 is 3 standard deviations above)", c.name, at05, c.seeds)
		}
	}
	return aucs
}
