package calibrate

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestComputeEmpty(t *testing.T) {
	for _, pairs := range [][]Pair{nil, {}, {{Confidence: math.NaN()}, {Confidence: 1.5}, {Confidence: -1}}} {
		r := Compute(pairs, 4)
		if r.Labels != 0 {
			t.Errorf("Labels = %d", r.Labels)
		}
		for name, v := range map[string]float64{
			"Accuracy": r.Accuracy, "MeanConfidence": r.MeanConfidence, "ECE": r.ECE, "MCE": r.MCE,
			"Temperature": r.Temperature, "NLL": r.NLL, "NLLCalibrated": r.NLLCalibrated,
		} {
			if !math.IsNaN(v) {
				t.Errorf("%s = %v, want NaN", name, v)
			}
		}
		want := []Bin{{Lo: 0, Hi: 0.25}, {Lo: 0.25, Hi: 0.5}, {Lo: 0.5, Hi: 0.75}, {Lo: 0.75, Hi: 1}}
		if diff := cmp.Diff(want, r.Bins); diff != "" {
			t.Errorf("Bins (-want +got):\n%s", diff)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		if !strings.Contains(string(b), `"ece":null`) || !strings.Contains(string(b), `"labels":0`) {
			t.Errorf("JSON = %s", b)
		}
	}
}

func TestComputeSkipsInvalid(t *testing.T) {
	valid := []Pair{{0.9, true}, {0.6, false}, {0.3, false}}
	with := append([]Pair{{math.NaN(), true}, {1.2, true}, {-0.5, false}}, valid...)
	got, want := Compute(with, 5), Compute(valid, 5)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-without +with):\n%s", diff)
	}
}

func TestComputeDefaultBins(t *testing.T) {
	if r := Compute([]Pair{{0.5, true}}, 0); len(r.Bins) != DefaultBins {
		t.Errorf("%d bins, want %d", len(r.Bins), DefaultBins)
	}
}

func TestComputeJSON(t *testing.T) {
	r := Compute([]Pair{{0.9, true}, {0.2, false}}, 2)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"labels", "accuracy", "mean_confidence", "ece", "mce", "bins", "temperature", "nll", "nll_calibrated"} {
		if got[k] == nil {
			t.Errorf("JSON %s lacks %q", b, k)
		}
	}
	bin := got["bins"].([]any)[1].(map[string]any)
	for _, k := range []string{"lo", "hi", "count", "confidence", "accuracy"} {
		if _, ok := bin[k]; !ok {
			t.Errorf("bin JSON %v lacks %q", bin, k)
		}
	}
}

// synthetic draws n labelled pairs whose true probability of being correct is
// q while the stated confidence is sigmoid(logit(q)·k): k > 1 over-confident.
func synthetic(n int, k float64, seed uint64) []Pair {
	r := rand.New(rand.NewPCG(seed, 1))
	pairs := make([]Pair, n)
	for i := range pairs {
		q := 0.05 + 0.9*r.Float64()
		c := 1 / (1 + math.Exp(-k*math.Log(q/(1-q))))
		pairs[i] = Pair{Confidence: c, Correct: r.Float64() < q}
	}
	return pairs
}

// TestComputeTemperatureRecovers checks the fit finds the distortion that
// made the data. Tolerance 0.15 relative: with 20,000 pairs the maximum
// likelihood estimate of 1/T has a standard error near 2%.
func TestComputeTemperatureRecovers(t *testing.T) {
	for _, k := range []float64{0.5, 1, 2.5} {
		r := Compute(synthetic(20000, k, 7), 15)
		if math.Abs(r.Temperature-k)/k > 0.15 {
			t.Errorf("k=%v: Temperature = %v", k, r.Temperature)
		}
		if r.NLLCalibrated > r.NLL {
			t.Errorf("k=%v: NLLCalibrated %v > NLL %v", k, r.NLLCalibrated, r.NLL)
		}
	}
}

func TestBrentMinTolerance(t *testing.T) {
	for _, x0 := range []float64{-2.7, -1, 0.3, 2.9} {
		got := brentMin(func(x float64) float64 { return math.Cosh(x - x0) }, logTMin, logTMax, logTTol)
		// cosh is flat to ~1e-16 within ~1.5e-8 of its minimum, so that is
		// as close as any minimizer can get in float64.
		if math.Abs(got-x0) > 3e-8 {
			t.Errorf("minimum of cosh(x-%v) at %v", x0, got)
		}
	}
	if got := brentMin(func(x float64) float64 { return x }, logTMin, logTMax, logTTol); got-logTMin > logTTol {
		t.Errorf("increasing function: %v, want within %g of %v", got, logTTol, logTMin)
	}
}
