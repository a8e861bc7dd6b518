package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// WelchGreater is Welch's two-sample t-test from summary statistics, one
// sided, for H1: the mean of a is greater than the mean of b. varA and varB
// are sample variances (denominator n−1). It returns the t statistic and
// the p-value, as scipy.stats.ttest_ind_from_stats(meanA, sqrt(varA), nA,
// meanB, sqrt(varB), nB, equal_var=False, alternative="greater"). With
// fewer than two observations on a side, or no variance on either, the
// p-value is NaN.
func WelchGreater(meanA, varA float64, nA int64, meanB, varB float64, nB int64) (t, p float64) {
	if nA < 2 || nB < 2 {
		return math.NaN(), math.NaN()
	}
	sa, sb := varA/float64(nA), varB/float64(nB)
	se := sa + sb
	if !(se > 0) {
		return math.NaN(), math.NaN()
	}
	t = (meanA - meanB) / math.Sqrt(se)
	df := se * se / (sa*sa/float64(nA-1) + sb*sb/float64(nB-1))
	return t, distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Survival(t)
}
