package window

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

type storeView struct {
	Offset    int
	Bins      []uint64
	Collapsed bool
}

type sketchView struct {
	Alpha      float64
	MaxBuckets int
	Zero       uint64
	Invalid    int64
	Min, Max   float64
	Count      int64
	Pos, Neg   storeView
}

func viewStore(st *store) storeView {
	return storeView{st.offset, slices.Clone(st.bins), st.collapsed}
}

func viewSketch(s *Sketch) any {
	v := sketchView{Alpha: s.Alpha(), MaxBuckets: s.MaxBuckets(), Zero: s.zero, Invalid: s.invalid, Count: s.Count(),
		Pos: viewStore(&s.pos), Neg: viewStore(&s.neg)}
	if v.Count > 0 {
		v.Min, v.Max = s.min, s.max
	}
	if len(v.Pos.Bins) == 0 {
		v.Pos = storeView{}
	}
	if len(v.Neg.Bins) == 0 {
		v.Neg = storeView{}
	}
	return v
}

var sameSketch = func(t testing.TB) func(want, got *Sketch) string {
	return sameEncoding[Sketch](t, viewSketch, func(x, y any) string { return cmp.Diff(x, y) })
}

func mustSketch(t testing.TB, alpha float64, maxBuckets int) *Sketch {
	t.Helper()
	s, err := NewSketch(alpha, maxBuckets)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sketchOf(t testing.TB, alpha float64, maxBuckets int, xs []float64) *Sketch {
	s := mustSketch(t, alpha, maxBuckets)
	for _, x := range xs {
		s.Add(x)
	}
	return s
}

type dataset struct {
	name string
	gen  func(*rand.Rand) float64
}

var datasets = []dataset{
	{"lognormal latency", func(r *rand.Rand) float64 { return math.Exp(-1 + r.NormFloat64()) }},
	{"uniform", func(r *rand.Rand) float64 { return 1000 * r.Float64() }},
	{"logprobs", func(r *rand.Rand) float64 { return -math.Exp(-3 + 2*r.NormFloat64()) }},
	{"mixed sign with zeros", func(r *rand.Rand) float64 {
		if r.IntN(10) == 0 {
			return 0
		}
		return r.NormFloat64()
	}},
	{"heavy tail", func(r *rand.Rand) float64 { return math.Exp(5 * r.NormFloat64()) }},
}

func draw(seed uint64, n int, gen func(*rand.Rand) float64) []float64 {
	r := rand.New(rand.NewPCG(seed, seed+1))
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = gen(r)
	}
	return xs
}

var quantiles = []float64{0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1}

// checkQuantiles checks the stated bound: with x_q the value of 0-based rank
// ⌊q(n−1)⌋ of the sorted data, |Quantile(q) − x_q| ≤ α·|x_q|·(1+1e-9), or
// ≤ SketchMinValue when |x_q| ≤ SketchMinValue. The 1e-9 absorbs float
// rounding of the logarithm at bucket boundaries, where the error is α
// exactly. ok selects the quantiles the bound is claimed for.
func checkQuantiles(t *testing.T, s *Sketch, xs []float64, ok func(q, xq float64) bool) {
	t.Helper()
	sorted := slices.Sorted(slices.Values(xs))
	for _, q := range quantiles {
		xq := sorted[int(q*float64(len(sorted)-1))]
		if !ok(q, xq) {
			continue
		}
		got := s.Quantile(q)
		tol := s.Alpha() * math.Abs(xq) * (1 + 1e-9)
		if math.Abs(xq) <= SketchMinValue {
			tol = SketchMinValue
		}
		if err := math.Abs(got - xq); !(err <= tol) {
			t.Errorf("Quantile(%v) = %v, true %v: error %g > %g", q, got, xq, err, tol)
		}
	}
}

