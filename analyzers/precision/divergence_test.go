package precision

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
)

type divergenceCase struct {
	Name         string
	P, Q         []Alt
	PTopK, QTopK int
	TrueKL       *float64 // nil for the hand-made degenerate cases
	Lower        float64
	LowerCoarse  float64
	Top1P, Top1Q string
}

// loadDivergence reads testdata/divergence_golden.json (gen_divergence.py).
func loadDivergence(t testing.TB) []divergenceCase {
	t.Helper()
	raw, err := os.ReadFile("testdata/divergence_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []struct {
			Name        string
			P, Q        [][2]any
			PTopK       int      `json:"p_topk"`
			QTopK       int      `json:"q_topk"`
			TrueKL      *float64 `json:"true_kl"`
			Lower       float64
			LowerCoarse float64 `json:"lower_coarse"`
			Top1P       string  `json:"top1_p"`
			Top1Q       string  `json:"top1_q"`
		}
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	alts := func(l [][2]any) []Alt {
		out := make([]Alt, len(l))
		for i, a := range l {
			out[i].Token = a[0].(string)
			switch v := a[1].(type) {
			case float64:
				out[i].Logprob = v
			case string: // Python's repr of nan, inf, -inf
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatal(err)
				}
				out[i].Logprob = f
			}
		}
		return out
	}
	cases := make([]divergenceCase, len(g.Cases))
	for i, c := range g.Cases {
		cases[i] = divergenceCase{c.Name, alts(c.P), alts(c.Q), c.PTopK, c.QTopK, c.TrueKL, c.Lower, c.LowerCoarse, c.Top1P, c.Top1Q}
	}
	if len(cases) < 100 {
		t.Fatalf("%d golden cases, want ≥ 100", len(cases))
	}
	return cases
}

func close9(got, want float64) bool { return math.Abs(got-want) <= 1e-9*math.Abs(want)+1e-15 }

// TestDivergenceGolden: the lower bound equals the one computed with scipy
// (to 1e-9 relative), is never below the plain coarsening and never above
// the full-vocabulary KL; Top1 matches.
func TestDivergenceGolden(t *testing.T) {
	for _, c := range loadDivergence(t) {
		t.Run(c.Name, func(t *testing.T) {
			p, q := Side{c.P, c.PTopK}, Side{c.Q, c.QTopK}
			est, lower := Divergence(p, q)
			if !close9(lower, c.Lower) {
				t.Errorf("lower = %.17g, scipy %.17g", lower, c.Lower)
			}
			if lower < c.LowerCoarse*(1-1e-9)-1e-15 {
				t.Errorf("lower = %g below the plain coarsening %g", lower, c.LowerCoarse)
			}
			if c.TrueKL != nil && lower > *c.TrueKL*(1+1e-9) {
				t.Errorf("lower = %g above the true KL %g", lower, *c.TrueKL)
			}
			if !(est >= lower) || math.IsInf(est, 0) {
				t.Errorf("estimate = %g, lower %g", est, lower)
			}
			if got := Top1(p); got != c.Top1P {
				t.Errorf("Top1(p) = %q, want %q", got, c.Top1P)
			}
			if got := Top1(q); got != c.Top1Q {
				t.Errorf("Top1(q) = %q, want %q", got, c.Top1Q)
			}
		})
	}
}

// accuracy is an estimator's relative error est/true − 1 on the golden
// cases with a true KL, by k: mean absolute error and mean (bias).
type accuracy struct{ abs, bias float64 }

func measure(cases []divergenceCase, f func(p, q Side) float64) map[int]accuracy {
	sum := map[int]accuracy{}
	n := map[int]int{}
	for _, c := range cases {
		if c.TrueKL == nil {
			continue
		}
		e := f(Side{c.P, c.PTopK}, Side{c.Q, c.QTopK}) / *c.TrueKL - 1
		a := sum[c.QTopK]
		a.abs += math.Abs(e)
		a.bias += e
		sum[c.QTopK] = a
		n[c.QTopK]++
	}
	for k, a := range sum {
		sum[k] = accuracy{a.abs / float64(n[k]), a.bias / float64(n[k])}
	}
	return sum
}

// estimateTolerance is the documented accuracy of Divergence's estimate on
// the golden cases (48 per k; V = 400 and 32000, σ = 0.01, 0.1, 1, half of
// them with the reference also listing the backend's choice): measured mean
// absolute relative error 0.081 at k = 20 and 0.231 at k = 5, bias −0.011
// and −0.134. The golden cases are fixed, so the measurement is
// deterministic; the limits sit 20–25 % above it, tight enough that a
// worse estimator shows: the bare lower bound (k = 20: 0.24), the estimate
// scaled by 1.3 and the even spread of KL (k = 20: 44) all fail them
// (TestDivergenceToleranceFails).
var estimateTolerance = map[int]accuracy{
	20: {abs: 0.10, bias: 0.05},
	5:  {abs: 0.28, bias: 0.17},
}

