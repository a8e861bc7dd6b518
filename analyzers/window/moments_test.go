package window

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

func momentsOf(xs ...float64) *Moments {
	var m Moments
	for _, x := range xs {
		m.Add(x)
	}
	return &m
}

// twoPass computes mean and M2 the textbook way, as the reference.
func twoPass(xs []float64) (mean, m2 float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		m2 += (x - mean) * (x - mean)
	}
	return mean, m2
}

func TestMomentsBasic(t *testing.T) {
	m := momentsOf(2, 4, 4, 4, 5, 5, 7, 9, math.NaN(), math.Inf(1), math.Inf(-1))
	type stats struct {
		Count, Invalid                          int64
		Mean, Var, SampleVar, Std, Min, Max, M2 float64
	}
	want := stats{Count: 8, Invalid: 3, Mean: 5, Var: 4, SampleVar: 32.0 / 7, Std: 2, Min: 2, Max: 9, M2: 32}
	got := stats{m.Count(), m.Invalid(), m.Mean(), m.Var(), m.SampleVar(), m.Std(), m.Min(), m.Max(), m.M2()}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := m.SampleStd() - math.Sqrt(32.0/7); math.Abs(d) > 1e-15 {
		t.Errorf("SampleStd off by %v", d)
	}
}

func TestMomentsEmpty(t *testing.T) {
	var m Moments
	for name, v := range map[string]float64{"Mean": m.Mean(), "Var": m.Var(), "Std": m.Std(), "Min": m.Min(), "Max": m.Max(), "SampleVar": momentsOf(1).SampleVar()} {
		if !math.IsNaN(v) {
			t.Errorf("%s of too few values = %v, want NaN", name, v)
		}
	}
	if m.Count() != 0 || m.M2() != 0 {
		t.Errorf("zero value not empty: %+v", m)
	}
}

func TestMomentsNegativeZero(t *testing.T) {
	a, b := momentsOf(math.Copysign(0, -1), 0), momentsOf(0, math.Copysign(0, -1))
	if math.Signbit(a.Min()) || math.Signbit(b.Min()) || math.Signbit(a.Max()) {
		t.Errorf("-0 kept as an extreme: %v %v", a.Min(), b.Min())
	}
}

// TestMomentsAccuracy compares Welford and the merge of parts with a two-pass
// computation on data whose mean is 7e4 standard deviations from zero. The
// naive Σx² − n·mean² formula has a relative error near ε·(mean/σ)² ≈ 5e-7
// here; the tolerance, 1e-10 relative, is far below that and well above the
// ~1e-12 the stable updates show.
func TestMomentsAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	xs := make([]float64, 10000)
	for i := range xs {
		xs[i] = 1e6 + 15*rng.NormFloat64()
	}
	mean, m2 := twoPass(xs)
	whole := momentsOf(xs...)
	parts := momentsOf(xs[:1]...)
	for _, p := range [][]float64{xs[1:100], xs[100:5000], xs[5000:]} {
		parts.Merge(momentsOf(p...))
	}
	for name, m := range map[string]*Moments{"added": whole, "merged": parts} {
		if e := testutil.RelErr(m.Mean(), mean); e > 1e-10 {
			t.Errorf("%s: mean %v, want %v (rel err %g)", name, m.Mean(), mean, e)
		}
		if e := testutil.RelErr(m.M2(), m2); e > 1e-10 {
			t.Errorf("%s: M2 %v, want %v (rel err %g)", name, m.M2(), m2, e)
		}
	}
}

// sameMoments: exact on count, invalid, min and max; mean and M2 within 1e-12
// relative, because regrouped merges agree only up to rounding. The mean's
// error is relative to max(|mean|, σ), the scale its rounding lives at, so
// that a mean that cancels to near zero does not fail on noise.
func sameMoments(want, got *Moments) string {
	type exact struct{ N, Invalid, Min, Max any }
	if d := cmp.Diff(exact{want.n, want.invalid, want.min, want.max}, exact{got.n, got.invalid, got.min, got.max}); d != "" {
		return d
	}
	if want.n == 0 {
		return ""
	}
	scale := math.Max(math.Abs(want.mean), math.Sqrt(want.m2/float64(want.n)))
	if e := math.Abs(got.mean - want.mean); e > 1e-12*scale {
		return fmt.Sprintf("mean %v != %v (rel %g)", want.mean, got.mean, e/scale)
	}
	if e := testutil.RelErr(got.m2, want.m2); e > 1e-12 {
		return fmt.Sprintf("M2 %v != %v (rel %g)", want.m2, got.m2, e)
	}
	return ""
}