func TestSketchQuantileBound(t *testing.T) {
	for _, alpha := range []float64{0.01, 0.05} {
		for i, ds := range datasets {
			t.Run(fmt.Sprintf("%s alpha %v", ds.name, alpha), func(t *testing.T) {
				xs := draw(uint64(10+i), 20000, ds.gen)
				s := sketchOf(t, alpha, 0, xs)
				if s.Count() != int64(len(xs)) || s.Collapsed() {
					t.Fatalf("count %d collapsed %v", s.Count(), s.Collapsed())
				}
				checkQuantiles(t, s, xs, func(float64, float64) bool { return true })
				// The merge of parts answers the same.
				parts := mustSketch(t, alpha, 0)
				for j := 0; j < len(xs); j += 7000 {
					if err := parts.Merge(sketchOf(t, alpha, 0, xs[j:min(j+7000, len(xs))])); err != nil {
						t.Fatal(err)
					}
				}
				if d := sameSketch(t)(s, parts); d != "" {
					t.Errorf("merged parts differ from one sketch (-want +got):\n%s", d)
				}
			})
		}
	}
}

func TestSketchSmallCases(t *testing.T) {
	cases := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"empty", nil, 0.5, math.NaN()},
		{"q below 0", []float64{1}, -0.1, math.NaN()},
		{"q above 1", []float64{1}, 1.1, math.NaN()},
		{"q NaN", []float64{1}, math.NaN(), math.NaN()},
		{"only invalid", []float64{math.NaN(), math.Inf(1)}, 0.5, math.NaN()},
		{"single", []float64{3}, 0.5, 3}, // clamped to [min, max]
		{"min exact", []float64{3, 5, 7}, 0, 3},
		{"max exact", []float64{3, 5, 7}, 1, 7},
		{"zero bucket", []float64{-1, 1e-12, 0, -1e-10, 1}, 0.5, 0},
		{"median of two is the lower", []float64{-2, 2}, 0.5, -2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s Sketch // zero value works
			for _, x := range tc.xs {
				s.Add(x)
			}
			got := s.Quantile(tc.q)
			if !(got == tc.want || math.IsNaN(got) && math.IsNaN(tc.want)) && math.Abs(got-tc.want) > DefaultAlpha*math.Abs(tc.want) {
				t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	var s Sketch
	s.Add(math.NaN())
	s.Add(math.Inf(-1))
	s.Add(1)
	if s.Invalid() != 2 || s.Count() != 1 || s.Min() != 1 || s.Max() != 1 {
		t.Errorf("invalid %d count %d min %v max %v", s.Invalid(), s.Count(), s.Min(), s.Max())
	}
}

func TestNewSketchRejects(t *testing.T) {
	for _, tc := range []struct {
		alpha float64
		max   int
	}{{-0.01, 0}, {1, 0}, {0.6, 0}, {1e-9, 0}, {math.NaN(), 0}, {0.01, -1}, {0.01, MaxSketchBuckets + 1}} {
		if _, err := NewSketch(tc.alpha, tc.max); err == nil {
			t.Errorf("NewSketch(%v, %d) accepted", tc.alpha, tc.max)
		}
	}
	s := mustSketch(t, 0, 0)
	if s.Alpha() != DefaultAlpha || s.MaxBuckets() != DefaultMaxBuckets {
		t.Errorf("defaults: alpha %v max %d", s.Alpha(), s.MaxBuckets())
	}
}

func TestSketchMergeIncompatible(t *testing.T) {
	a := sketchOf(t, 0.01, 0, []float64{1, 2})
	before := viewSketch(a)
	for _, o := range []*Sketch{mustSketch(t, 0.02, 0), mustSketch(t, 0.01, 100)} {
		if err := a.Merge(o); !errors.Is(err, ErrIncompatible) {
			t.Errorf("Merge = %v, want ErrIncompatible", err)
		}
	}
	if d := cmp.Diff(before, viewSketch(a)); d != "" {
		t.Errorf("failed Merge changed the sketch:\n%s", d)
	}
	// The zero value is a default sketch and merges with one.
	var z Sketch
	if err := z.Merge(mustSketch(t, 0, 0)); err != nil {
		t.Error(err)
	}
}

// TestSketchCollapse: data spanning more buckets than the bound keeps the
// bound for the buckets above the lowest kept one, and nothing else changes.
func TestSketchCollapse(t *testing.T) {
	const maxBuckets = 64 // covers a ratio of γ^64 ≈ 3.6 at α = 0.01
	for _, sign := range []float64{1, -1} {
		xs := draw(7, 20000, func(r *rand.Rand) float64 { return sign * 1000 * r.Float64() })
		s := sketchOf(t, 0.01, maxBuckets, xs)
		st := &s.pos
		if sign < 0 {
			st = &s.neg
		}
		if !s.Collapsed() || len(st.bins) != maxBuckets {
			t.Fatalf("sign %v: collapsed %v with %d buckets", sign, s.Collapsed(), len(st.bins))
		}
		if s.Count() != int64(len(xs)) {
			t.Errorf("count %d, want %d", s.Count(), len(xs))
		}
		checkQuantiles(t, s, xs, func(q, xq float64) bool {
			return q == 0 || q == 1 || s.index(math.Abs(xq)) > st.offset
		})
		// Upper quantiles of positive data, lower ones of negative data.
		q := 0.99
		if sign < 0 {
			q = 0.01
		}
		if got, want := s.Quantile(q), slices.Sorted(slices.Values(xs))[int(q*float64(len(xs)-1))]; math.Abs(got-want) > 0.01*math.Abs(want)*(1+1e-9) {
			t.Errorf("sign %v: Quantile(%v) = %v, want %v", sign, q, got, want)
		}
	}
}

func TestSketchMergeLaws(t *testing.T) {
	type parts struct {
		name       string
		maxBuckets int
		a, b, c    []float64
	}
	cases := []parts{
		{"empty parts", 0, nil, []float64{1, -1, 0}, nil},
		{"disjoint ranges", 0, []float64{1e-6, 2e-6}, []float64{5, 6}, []float64{-1e6, -3}},
		{"collapse only in the union", 40, []float64{1, 1.1}, []float64{1.5}, []float64{3}},
		{"collapsed parts", 8, []float64{1, 2, 4, 8}, []float64{0.1, 0.5, -1, -100}, []float64{1e3, 1e-3, 0}},
		{"invalid only", 0, []float64{math.NaN()}, []float64{math.Inf(1), 2}, []float64{math.Inf(-1)}},
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 40 {
		maxBuckets := []int{0, 16, 100}[i%3]
		var p [3][]float64
		for j := range p {
			ds := datasets[rng.IntN(len(datasets))]
			p[j] = draw(rng.Uint64(), rng.IntN(300), ds.gen)
		}
		cases = append(cases, parts{fmt.Sprintf("random %d", i), maxBuckets, p[0], p[1], p[2]})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := sketchOf(t, 0, tc.maxBuckets, tc.a)
			b := sketchOf(t, 0, tc.maxBuckets, tc.b)
			c := sketchOf(t, 0, tc.maxBuckets, tc.c)
			same := sameSketch(t)
			checkLaws[Sketch](t, mustSketch(t, 0, tc.maxBuckets), a, b, c, same)
			// Exactly as if all values went to one sketch, collapsing or not.
			for _, order := range [][][]float64{{tc.a, tc.b, tc.c}, {tc.c, tc.a, tc.b}} {
				all := sketchOf(t, 0, tc.maxBuckets, slices.Concat(order...))
				if d := same(all, merged[Sketch](t, merged[Sketch](t, a, b), c)); d != "" {
					t.Errorf("merge differs from adding all (-all +merged):\n%s", d)
				}
			}
		})
	}
}