func withinTolerance(got map[int]accuracy) error {
	for k, tol := range estimateTolerance {
		a, ok := got[k]
		if !ok {
			return fmt.Errorf("k=%d: no cases", k)
		}
		if a.abs > tol.abs || math.Abs(a.bias) > tol.bias {
			return fmt.Errorf("k=%d: mean |relative error| %.3f (limit %.3f), bias %+.3f (limit ±%.3f)", k, a.abs, tol.abs, a.bias, tol.bias)
		}
	}
	return nil
}

func estimateOf(p, q Side) float64 { est, _ := Divergence(p, q); return est }

func TestDivergenceEstimate(t *testing.T) {
	got := measure(loadDivergence(t), estimateOf)
	for _, k := range []int{5, 20} {
		t.Logf("k=%d: mean |relative error| %.3f, bias %+.3f", k, got[k].abs, got[k].bias)
	}
	if err := withinTolerance(got); err != nil {
		t.Error(err)
	}
}

// TestDivergenceToleranceFails: the tolerance catches estimators known to be
// wrong, so TestDivergenceEstimate can fail.
func TestDivergenceToleranceFails(t *testing.T) {
	cases := loadDivergence(t)
	for name, f := range map[string]func(p, q Side) float64{
		"even spread (KL)": func(p, q Side) float64 { return spreadKL(p.Alts, q.Alts) },
		"lower bound":      func(p, q Side) float64 { _, lo := Divergence(p, q); return lo },
		"estimate × 1.3":   func(p, q Side) float64 { return 1.3 * estimateOf(p, q) },
	} {
		if err := withinTolerance(measure(cases, f)); err == nil {
			t.Errorf("%s passes the estimate's tolerance", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestDivergenceDegenerate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	a := []Alt{{"a", -0.1}, {"b", -2.5}, {"c", -4}}
	tests := []struct {
		name string
		p, q Side
		zero bool // both results must be exactly 0
	}{
		{"empty", Side{}, Side{}, true},
		{"nil alts with topk", Side{nil, 5}, Side{nil, 5}, true},
		{"empty p", Side{}, Side{a, 3}, false},
		{"empty q", Side{a, 3}, Side{}, false},
		{"identical", Side{a, 3}, Side{a, 3}, true},
		{"identical reordered", Side{a, 3}, Side{[]Alt{a[2], a[0], a[1]}, 3}, true},
		{"all nan", Side{[]Alt{{"a", nan}}, 1}, Side{[]Alt{{"a", nan}}, 1}, true},
		{"inf", Side{[]Alt{{"a", inf}, {"b", -inf}}, 1}, Side{[]Alt{{"a", -inf}, {"b", 0}}, 1}, true},
		{"positive logprob", Side{[]Alt{{"a", 0.3}}, 1}, Side{[]Alt{{"a", -0.2}}, 1}, false},
		{"sum above one", Side{[]Alt{{"a", -1e-7}, {"b", -1e-7}}, 2}, Side{[]Alt{{"a", -0.1}}, 1}, false},
		{"q certain of other", Side{[]Alt{{"a", 0}}, 1}, Side{[]Alt{{"b", 0}}, 1}, false},
		{"topk above listed", Side{a, 10}, Side{a[:1], 10}, false},
		{"zero probability", Side{[]Alt{{"a", -800}, {"b", -0.01}}, 2}, Side{[]Alt{{"b", -0.01}, {"c", -800}}, 2}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			est, lower := Divergence(tt.p, tt.q)
			if math.IsNaN(est) || math.IsInf(est, 0) || math.IsNaN(lower) || math.IsInf(lower, 0) || lower < 0 || est < lower {
				t.Fatalf("Divergence = %g, %g", est, lower)
			}
			if tt.zero && (est != 0 || lower != 0) {
				t.Errorf("Divergence = %g, %g, want 0, 0", est, lower)
			}
		})
	}
	if got := Top1(Side{[]Alt{{"a", nan}, {"b", -1}, {"c", -1}, {"d", -inf}}, 0}); got != "b" {
		t.Errorf("Top1 = %q, want b", got)
	}
	if got := Top1(Side{}); got != "" {
		t.Errorf("Top1(empty) = %q", got)
	}
}

// TestDivergenceBoundRandom: on random small vocabularies, served top-k
// lists (with and without the reference listing the backend's argmax, with
// and without the TopK guarantee) never yield a lower bound above the true
// KL, nor an estimate below the bound. This checks the bound's proof
// without Python, far from the golden cases' shapes.
func TestDivergenceBoundRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		V := 3 + rng.IntN(60)
		k := 1 + rng.IntN(min(V, 21))
		sigma := []float64{0.01, 0.3, 1, 4}[rng.IntN(4)]
		scale := 0.5 + 4*rng.Float64()
		zp, zq := make([]float64, V), make([]float64, V)
		for j := range zp {
			zp[j] = scale * rng.NormFloat64()
			zq[j] = zp[j] + sigma*rng.NormFloat64()
		}
		lp, lq := logSoftmax(zp), logSoftmax(zq)
		kl := 0.0
		for j := range lp {
			kl += math.Exp(lp[j]) * (lp[j] - lq[j])
		}
		topk := func(l []float64) []Alt {
			idx := make([]int, len(l))
			for j := range idx {
				idx[j] = j
			}
			slices.SortFunc(idx, func(a, b int) int { return -cmpFloat(l[a], l[b]) })
			out := make([]Alt, k)
			for j, x := range idx[:k] {
				out[j] = Alt{strconv.Itoa(x), l[x]}
			}
			return out
		}
		p, q := Side{topk(lp), k}, Side{topk(lq), k}
		if i%2 == 1 {
			best := 0
			for j := range lq {
				if lq[j] > lq[best] {
					best = j
				}
			}
			p.Alts = append(p.Alts, Alt{strconv.Itoa(best), lp[best]})
		}
		if i%3 == 2 {
			p.TopK, q.TopK = 0, 0
		}
		est, lower := Divergence(p, q)
		if lower > kl*(1+1e-9)+1e-12 || est < lower || math.IsNaN(est) {
			t.Fatalf("case %d (V=%d k=%d σ=%g): lower %g estimate %g, true KL %g", i, V, k, sigma, lower, est, kl)
		}
	}
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func logSoftmax(z []float64) []float64 {
	m := slices.Max(z)
	s := 0.0
	for _, v := range z {
		s += math.Exp(v - m)
	}
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = v - m - math.Log(s)
	}
	return out
}

