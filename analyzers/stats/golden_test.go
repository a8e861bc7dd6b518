package stats

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/gonum/mat"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// Tolerances against the scipy/scikit-learn golden values
// (testdata/gen_golden.py). The Go code evaluates the same formulas in the
// same order as the reference, so the only differences are rounding
// (numpy's pairwise sums, BLAS orderings, scipy's double-double Smirnov
// sums): about 1e-11 relative at worst, measured. 1e-6 leaves ample room
// while still catching any change of method or off-by-one; below 1e-12 in
// absolute value only the absolute error is checked, since p-values that
// small carry no decision.
const (
	goldenRel = 1e-6
	goldenAbs = 1e-12
)

// approxEqual reports whether got matches want to goldenRel relative error,
// or goldenAbs absolute error near zero.
func approxEqual(got, want float64) bool {
	return testutil.ApproxEqual(got, want, goldenRel, goldenAbs)
}

// worst tracks the largest relative error seen, for the test log. It counts
// every reference value above 1e-300, including the tiny p-values that
// approxEqual checks only absolutely.
type worst struct{ rel float64 }

func (w *worst) see(got, want float64) {
	if math.Abs(want) > 1e-300 {
		w.rel = max(w.rel, testutil.RelErr(got, want))
	}
}

type arraySpec struct {
	Pool   string    `json:"pool"`
	Lo     int       `json:"lo"`
	Hi     int       `json:"hi"`
	Values []float64 `json:"values"`
}

type goldenFile struct {
	Pools map[string][]float64 `json:"pools"`
	KS    []struct {
		Name      string    `json:"name"`
		A         arraySpec `json:"a"`
		B         arraySpec `json:"b"`
		Statistic float64   `json:"statistic"`
		PValue    float64   `json:"pvalue"`
		Method    string    `json:"method"`
	} `json:"ks"`
	KSExact []struct {
		N1     int      `json:"n1"`
		N2     int      `json:"n2"`
		D      float64  `json:"d"`
		OK     bool     `json:"ok"`
		PValue *float64 `json:"pvalue"`
	} `json:"ks_exact"`
	KSTwo []struct {
		N   int     `json:"n"`
		X   float64 `json:"x"`
		SF  float64 `json:"sf"`
		CDF float64 `json:"cdf"`
	} `json:"kstwo"`
	ChiSquare []struct {
		Name      string      `json:"name"`
		Table     [][]float64 `json:"table"`
		Statistic float64     `json:"statistic"`
		PValue    float64     `json:"pvalue"`
		DOF       int         `json:"dof"`
	} `json:"chisquare"`
	Chi2Quantiles []struct {
		P   int     `json:"p"`
		Q   float64 `json:"q"`
		PPF float64 `json:"ppf"`
		ISF float64 `json:"isf"`
	} `json:"chi2_quantiles"`
	PSI []struct {
		Name string    `json:"name"`
		Ref  arraySpec `json:"ref"`
		Cur  arraySpec `json:"cur"`
		Bins int       `json:"bins"`
		PSI  float64   `json:"psi"`
	} `json:"psi"`
	PSICategorical []struct {
		Name string    `json:"name"`
		Ref  []float64 `json:"ref"`
		Cur  []float64 `json:"cur"`
		PSI  float64   `json:"psi"`
	} `json:"psi_categorical"`
	JensenShannon []struct {
		Name string    `json:"name"`
		P    []float64 `json:"p"`
		Q    []float64 `json:"q"`
		JS   float64   `json:"js"`
	} `json:"jensenshannon"`
	Wasserstein []struct {
		Name string    `json:"name"`
		A    []float64 `json:"a"`
		B    []float64 `json:"b"`
		W    float64   `json:"w"`
	} `json:"wasserstein"`
	MCD        []goldenMCD `json:"mcd"`
	LedoitWolf []struct {
		Name       string    `json:"name"`
		N          int       `json:"n"`
		P          int       `json:"p"`
		X          []float64 `json:"x"`
		Centered   bool      `json:"centered"`
		Covariance []float64 `json:"covariance"`
		Shrinkage  float64   `json:"shrinkage"`
	} `json:"ledoit_wolf"`
}

