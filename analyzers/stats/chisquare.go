package stats

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/mathext"
)

// ChiResult is the outcome of a chi-square test of homogeneity. The zero
// value is not a valid result.
type ChiResult struct {
	// Statistic is Pearson's X² = Σ (observed - expected)² / expected.
	Statistic float64
	// PValue is Pr(χ²(DOF) >= Statistic), in [0, 1].
	PValue float64
	// DOF is (rows-1)*(columns-1), counted after all-zero columns are dropped.
	DOF int
}

// ChiSquare performs Pearson's chi-square test of homogeneity on a
// contingency table whose rows are samples (for drift, the reference and the
// current window) and whose columns are categories. It reproduces
// scipy.stats.chi2_contingency(table, correction=False) of scipy 1.10, with
// two differences in what it accepts:
//
//   - Columns that are zero in every row are dropped first: a category
//     neither sample saw carries no information, and scipy would reject the
//     table because its expected frequency is zero. DOF counts the kept
//     columns.
//   - Yates' continuity correction is never applied. scipy applies it only
//     when DOF == 1; it exists for small 2×2 tables and makes the test
//     conservative, while Vigil compares large samples, where it only biases
//     the statistic.
//
// counts may hold non-integer weights. When DOF is 0 (one row, or one
// non-zero column) the result is Statistic 0, PValue 1, as in scipy. Errors:
// ErrEmpty for no rows, no columns, an all-zero table or a row that sums to
// zero (an empty sample); ErrShape for ragged rows; ErrNegative for a
// negative count; ErrNaN for a NaN or infinite count. counts is not
// modified.
func ChiSquare(counts [][]float64) (ChiResult, error) {
	if len(counts) == 0 || len(counts[0]) == 0 {
		return ChiResult{}, fmt.Errorf("chisquare: %w table", ErrEmpty)
	}
	nc := len(counts[0])
	for i, row := range counts {
		if len(row) != nc {
			return ChiResult{}, fmt.Errorf("chisquare: row %d has %d columns, row 0 has %d: %w", i, len(row), nc, ErrShape)
		}
		for j, v := range row {
			switch {
			case math.IsNaN(v) || math.IsInf(v, 0):
				return ChiResult{}, fmt.Errorf("chisquare: counts[%d][%d]: %w", i, j, ErrNaN)
			case v < 0:
				return ChiResult{}, fmt.Errorf("chisquare: counts[%d][%d] = %v: %w", i, j, v, ErrNegative)
			}
		}
	}
	colSum := make([]float64, 0, nc)
	keep := make([]int, 0, nc)
	for j := 0; j < nc; j++ {
		s := 0.0
		for _, row := range counts {
			s += row[j]
		}
		if s > 0 {
			colSum = append(colSum, s)
			keep = append(keep, j)
		}
	}
	if len(keep) == 0 {
		return ChiResult{}, fmt.Errorf("chisquare: %w: all counts are zero", ErrEmpty)
	}
	rowSum := make([]float64, len(counts))
	total := 0.0
	for i, row := range counts {
		for _, j := range keep {
			rowSum[i] += row[j]
		}
		if rowSum[i] == 0 {
			return ChiResult{}, fmt.Errorf("chisquare: %w: row %d sums to zero", ErrEmpty, i)
		}
		total += rowSum[i]
	}
	dof := (len(counts) - 1) * (len(keep) - 1)
	if dof == 0 {
		return ChiResult{Statistic: 0, PValue: 1, DOF: 0}, nil
	}
	stat := 0.0
	for i, row := range counts {
		for k, j := range keep {
			expected := rowSum[i] * colSum[k] / total
			d := row[j] - expected
			stat += d * d / expected
		}
	}
	return ChiResult{Statistic: stat, PValue: chi2SF(stat, dof), DOF: dof}, nil
}

// chi2SF is scipy.stats.chi2.sf(x, k) (cephes chdtrc).
func chi2SF(x float64, k int) float64 {
	if x <= 0 {
		return 1
	}
	if math.IsInf(x, 1) {
		return 0
	}
	return mathext.GammaIncRegComp(float64(k)/2, x/2)
}

// chi2ISF is scipy.stats.chi2.isf(q, k) (cephes chdtri) for 0 < q < 1.
func chi2ISF(q float64, k int) float64 {
	return 2 * mathext.GammaIncRegCompInv(float64(k)/2, q)
}

// ChiSquareCutoff returns the q-quantile of the chi-square distribution with
// p degrees of freedom, as scipy.stats.chi2.ppf(q, p): the squared
// Mahalanobis distance below which a fraction q of p-variate Gaussian data
// falls. It returns 0 for q == 0, +Inf for q == 1, and NaN for p < 1 or q
// outside [0, 1] (including NaN).
func ChiSquareCutoff(p int, q float64) float64 {
	switch {
	case p < 1 || !(q >= 0 && q <= 1):
		return math.NaN()
	case q == 0:
		return 0
	case q == 1:
		return math.Inf(1)
	}
	return 2 * mathext.GammaIncRegInv(float64(p)/2, q)
}
