package content

import (
	"math"
	"slices"

	"github.com/vigil-gw/vigil/analyzers/stats"
)

// MinHeldOut is the fewest held-out prompts each side needs for Compare
// to test: twice as many must be in each Sample.
const MinHeldOut = 20

// strata is how many length classes the held-out prompts are compared in.
const strata = 4

// psiBins is the number of bins of the held-out scores' PSI.
const psiBins = 10

// Result is one content test of a current window against the reference.
type Result struct {
	// AUC is the held-out classifier's area under the ROC curve within
	// length classes: the chance that a current prompt scores above a
	// reference prompt of like length; 0.5 when the windows are alike.
	AUC float64
	// Z is van Elteren's statistic (the stratified Mann–Whitney test)
	// and P its one-sided p-value, exact in the limit under the null
	// whatever the classifier learnt.
	Z, P float64
	// PSI is the population stability index of the held-out scores,
	// less (bins−1)·(1/n_ref + 1/n_cur), what chance alone gives it on
	// samples of that size: on the scale of the other features' PSI.
	PSI float64
	// Ref and Cur are the held-out prompts of each side.
	Ref, Cur int
}

// Compare tests whether cur's prompts are about something else than
// ref's: a classifier two-sample test, held out. Each Sample's prompts
// are split in two by key (random). The first halves fit a linear
// classifier, naive Bayes on the terms (naiveBayes), and a prompt's score
// is the largest of its terms' log-odds of coming from the current
// window: one word of a new subject stands out, where a sum drowns it in
// the others' noise and grows with length (docs/signals.md). The
// second halves are scored, and the test asks whether the current
// prompts score higher than the reference's among prompts of like length
// (the held-out prompts in strata length classes by pooled quantile):
// van Elteren's test. The scores of held-out prompts are exchangeable between the
// windows when their content is alike, whatever the first halves taught,
// so the false-alarm rate is the level asked, with no permutations. A
// length change alone moves the share of a template's words, which a
// classifier learns, but not within a length class: the length features
// report it, not this test. ok is false when either side holds fewer
// than 2·MinHeldOut prompts.
func Compare(ref, cur *Sample) (Result, bool) {
	rt, rc := ref.Rows()
	ct, cc := cur.Rows()
	if len(rt) < 2*MinHeldOut || len(ct) < 2*MinHeldOut {
		return Result{}, false
	}
	lr := naiveBayes(rt, ct)
	score := func(ts [][]uint32, cs []float64) ([]float64, []float64) {
		s, l := make([]float64, 0, len(ts)/2), make([]float64, 0, len(ts)/2)
		for i := 1; i < len(ts); i += 2 {
			var best float64
			for k, h := range ts[i] {
				if v := lr[h]; k == 0 || v > best {
					best = v
				}
			}
			s, l = append(s, best), append(l, cs[i])
		}
		return s, l
	}
	rs, rl := score(rt, rc)
	cs, cl := score(ct, cc)
	return heldOut(rs, rl, cs, cl, strata), true
}

// heldOut tests the held-out scores of the reference (rs, of prompts of
// lengths rl) against the current window's (cs, cl).
func heldOut(rs, rl, cs, cl []float64, classes int) Result {
	res := Result{Ref: len(rs), Cur: len(cs)}
	res.AUC, res.Z = vanElteren(rs, rl, cs, cl, classes)
	res.P = 0.5 * math.Erfc(res.Z/math.Sqrt2)
	bins := min(psiBins, len(rs)/MinHeldOut*2)
	if psi, err := stats.PSI(rs, cs, bins); err == nil {
		res.PSI = max(0, psi-float64(bins-1)*(1/float64(len(rs))+1/float64(len(cs))))
	}
	return res
}

// naiveBayes fits the classifier on the first halves (even rows) of ref
// and cur: each term's log-odds of appearing in a current prompt rather
// than a reference one, with add-one smoothing (Bernoulli naive Bayes,
// its present terms only).
func naiveBayes(rt, ct [][]uint32) map[uint32]float64 {
	df := map[uint32][2]float64{}
	var n [2]float64
	for side, ts := range [2][][]uint32{rt, ct} {
		for i := 0; i < len(ts); i += 2 {
			n[side]++
			for _, h := range ts[i] {
				c := df[h]
				c[side]++
				df[h] = c
			}
		}
	}
	lr := make(map[uint32]float64, len(df))
	for h, c := range df {
		lr[h] = math.Log((c[1]+1)/(n[1]+2)) - math.Log((c[0]+1)/(n[0]+2))
	}
	return lr
}

// vanElteren returns the AUC of the current scores against the reference
// ones within length classes and van Elteren's z (positive: the current
// score higher). The classes are the pooled lengths' quantiles; a class
// with prompts of one side only tells nothing and is left out.
func vanElteren(rs, rl, cs, cl []float64, strata int) (auc, z float64) {
	pooled := slices.Concat(rl, cl)
	slices.Sort(pooled)
	var cuts []float64
	for k := 1; k < strata; k++ {
		cuts = append(cuts, pooled[k*len(pooled)/strata])
	}
	cuts = slices.Compact(cuts)
	class := func(l float64) int {
		i, _ := slices.BinarySearch(cuts, l)
		if i < len(cuts) && cuts[i] == l {
			i++ // a cut belongs to the class above it
		}
		return i
	}
	type obs struct {
		s   float64
		cur bool
	}
	classes := make([][]obs, len(cuts)+1)
	for i, s := range rs {
		k := class(rl[i])
		classes[k] = append(classes[k], obs{s, false})
	}
	for i, s := range cs {
		k := class(cl[i])
		classes[k] = append(classes[k], obs{s, true})
	}
	var num, den, uSum, pairs float64
	for _, c := range classes {
		var nr, nc float64
		for _, o := range c {
			if o.cur {
				nc++
			} else {
				nr++
			}
		}
		if nr == 0 || nc == 0 {
			continue
		}
		slices.SortFunc(c, func(a, b obs) int {
			switch {
			case a.s < b.s:
				return -1
			case a.s > b.s:
				return 1
			}
			return 0
		})
		// Mid-ranks of ties; U counts pairs a current prompt wins.
		n := float64(len(c))
		var rankCur, ties float64
		for i := 0; i < len(c); {
			j := i
			for j < len(c) && c[j].s == c[i].s {
				j++
			}
			t := float64(j - i)
			ties += t*t*t - t
			mid := float64(i+j+1) / 2
			for _, o := range c[i:j] {
				if o.cur {
					rankCur += mid
				}
			}
			i = j
		}
		u := rankCur - nc*(nc+1)/2
		mean := nr * nc / 2
		v := nr * nc / 12 * ((n + 1) - ties/(n*(n-1)))
		wk := 1 / (n + 1)
		num += wk * (u - mean)
		den += wk * wk * v
		uSum += u
		pairs += nr * nc
	}
	if pairs == 0 {
		return 0.5, 0
	}
	auc = uSum / pairs
	if den > 0 {
		z = num / math.Sqrt(den)
	}
	return auc, z
}

// BinormalPSI puts an AUC on the scale of PSI: the PSI (symmetric
// Kullback–Leibler divergence) of two normal distributions of one spread
// whose AUC is auc, d² for means d = √2·Φ⁻¹(auc) standard deviations
// apart. 0.6 is 0.13, 0.75 is 0.91; an AUC at or below 0.5 is 0, and one
// above 0.999 counts as 0.999 (19.1), so the value stays finite.
func BinormalPSI(auc float64) float64 {
	if !(auc > 0.5) {
		return 0
	}
	e := math.Erfinv(2*min(auc, 0.999) - 1)
	return 4 * e * e
}
