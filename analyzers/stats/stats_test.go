package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/gonum/mat"
)

var nan, inf = math.NaN(), math.Inf(1)

func TestKS2SampErrors(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want error
	}{
		{"empty a", nil, []float64{1}, ErrEmpty},
		{"empty b", []float64{1}, []float64{}, ErrEmpty},
		{"NaN in a", []float64{1, nan}, []float64{1}, ErrNaN},
		{"NaN in b", []float64{1}, []float64{2, nan}, ErrNaN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := KS2Samp(tt.a, tt.b); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestKS2SampProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a := make([]float64, 300)
	b := make([]float64, 200)
	for i := range a {
		a[i] = r.NormFloat64()
	}
	for i := range b {
		b[i] = r.NormFloat64() + 0.3
	}
	a0, b0 := slices.Clone(a), slices.Clone(b)
	ab, err := KS2Samp(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a0, a); diff != "" {
		t.Errorf("KS2Samp modified a:\n%s", diff)
	}
	if diff := cmp.Diff(b0, b); diff != "" {
		t.Errorf("KS2Samp modified b:\n%s", diff)
	}
	ba, err := KS2Samp(b, a)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ab, ba); diff != "" {
		t.Errorf("KS2Samp is not symmetric (-ab +ba):\n%s", diff)
	}
	// Infinite values are ordinary extreme observations.
	got, err := KS2Samp([]float64{-inf, 0, 1}, []float64{2, 3, inf})
	if err != nil {
		t.Fatal(err)
	}
	// scipy: KstestResult(statistic=1.0, pvalue=0.09999999999999999)
	if want := (KSResult{Statistic: 1, PValue: 0.09999999999999999, Method: KSExact}); got != want {
		t.Errorf("with ±Inf: %+v, want %+v", got, want)
	}
}

