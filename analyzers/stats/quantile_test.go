package stats

import "testing"

// TestQuantileLowerRank: ranks from scipy 1.10,
// max(r for r in 1..n if binom.sf(r-1, n, 0.95) >= 0.95).
func TestQuantileLowerRank(t *testing.T) {
	for _, tt := range []struct{ n, want int64 }{
		{20, 17}, {25, 22}, {30, 26}, {100, 91}, {300, 279}, {1000, 938}, {2, 1}, {0, 0},
	} {
		if got := QuantileLowerRank(tt.n, 0.95, 0.95); got != tt.want {
			t.Errorf("n=%d: rank %d, want %d", tt.n, got, tt.want)
		}
	}
}
