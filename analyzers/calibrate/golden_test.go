package calibrate

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// Tolerances against testdata/golden.json (testdata/gen_golden.py).
//
// ECE, MCE, the bins, accuracy and the NLLs are the same sums and quotients
// over the same float64 inputs as the numpy reference; only summation order
// differs (numpy sums pairwise, Go left to right), which moves results by a
// few ulps times log2(n): goldenRel = 1e-9 is far above that and far below
// any change of definition, such as a pair moving to a neighbouring bin.
//
// The temperature comes from two iterative minimizers (Brent's method here,
// scipy's bounded Brent there) of the same smooth NLL, unimodal in log T
// (convex in 1/T), on the same data. Near the minimum the NLL is flat, so
// rounding noise of ~1e-16 in its values leaves the minimizer's location
// determined only to about sqrt(1e-16) ~ 1e-8 in log T, and scipy stops at a
// bracket of about 1.5e-8·|log T| anyway: tempRel = 1e-6 leaves room for
// both while catching a wrong objective, clip or bound. The NLL at the
// fitted T is held to tempRel too (see the test).
const (
	goldenRel = 1e-9
	tempRel   = 1e-6
	// goldenAbs is the absolute error accepted for reference values at or
	// next to zero, where a relative error means nothing.
	goldenAbs = 1e-15
)

type goldenCase struct {
	Name           string    `json:"name"`
	Bins           int       `json:"bins"`
	Confidence     []float64 `json:"confidence"`
	Correct        []bool    `json:"correct"`
	Labels         int       `json:"labels"`
	Accuracy       float64   `json:"accuracy"`
	MeanConfidence float64   `json:"mean_confidence"`
	ECE            float64   `json:"ece"`
	MCE            float64   `json:"mce"`
	Counts         []int     `json:"counts"`
	ProbTrue       []float64 `json:"prob_true"`
	ProbPred       []float64 `json:"prob_pred"`
	Temperature    float64   `json:"temperature"`
	NLL            float64   `json:"nll"`
	NLLCalibrated  float64   `json:"nll_calibrated"`
}

func loadGolden(t testing.TB) []goldenCase {
	t.Helper()
	b, err := os.ReadFile("testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("golden.json has no cases")
	}
	return f.Cases
}

func TestComputeGolden(t *testing.T) {
	var worst, worstT float64
	for _, c := range loadGolden(t) {
		t.Run(c.Name, func(t *testing.T) {
			pairs := make([]Pair, len(c.Confidence))
			for i := range pairs {
				pairs[i] = Pair{Confidence: c.Confidence[i], Correct: c.Correct[i]}
			}
			r := Compute(pairs, c.Bins)
			check := func(name string, got, want, rel float64) {
				t.Helper()
				if !testutil.ApproxEqual(got, want, rel, goldenAbs) {
					t.Errorf("%s = %.17g, want %.17g (rel err %.3g, tolerance %g)",
						name, got, want, math.Abs(got-want)/math.Abs(want), rel)
				}
				if want != 0 {
					e := math.Abs(got-want) / math.Abs(want)
					if rel == tempRel {
						worstT = max(worstT, e)
					} else {
						worst = max(worst, e)
					}
				}
			}
			if r.Labels != c.Labels {
				t.Errorf("Labels = %d, want %d", r.Labels, c.Labels)
			}
			check("Accuracy", r.Accuracy, c.Accuracy, goldenRel)
			check("MeanConfidence", r.MeanConfidence, c.MeanConfidence, goldenRel)
			check("ECE", r.ECE, c.ECE, goldenRel)
			check("MCE", r.MCE, c.MCE, goldenRel)
			check("NLL", r.NLL, c.NLL, goldenRel)
			// The NLL function itself must agree to goldenRel at scipy's T.
			// The NLL at our own T agrees to tempRel: at an interior minimum
			// it is insensitive to T to first order, but at a bound (the
			// all_correct case) it moves with T; it must never be worse
			// than scipy's beyond rounding.
			logits := make([]float64, len(pairs))
			for i, p := range pairs {
				logits[i] = logit(p.Confidence)
			}
			check("NLL at scipy's T", nll(logits, c.Correct, c.Temperature), c.NLLCalibrated, goldenRel)
			check("NLLCalibrated", r.NLLCalibrated, c.NLLCalibrated, tempRel)
			if r.NLLCalibrated > c.NLLCalibrated*(1+goldenRel) {
				t.Errorf("NLLCalibrated = %.17g, worse than scipy's %.17g", r.NLLCalibrated, c.NLLCalibrated)
			}
			check("Temperature", r.Temperature, c.Temperature, tempRel)

			counts := make([]int, len(r.Bins))
			var acc, conf []float64
			for k, b := range r.Bins {
				counts[k] = b.Count
				if b.Count > 0 {
					acc = append(acc, b.Accuracy)
					conf = append(conf, b.Confidence)
				}
			}
			if diff := cmp.Diff(c.Counts, counts); diff != "" {
				t.Fatalf("bin counts (-want +got):\n%s", diff)
			}
			if len(acc) != len(c.ProbTrue) {
				t.Fatalf("%d non-empty bins, sklearn has %d", len(acc), len(c.ProbTrue))
			}
			for k := range acc {
				check("bin accuracy", acc[k], c.ProbTrue[k], goldenRel)
				check("bin confidence", conf[k], c.ProbPred[k], goldenRel)
			}
		})
	}
	t.Logf("worst relative error: %.3g (temperature %.3g)", worst, worstT)
}

// TestBinEdges pins the membership the golden "edges" cases exercise:
// (lo, hi], bin 0 closed at 0, edges as numpy.linspace makes them.
func TestBinEdges(t *testing.T) {
	tenth := 0.1 // a variable: Go folds the constant 3*0.1 to exactly 0.3
	tests := []struct {
		p    float64
		bins int
		want int
	}{
		{0, 10, 0},
		{0.1, 10, 0},
		{math.Nextafter(0.1, 1), 10, 1},
		{0.2, 10, 1},
		// 3·(1/10) = 0.30000000000000004 is the edge; 0.3 lies below it.
		{0.3, 10, 2},
		{3 * tenth, 10, 2},
		{math.Nextafter(3*tenth, 1), 10, 3},
		{0.5, 4, 1},
		{0.75, 4, 2},
		{1, 10, 9},
		{1, 1, 0},
		{0, 1, 0},
	}
	for _, tt := range tests {
		r := Compute([]Pair{{Confidence: tt.p, Correct: true}}, tt.bins)
		got := -1
		for k, b := range r.Bins {
			if b.Count == 1 {
				got = k
			}
		}
		if got != tt.want {
			t.Errorf("p=%.17g bins=%d: in bin %d, want %d", tt.p, tt.bins, got, tt.want)
		}
	}
	edges := linspace01(10)
	if edges[3] != 3*tenth || edges[3] == 0.3 || edges[10] != 1 {
		t.Errorf("linspace01(10) = %v", edges)
	}
}