type goldenMCD struct {
	Name             string      `json:"name"`
	N                int         `json:"n"`
	P                int         `json:"p"`
	X                []float64   `json:"x"`
	RawLocation      []float64   `json:"raw_location"`
	RawCovariance    []float64   `json:"raw_covariance"`
	RawSupport       []bool      `json:"raw_support"`
	Location         []float64   `json:"location"`
	Covariance       []float64   `json:"covariance"`
	Support          []bool      `json:"support"`
	Dist             []float64   `json:"dist"`
	Probe            [][]float64 `json:"probe"`
	ProbeMahalanobis []float64   `json:"probe_mahalanobis"`
}

var loadGolden = sync.OnceValues(func() (*goldenFile, error) {
	raw, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		return nil, err
	}
	var g goldenFile
	if err := json.Unmarshal(raw, &g); err != nil {
		return nil, err
	}
	return &g, nil
})

func golden(t *testing.T) *goldenFile {
	t.Helper()
	g, err := loadGolden()
	if err != nil {
		t.Fatalf("golden.json (regenerate with /usr/bin/python3 analyzers/stats/testdata/gen_golden.py): %v", err)
	}
	return g
}

func (g *goldenFile) array(s arraySpec) []float64 {
	if s.Pool != "" {
		return g.Pools[s.Pool][s.Lo:s.Hi]
	}
	return s.Values
}

func TestKS2SampGolden(t *testing.T) {
	g := golden(t)
	var ws, wp worst
	for _, c := range g.KS {
		t.Run(c.Name, func(t *testing.T) {
			a, b := g.array(c.A), g.array(c.B)
			got, err := KS2Samp(a, b)
			if err != nil {
				t.Fatal(err)
			}
			if !approxEqual(got.Statistic, c.Statistic) || !approxEqual(got.PValue, c.PValue) || got.Method != c.Method {
				t.Errorf("KS2Samp(n1=%d, n2=%d) = %+v, want {Statistic:%v PValue:%v Method:%s}",
					len(a), len(b), got, c.Statistic, c.PValue, c.Method)
			}
			ws.see(got.Statistic, c.Statistic)
			wp.see(got.PValue, c.PValue)
		})
	}
	t.Logf("max relative error: statistic %.2g, p-value %.2g", ws.rel, wp.rel)
}

// TestKSExactGolden checks the exact-path kernels bit for bit in effect:
// they are straight ports with the same operation order as scipy's.
func TestKSExactGolden(t *testing.T) {
	var w worst
	for _, c := range golden(t).KSExact {
		d, p, ok := ksExact(c.N1, c.N2, c.D)
		if ok != c.OK || d != c.D || (c.PValue != nil && testutil.RelErr(p, *c.PValue) > 1e-12) {
			want := math.NaN()
			if c.PValue != nil {
				want = *c.PValue
			}
			t.Errorf("ksExact(%d, %d, %v) = %v, %v, %v; want %v, %v, %v", c.N1, c.N2, c.D, d, p, ok, c.D, want, c.OK)
		}
		if c.PValue != nil {
			w.see(p, *c.PValue)
		}
	}
	t.Logf("max relative error: %.2g", w.rel)
}