// BenchmarkDivergence: one position of the gateway's case, top-20 on both
// sides with the reference also listing the backend's chosen token.
func BenchmarkDivergence(b *testing.B) {
	var p, q Side
	for _, c := range loadDivergence(b) {
		if c.QTopK == 20 && len(c.P) == 21 && c.TrueKL != nil {
			p, q = Side{c.P, c.PTopK}, Side{c.Q, c.QTopK}
			break
		}
	}
	if p.Alts == nil {
		b.Fatal("no k=20 case with an extra reference token")
	}
	b.ReportAllocs()
	for b.Loop() {
		Divergence(p, q)
	}
}

// The estimator Vigil used before teacher forcing and the lower bound, kept here as the baseline the
// tolerance of TestDivergenceToleranceFails must reject: a side's unlisted
// mass spread evenly over the union tokens it does not list and a rest
// bucket. It overstated KL 17× against llama.cpp on a real q8_0 model.

// spreadMinProb floors every probability of KL, so that a token one side gives no
// mass to costs a large but finite amount.
const spreadMinProb = 1e-10

// spreadKL is the Kullback–Leibler divergence KL(p ‖ q) in nats between two
// next-token distributions known through their top-k lists. The support is
// the union of the listed tokens plus "rest", the probability mass outside
// the union. A side's mass outside its own list, 1 − Σ its listed
// probabilities, is spread evenly over the union's tokens it does not list
// and its "rest" bucket, the least committal assumption consistent with
// what it reported. Probabilities are floored at 1e-10 and each side is
// renormalized. Duplicate tokens in a list count once (the first).
func spreadKL(p, q []Alt) float64 {
	union := make([]string, 0, len(p)+len(q))
	idx := make(map[string]int, len(p)+len(q))
	for _, list := range [2][]Alt{p, q} {
		for _, a := range list {
			if _, ok := idx[a.Token]; !ok {
				idx[a.Token] = len(union)
				union = append(union, a.Token)
			}
		}
	}
	pd, qd := spreadOver(p, idx, len(union)), spreadOver(q, idx, len(union))
	kl := 0.0
	for i := range pd {
		kl += pd[i] * math.Log(pd[i]/qd[i])
	}
	return max(kl, 0)
}

// spreadOver is one side's distribution over the union (index by idx) and, last,
// the rest bucket.
func spreadOver(alts []Alt, idx map[string]int, n int) []float64 {
	d := make([]float64, n+1)
	known := make([]bool, n)
	mass := 0.0
	for _, a := range alts {
		i := idx[a.Token]
		if known[i] {
			continue
		}
		known[i] = true
		pr := math.Exp(a.Logprob)
		d[i] = pr
		mass += pr
	}
	unknown := 1 // the rest bucket
	for _, k := range known {
		if !k {
			unknown++
		}
	}
	share := max(1-mass, 0) / float64(unknown)
	for i, k := range known {
		if !k {
			d[i] = share
		}
	}
	d[n] = share
	sum := 0.0
	for i := range d {
		d[i] = max(d[i], spreadMinProb)
		sum += d[i]
	}
	for i := range d {
		d[i] /= sum
	}
	return d
}