func TestSketchSelfMergeAndReset(t *testing.T) {
	xs := []float64{-3, 0, 1, 2, 2}
	s := sketchOf(t, 0, 0, xs)
	if err := s.Merge(s); err != nil {
		t.Fatal(err)
	}
	if d := sameSketch(t)(sketchOf(t, 0, 0, slices.Concat(xs, xs)), s); d != "" {
		t.Errorf("self merge:\n%s", d)
	}
	s.Reset()
	if d := sameSketch(t)(mustSketch(t, 0, 0), s); d != "" {
		t.Errorf("reset:\n%s", d)
	}
}

func TestSketchRoundTrip(t *testing.T) {
	for i, ds := range datasets {
		for _, maxBuckets := range []int{0, 32} {
			s := sketchOf(t, 0.02, maxBuckets, draw(uint64(i), 1000, ds.gen))
			if d := sameSketch(t)(s, cloneOf[Sketch](t, s)); d != "" {
				t.Errorf("%s: round trip (-want +got):\n%s", ds.name, d)
			}
		}
	}
	var zero Sketch
	if d := sameSketch(t)(&zero, cloneOf[Sketch](t, &zero)); d != "" {
		t.Errorf("zero value round trip:\n%s", d)
	}
}

func TestSketchUnmarshalRejects(t *testing.T) {
	valid := encode[Sketch](t, sketchOf(t, 0, 0, []float64{-1, 0, 1, 2}))
	// build assembles an encoding: alpha, max buckets, invalid, zero,
	// positive store (n, offset, flag, counts...), negative store n = 0,
	// then min and max.
	build := func(alpha float64, maxBuckets, zero uint64, pos []int64, minmax ...float64) []byte {
		b := appendFloat([]byte{tagSketch}, alpha)
		b = append(b, byte(maxBuckets), 0, byte(zero))
		if len(pos) == 0 {
			b = append(b, 0)
		} else {
			b = append(b, byte(len(pos)-2))
			b = appendVarintForTest(b, pos[0])
			for _, c := range pos[1:] {
				b = append(b, byte(c))
			}
		}
		b = append(b, 0)
		for _, f := range minmax {
			b = appendFloat(b, f)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"moments blob", encode[Moments](t, momentsOf(1))},
		{"truncated", valid[:len(valid)-3]},
		{"trailing", append(slices.Clone(valid), 1)},
		{"alpha NaN", build(math.NaN(), 100, 0, nil)},
		{"alpha 1", build(1, 100, 0, nil)},
		{"max buckets 0", build(0.01, 0, 0, nil)},
		{"too many buckets", build(0.01, 2, 0, []int64{0, 0, 1, 1, 1}, 1, 2)},
		{"empty end bucket", build(0.01, 100, 0, []int64{0, 0, 1, 0}, 1, 2)},
		{"bad flag", build(0.01, 100, 0, []int64{0, 2, 1}, 1, 2)},
		{"collapsed below bound", build(0.01, 100, 0, []int64{0, 1, 1}, 1, 2)},
		{"offset out of range", build(0.01, 100, 0, []int64{1 << 40, 0, 1}, 1, 2)},
		{"missing min max", build(0.01, 100, 1, nil)},
		{"min above max", build(0.01, 100, 0, []int64{0, 0, 1}, 2, 1)},
		{"positive bucket, max 0", build(0.01, 100, 1, []int64{0, 0, 1}, 0, 0)},
		{"min NaN", build(0.01, 100, 1, nil, math.NaN(), 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sketchOf(t, 0, 0, []float64{5})
			before := viewSketch(s)
			if err := s.UnmarshalBinary(tc.data); !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			if d := cmp.Diff(before, viewSketch(s)); d != "" {
				t.Errorf("failed UnmarshalBinary changed the sketch:\n%s", d)
			}
		})
	}
	if err := new(Sketch).UnmarshalBinary(build(0.01, 100, 1, []int64{0, 0, 1}, 0, 1)); err != nil {
		t.Errorf("valid hand-made encoding rejected: %v", err)
	}
}