func TestMomentsMergeLaws(t *testing.T) {
	cases := []struct {
		name    string
		a, b, c []float64
	}{
		{"singletons", []float64{1}, []float64{2}, []float64{3}},
		{"empty parts", nil, []float64{2, 3}, nil},
		{"invalid only", []float64{math.NaN()}, []float64{1, 2}, []float64{math.Inf(1)}},
		{"equal means", []float64{1, 3}, []float64{2, 2}, []float64{0, 4}},
		{"far apart", []float64{1e9, 1e9 + 1}, []float64{-1e9}, []float64{0.5}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 40 {
		var parts [3][]float64
		for j := range parts {
			loc, scale := 100*rng.NormFloat64(), math.Exp(3*rng.NormFloat64())
			for range rng.IntN(50) {
				parts[j] = append(parts[j], loc+scale*rng.NormFloat64())
			}
		}
		cases = append(cases, struct {
			name    string
			a, b, c []float64
		}{fmt.Sprintf("random %d", i), parts[0], parts[1], parts[2]})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := momentsOf(tc.a...), momentsOf(tc.b...), momentsOf(tc.c...)
			checkLaws[Moments](t, &Moments{}, a, b, c, sameMoments)
			// Commutativity is exact, bit for bit.
			if ab, ba := merged[Moments](t, a, b), merged[Moments](t, b, a); *ab != *ba {
				t.Errorf("a+b = %+v, b+a = %+v", *ab, *ba)
			}
			all := momentsOf(append(append(append([]float64(nil), tc.a...), tc.b...), tc.c...)...)
			if d := sameMoments(all, merged[Moments](t, merged[Moments](t, a, b), c)); d != "" {
				t.Errorf("merge differs from adding all: %s", d)
			}
		})
	}
}

func TestMomentsSelfMerge(t *testing.T) {
	m := momentsOf(1, 2, 3)
	m.Merge(m)
	if d := sameMoments(momentsOf(1, 2, 3, 1, 2, 3), m); d != "" {
		t.Error(d)
	}
}

func TestMomentsRoundTrip(t *testing.T) {
	for _, m := range []*Moments{{}, momentsOf(math.NaN()), momentsOf(-1.5), momentsOf(1, 2, 3, 1e300, math.Inf(1))} {
		got := cloneOf[Moments](t, m)
		if *got != *m {
			t.Errorf("round trip of %+v gave %+v", *m, *got)
		}
	}
}

func TestMomentsUnmarshalRejects(t *testing.T) {
	valid := encode[Moments](t, momentsOf(1, 2))
	f := func(fs ...float64) []byte {
		b := []byte{tagMoments, 2, 0}
		for _, x := range fs {
			b = appendFloat(b, x)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
		want error
	}{
		{"nil", nil, ErrCorrupt},
		{"other type", append([]byte{tagSketch}, valid[1:]...), ErrCorrupt},
		{"newer version", append([]byte{tagMoments + 1}, valid[1:]...), ErrVersion},
		{"truncated", valid[:len(valid)-1], ErrCorrupt},
		{"trailing", append(valid, 0), ErrCorrupt},
		{"overlong varint", []byte{tagMoments, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}, ErrCorrupt},
		{"count over int64", []byte{tagMoments, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0}, ErrCorrupt},
		{"NaN mean", f(math.NaN(), 0, 1, 2), ErrCorrupt},
		{"negative M2", f(1, -1, 1, 2), ErrCorrupt},
		{"infinite min", f(1, 0, math.Inf(-1), 2), ErrCorrupt},
		{"min above max", f(1, 0, 3, 2), ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := momentsOf(7)
			err := m.UnmarshalBinary(tc.data)
			if !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if *m != *momentsOf(7) {
				t.Errorf("failed UnmarshalBinary changed the receiver to %+v", *m)
			}
		})
	}
	if err := new(Moments).UnmarshalBinary(f(1, 0, 1, 2)); err != nil {
		t.Errorf("valid hand-made encoding rejected: %v", err)
	}
}
