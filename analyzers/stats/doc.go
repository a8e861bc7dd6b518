// Package stats holds the pure statistics behind Vigil's input-drift signal:
// the two-sample Kolmogorov–Smirnov test, the chi-square test of homogeneity,
// the Population Stability Index, the Jensen–Shannon distance, the
// 1-Wasserstein distance and the FastMCD robust covariance estimator.
//
// Each function mirrors a named scipy 1.10 or scikit-learn 1.2 function and is
// checked against values those libraries computed (testdata/gen_golden.py
// writes testdata/golden.json; the tests read it, no Python runs at test
// time). Functions take their inputs by value in the sense that they never
// modify the caller's slices, keep no reference to them, and are safe for
// concurrent use. Nothing here panics on bad input: functions that can fail
// return an error (one of the sentinels below, wrapped with context), and
// the few that return a bare float64 document when they return NaN.
package stats

import "errors"

var (
	// ErrEmpty reports an input sample, table or count vector with no
	// observations.
	ErrEmpty = errors.New("stats: empty input")
	// ErrNaN reports a NaN (or, where documented, an infinite) input value.
	ErrNaN = errors.New("stats: NaN or infinite input")
	// ErrShape reports inputs whose sizes do not fit together, such as
	// ragged table rows or count vectors of different lengths.
	ErrShape = errors.New("stats: mismatched input shape")
	// ErrNegative reports a negative count.
	ErrNegative = errors.New("stats: negative count")
	// ErrSingular reports a covariance matrix that is singular (a constant
	// feature, or at least half the observations on one hyperplane).
	ErrSingular = errors.New("stats: singular covariance")
)
