package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// QuantileLowerRank returns the largest rank r (1-based) such that the r-th
// smallest of n independent values is a lower confidence bound, at level
// conf, for the p-quantile of their distribution: P(Binomial(n, p) ≥ r) ≥
// conf, since the r-th smallest is below the quantile exactly when at least
// r of the values are. It returns 0 when no order statistic is one (n too
// small).
func QuantileLowerRank(n int64, p, conf float64) int64 {
	if n <= 0 || !(p > 0 && p < 1) || !(conf > 0 && conf < 1) {
		return 0
	}
	b := distuv.Binomial{N: float64(n), P: p}
	// P(X ≥ r) falls as r grows: start at the mean and walk down.
	r := min(int64(math.Ceil(float64(n)*p)), n)
	for ; r >= 1; r-- {
		if b.Survival(float64(r-1)) >= conf {
			return r
		}
	}
	return 0
}