// TestKSTwoGolden checks kstwo.sf and .cdf over every branch of scipy's
// _kolmogn. The tolerance is 1e-9 relative down to 1e-300: the branches are
// ported operation for operation except the one-sided Smirnov sum, which
// scipy evaluates in double-double and this package in log space with exact
// integer parts (about 2e-11 relative at n = 1e6).
func TestKSTwoGolden(t *testing.T) {
	const rel = 1e-9
	var w worst
	for _, c := range golden(t).KSTwo {
		sf, cdf := kstwoSF(c.N, c.X), kstwoCDF(c.N, c.X)
		bad := func(got, want float64) bool {
			return testutil.RelErr(got, want) > rel && math.Abs(got-want) > 1e-300
		}
		if bad(sf, c.SF) || bad(cdf, c.CDF) {
			t.Errorf("n=%d x=%v (n·x²=%.3g): sf %v cdf %v, want %v %v", c.N, c.X, float64(c.N)*c.X*c.X, sf, cdf, c.SF, c.CDF)
		}
		if c.SF > 1e-300 {
			w.rel = max(w.rel, testutil.RelErr(sf, c.SF))
		}
	}
	t.Logf("max relative error of sf: %.2g", w.rel)
}

func TestChiSquareGolden(t *testing.T) {
	g := golden(t)
	var ws, wp worst
	for _, c := range g.ChiSquare {
		t.Run(c.Name, func(t *testing.T) {
			got, err := ChiSquare(c.Table)
			if err != nil {
				t.Fatal(err)
			}
			if !approxEqual(got.Statistic, c.Statistic) || !approxEqual(got.PValue, c.PValue) || got.DOF != c.DOF {
				t.Errorf("ChiSquare = %+v, want {Statistic:%v PValue:%v DOF:%d}", got, c.Statistic, c.PValue, c.DOF)
			}
			ws.see(got.Statistic, c.Statistic)
			wp.see(got.PValue, c.PValue)
		})
	}
	var wq worst
	for _, c := range g.Chi2Quantiles {
		ppf, isf := ChiSquareCutoff(c.P, c.Q), chi2ISF(c.Q, c.P)
		if !approxEqual(ppf, c.PPF) || !approxEqual(isf, c.ISF) {
			t.Errorf("chi2(%d) q=%v: ppf %v isf %v, want %v %v", c.P, c.Q, ppf, isf, c.PPF, c.ISF)
		}
		wq.see(ppf, c.PPF)
		wq.see(isf, c.ISF)
	}
	t.Logf("max relative error: statistic %.2g, p-value %.2g, quantiles %.2g", ws.rel, wp.rel, wq.rel)
}

func TestPSIGolden(t *testing.T) {
	g := golden(t)
	var w worst
	for _, c := range g.PSI {
		t.Run(c.Name, func(t *testing.T) {
			got, err := PSI(g.array(c.Ref), g.array(c.Cur), c.Bins)
			if err != nil {
				t.Fatal(err)
			}
			if !approxEqual(got, c.PSI) {
				t.Errorf("PSI = %v, want %v", got, c.PSI)
			}
			w.see(got, c.PSI)
		})
	}
	for _, c := range g.PSICategorical {
		t.Run("categorical/"+c.Name, func(t *testing.T) {
			got, err := PSICategorical(c.Ref, c.Cur)
			if err != nil {
				t.Fatal(err)
			}
			if !approxEqual(got, c.PSI) {
				t.Errorf("PSICategorical = %v, want %v", got, c.PSI)
			}
			w.see(got, c.PSI)
		})
	}
	t.Logf("max relative error: %.2g", w.rel)
}

func TestJensenShannonGolden(t *testing.T) {
	var w worst
	for _, c := range golden(t).JensenShannon {
		t.Run(c.Name, func(t *testing.T) {
			if got := JensenShannon(c.P, c.Q); !approxEqual(got, c.JS) {
				t.Errorf("JensenShannon = %v, want %v", got, c.JS)
			} else {
				w.see(got, c.JS)
			}
		})
	}
	t.Logf("max relative error: %.2g", w.rel)
}

func TestWasserstein1Golden(t *testing.T) {
	var w worst
	for _, c := range golden(t).Wasserstein {
		t.Run(c.Name, func(t *testing.T) {
			if got := Wasserstein1(c.A, c.B); !approxEqual(got, c.W) {
				t.Errorf("Wasserstein1 = %v, want %v", got, c.W)
			} else {
				w.see(got, c.W)
			}
		})
	}
	t.Logf("max relative error: %.2g", w.rel)
}