func TestChiSquareErrors(t *testing.T) {
	tests := []struct {
		name  string
		table [][]float64
		want  error
	}{
		{"no rows", nil, ErrEmpty},
		{"no columns", [][]float64{{}, {}}, ErrEmpty},
		{"ragged", [][]float64{{1, 2}, {3}}, ErrShape},
		{"negative", [][]float64{{1, -2}, {3, 4}}, ErrNegative},
		{"NaN", [][]float64{{1, nan}, {3, 4}}, ErrNaN},
		{"Inf", [][]float64{{1, inf}, {3, 4}}, ErrNaN},
		{"all zero", [][]float64{{0, 0}, {0, 0}}, ErrEmpty},
		{"empty sample", [][]float64{{1, 2}, {0, 0}}, ErrEmpty},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ChiSquare(tt.table); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestChiSquareDropsZeroColumns(t *testing.T) {
	withZeros, err := ChiSquare([][]float64{{0, 10, 0, 20}, {0, 15, 0, 5}})
	if err != nil {
		t.Fatal(err)
	}
	without, err := ChiSquare([][]float64{{10, 20}, {15, 5}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(without, withZeros); diff != "" {
		t.Errorf("zero columns changed the result (-without +with):\n%s", diff)
	}
}

func TestChiSquareCutoff(t *testing.T) {
	tests := []struct {
		p    int
		q    float64
		want float64
	}{
		{2, 0, 0},
		{2, 1, inf},
		{2, 0.5, 2 * math.Ln2}, // χ²(2) is exponential with mean 2
		{0, 0.5, nan},
		{3, -0.1, nan},
		{3, 1.1, nan},
		{3, nan, nan},
	}
	for _, tt := range tests {
		got := ChiSquareCutoff(tt.p, tt.q)
		if !(got == tt.want || (math.IsNaN(got) && math.IsNaN(tt.want)) || math.Abs(got-tt.want) < 1e-12) {
			t.Errorf("ChiSquareCutoff(%d, %v) = %v, want %v", tt.p, tt.q, got, tt.want)
		}
	}
}

func TestPSIErrors(t *testing.T) {
	tests := []struct {
		name     string
		ref, cur []float64
		bins     int
		want     error
	}{
		{"empty ref", nil, []float64{1}, 10, ErrEmpty},
		{"empty cur", []float64{1}, nil, 10, ErrEmpty},
		{"NaN", []float64{1, nan}, []float64{1}, 10, ErrNaN},
		{"Inf", []float64{1}, []float64{inf}, 10, ErrNaN},
		{"no bins", []float64{1}, []float64{1}, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PSI(tt.ref, tt.cur, tt.bins)
			if tt.want == nil && err == nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestPSIProperties(t *testing.T) {
	ref := []float64{5, 1, 4, 2, 3, 9, 7, 8, 6, 0}
	ref0 := slices.Clone(ref)
	got, err := PSI(ref, ref, 4)
	if err != nil || got != 0 {
		t.Errorf("PSI(ref, ref) = %v, %v; want 0", got, err)
	}
	if diff := cmp.Diff(ref0, ref); diff != "" {
		t.Errorf("PSI modified ref:\n%s", diff)
	}
	// Everything in cur lands in the top bin: three bins at the epsilon floor.
	got, err = PSI(ref, []float64{100, 200}, 4)
	if err != nil {
		t.Fatal(err)
	}
	r := []float64{0.3, 0.2, 0.2, 0.3} // edges 2.25, 4.5, 6.75 over 0..9
	c := []float64{PSIEpsilon, PSIEpsilon, PSIEpsilon, 1}
	want := 0.0
	for i := range r {
		want += (c[i] - r[i]) * math.Log(c[i]/r[i])
	}
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("PSI with empty bins = %v, want %v", got, want)
	}
}

func TestPSICategoricalErrors(t *testing.T) {
	tests := []struct {
		name     string
		ref, cur []float64
		want     error
	}{
		{"length mismatch", []float64{1, 2}, []float64{1}, ErrShape},
		{"empty", nil, nil, ErrEmpty},
		{"zero total", []float64{0, 0}, []float64{1, 2}, ErrEmpty},
		{"negative", []float64{1, -1}, []float64{1, 2}, ErrNegative},
		{"NaN", []float64{1, 2}, []float64{nan, 2}, ErrNaN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := PSICategorical(tt.ref, tt.cur); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestJensenShannonEdges(t *testing.T) {
	tests := []struct {
		name string
		p, q []float64
		want float64
	}{
		{"length mismatch", []float64{1}, []float64{1, 2}, nan},
		{"empty", nil, nil, nan},
		{"zero sum", []float64{0, 0}, []float64{1, 2}, nan},
		{"negative", []float64{-1, 2}, []float64{1, 2}, nan},
		{"NaN", []float64{nan, 2}, []float64{1, 2}, nan},
		{"Inf", []float64{inf, 2}, []float64{1, 2}, nan},
		{"identical up to scale", []float64{1, 2, 3}, []float64{2, 4, 6}, 0},
		{"disjoint", []float64{1, 0}, []float64{0, 1}, math.Sqrt(math.Ln2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JensenShannon(tt.p, tt.q)
			if !(got == tt.want || (math.IsNaN(got) && math.IsNaN(tt.want)) || math.Abs(got-tt.want) < 1e-15) {
				t.Errorf("JensenShannon = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWasserstein1Edges(t *testing.T) {
	tests := []struct {
		name string
		a, b []float64
		want float64
	}{
		{"empty", nil, []float64{1}, nan},
		{"NaN", []float64{1, nan}, []float64{1}, nan},
		{"identical", []float64{3, 1, 2}, []float64{1, 2, 3}, 0},
		{"point masses", []float64{0}, []float64{2.5}, 2.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Wasserstein1(tt.a, tt.b)
			if !(got == tt.want || (math.IsNaN(got) && math.IsNaN(tt.want))) {
				t.Errorf("Wasserstein1 = %v, want %v", got, tt.want)
			}
		})
	}
}

// gaussianWithOutliers returns n rows of p features: 90% standard normal,
// 10% shifted by 20 in every feature.
func gaussianWithOutliers(n, p int, seed uint64) *mat.Dense {
	r := rand.New(rand.NewPCG(seed, 1))
	x := mat.NewDense(n, p, nil)
	for i := 0; i < n; i++ {
		shift := 0.0
		if i >= n*9/10 {
			shift = 20
		}
		for j := 0; j < p; j++ {
			x.Set(i, j, r.NormFloat64()+shift)
		}
	}
	return x
}

func TestFitMCDErrors(t *testing.T) {
	constant := gaussianWithOutliers(50, 3, 1)
	for i := 0; i < 50; i++ {
		constant.Set(i, 1, 7)
	}
	exactFit := gaussianWithOutliers(50, 2, 2)
	for i := 0; i < 40; i++ { // 80% of the rows on the line x1 = 2*x0
		exactFit.Set(i, 1, 2*exactFit.At(i, 0))
	}
	withNaN := gaussianWithOutliers(20, 2, 3)
	withNaN.Set(4, 1, nan)
	tests := []struct {
		name string
		x    *mat.Dense
		want error
	}{
		{"nil", nil, ErrEmpty},
		{"NaN", withNaN, ErrNaN},
		{"constant feature", constant, ErrSingular},
		{"too few rows", gaussianWithOutliers(3, 3, 4), ErrSingular},
		{"exact fit", exactFit, ErrSingular},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := FitMCD(tt.x, nil); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestFitMCDDeterministicAndRobust(t *testing.T) {
	x := gaussianWithOutliers(300, 4, 9)
	x0 := mat.DenseCopyOf(x)
	m1, err := FitMCD(x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !mat.Equal(x, x0) {
		t.Error("FitMCD modified x")
	}
	m2, err := FitMCD(x, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(m1.Support, m2.Support); diff != "" || !slices.Equal(m1.Location, m2.Location) {
		t.Errorf("nil rng is not reproducible:\n%s", diff)
	}
	// The 30 shifted rows are outliers: excluded from the support and far
	// beyond the 0.999 cutoff; the location stays near the origin.
	cut := ChiSquareCutoff(4, 0.999)
	for i := 270; i < 300; i++ {
		if m1.Support[i] || m1.Mahalanobis(x.RawRowView(i)) < cut {
			t.Errorf("row %d: support %v, distance %v; want an outlier", i, m1.Support[i], m1.Mahalanobis(x.RawRowView(i)))
		}
	}
	for j, v := range m1.Location {
		if math.Abs(v) > 0.5 {
			t.Errorf("Location[%d] = %v, want near 0", j, v)
		}
	}
	if got := m1.Mahalanobis([]float64{1, 2}); !math.IsNaN(got) {
		t.Errorf("Mahalanobis of a short vector = %v, want NaN", got)
	}
	if got := (&MCD{}).Mahalanobis([]float64{1}); !math.IsNaN(got) {
		t.Errorf("Mahalanobis on the zero MCD = %v, want NaN", got)
	}
}

func TestSmallestTies(t *testing.T) {
	// Ties straddling the boundary follow numpy's argsort; a unique boundary
	// gives the obvious set.
	dist := []float64{3, 1, 2, 2, 2, 0}
	want := make([]bool, len(dist))
	for _, i := range numpyArgsort(dist)[:3] {
		want[i] = true
	}
	smallest := func(dist []float64, h int) []bool {
		support := make([]bool, len(dist))
		smallestInto(support, dist, h, slices.Clone(dist))
		return support
	}
	if diff := cmp.Diff(want, smallest(dist, 3)); diff != "" {
		t.Errorf("tied boundary (-argsort +smallest):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{false, true, false, false, false, true}, smallest(dist, 2)); diff != "" {
		t.Errorf("unique boundary:\n%s", diff)
	}
}
