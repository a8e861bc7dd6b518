package inputdrift

import (
	"math"
	"testing"
)

func TestNumericPSIZeroInflated(t *testing.T) {
	ref := make([]float64, 1000) // all zero: quantile bins collapse to one
	cur := make([]float64, 1000)
	for i := range 300 {
		cur[i] = 0.8
	}
	got, err := numericPSI(ref, cur, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Bins {0}, {other}: r = (1, 1e-4 floor), c = (0.7, 0.3).
	want := (0.7-1)*math.Log(0.7/1) + (0.3-1e-4)*math.Log(0.3/1e-4)
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("PSI = %v, want %v", got, want)
	}
	if same, _ := numericPSI(ref, ref, 10); same != 0 {
		t.Errorf("PSI of identical samples = %v", same)
	}
}

func TestAdjust(t *testing.T) {
	// Benjamini–Hochberg, as statsmodels' multipletests(method="fdr_bh").
	rs := []FeatureResult{{PValue: 0.01}, {PValue: 0.04}, {PValue: 0.03}, {PValue: 0.2}}
	adjust(rs, "bh")
	want := []float64{0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.2}
	for i, r := range rs {
		if math.Abs(r.AdjustedP-want[i]) > 1e-12 {
			t.Errorf("bh[%d] = %v, want %v", i, r.AdjustedP, want[i])
		}
	}
	adjust(rs, "bonferroni")
	for i, p := range []float64{0.04, 0.16, 0.12, 0.8} {
		if math.Abs(rs[i].AdjustedP-p) > 1e-12 {
			t.Errorf("bonferroni[%d] = %v, want %v", i, rs[i].AdjustedP, p)
		}
	}
}