// mcdTol is the tolerance for MCD locations, covariances and distances,
// relative to the largest entry of the quantity compared. Once the same
// raw support is found, the rest (mean, covariance, the consistency
// factor, the reweighting mask, inverse and distances) is deterministic
// linear algebra on well-conditioned matrices; the implementations differ
// only in rounding (Cholesky here, eigendecomposition in pinvh, LU in
// slogdet), worth about 1e-14 relative. 1e-6 is generous for that and
// still far below any statistical difference.
const mcdTol = 1e-6

func TestFitMCDGolden(t *testing.T) {
	worstRel := 0.0
	for _, c := range golden(t).MCD {
		t.Run(c.Name, func(t *testing.T) {
			x := mat.NewDense(c.N, c.P, c.X)
			// Five generators: on unique-optimum data the answer must not
			// depend on the random starts.
			for seed := uint64(1); seed <= 5; seed++ {
				m, err := FitMCD(x, rand.New(rand.NewPCG(seed, 7)))
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(c.RawSupport, m.RawSupport); diff != "" {
					t.Fatalf("seed %d: raw support (-sklearn +go):\n%s", seed, diff)
				}
				if diff := cmp.Diff(c.Support, m.Support); diff != "" {
					t.Fatalf("seed %d: support (-sklearn +go):\n%s", seed, diff)
				}
				checks := []struct {
					what      string
					got, want []float64
				}{
					{"raw location", m.RawLocation, c.RawLocation},
					{"raw covariance", m.RawCovariance.RawSymmetric().Data, c.RawCovariance},
					{"location", m.Location, c.Location},
					{"covariance", m.Covariance.RawSymmetric().Data, c.Covariance},
					{"dist", m.Dist, c.Dist},
				}
				probe := make([]float64, len(c.Probe))
				for i, row := range c.Probe {
					probe[i] = m.Mahalanobis(row)
				}
				checks = append(checks, struct {
					what      string
					got, want []float64
				}{"probe mahalanobis", probe, c.ProbeMahalanobis})
				for _, ch := range checks {
					r := maxRelToScale(ch.got, ch.want)
					worstRel = max(worstRel, r)
					if r > mcdTol {
						t.Errorf("seed %d: %s: relative error %.3g > %g\n got %v\nwant %v", seed, ch.what, r, mcdTol, ch.got, ch.want)
					}
				}
			}
		})
	}
	t.Logf("max error relative to the largest entry: %.2g", worstRel)
}

// maxRelToScale is max|got-want| / max|want|, or +Inf on a length mismatch.
func maxRelToScale(got, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	scale, diff := 0.0, 0.0
	for i := range want {
		scale = max(scale, math.Abs(want[i]))
		diff = max(diff, math.Abs(got[i]-want[i]))
	}
	if scale == 0 {
		return diff
	}
	return diff / scale
}

// TestLedoitWolfGolden: the shrinkage and the shrunk covariance are
// scikit-learn's covariance.ledoit_wolf, with more features than rows too.
func TestLedoitWolfGolden(t *testing.T) {
	cases := golden(t).LedoitWolf
	if len(cases) == 0 {
		t.Fatal("no golden Ledoit-Wolf cases")
	}
	for _, c := range cases {
		cov, shrink, err := LedoitWolf(mat.NewDense(c.N, c.P, c.X), c.Centered)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !approxEqual(shrink, c.Shrinkage) {
			t.Errorf("%s: shrinkage %v, want %v", c.Name, shrink, c.Shrinkage)
		}
		for i := range c.P {
			for j := range c.P {
				if got, want := cov.At(i, j), c.Covariance[i*c.P+j]; !approxEqual(got, want) {
					t.Fatalf("%s: covariance[%d][%d] %v, want %v", c.Name, i, j, got, want)
				}
			}
		}
	}
}
