package stats

import (
	"math"
	"testing"
)

// TestWelchGreater checks against scipy 1.10:
// ttest_ind_from_stats(mA, sqrt(vA), nA, mB, sqrt(vB), nB, equal_var=False, alternative="greater").
func TestWelchGreater(t *testing.T) {
	tests := []struct {
		ma, va      float64
		na          int64
		mb, vb      float64
		nb          int64
		wantT, want float64
	}{
		{-0.22, 0.004, 1000, -0.25, 0.006, 300, 6.123724356957944, 1.0403589479667617e-09},
		{1.0, 2.0, 5, 1.2, 0.5, 7, -0.2912876325017676, 0.609193027272646},
	}
	for _, tt := range tests {
		gotT, got := WelchGreater(tt.ma, tt.va, tt.na, tt.mb, tt.vb, tt.nb)
		// The p-value goes through gonum's regularized incomplete beta; 1e-6
		// relative is what it holds in the far tail.
		if math.Abs(gotT-tt.wantT) > 1e-12*math.Abs(tt.wantT) || math.Abs(got-tt.want) > 1e-6*tt.want {
			t.Errorf("WelchGreater = (%v, %v), want (%v, %v)", gotT, got, tt.wantT, tt.want)
		}
	}
	if _, p := WelchGreater(1, 0, 1, 0, 0, 10); !math.IsNaN(p) {
		t.Errorf("n = 1: p = %v, want NaN", p)
	}
}
