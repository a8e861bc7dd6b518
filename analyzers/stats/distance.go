package stats

import (
	"math"
	"slices"
)

// JensenShannon returns the Jensen–Shannon distance between two discrete
// distributions given as non-negative weights over the same categories, as
// scipy.spatial.distance.jensenshannon(p, q) of scipy 1.10: p and q are
// normalized to sum to 1, m = (p+q)/2, and the result is
//
//	sqrt((KL(p‖m) + KL(q‖m)) / 2)
//
// with natural logarithms, so it lies in [0, sqrt(ln 2)]. Identical
// distributions give 0. Where rounding makes the divergence a tiny negative
// number, JensenShannon returns 0 (scipy returns NaN there).
//
// It returns NaN if the lengths differ, the inputs are empty, either sums to
// zero, or any weight is negative, NaN or infinite. Inputs are not modified.
func JensenShannon(p, q []float64) float64 {
	if len(p) != len(q) || len(p) == 0 {
		return math.NaN()
	}
	var sp, sq float64
	for i := range p {
		if !(p[i] >= 0 && q[i] >= 0) || math.IsInf(p[i], 0) || math.IsInf(q[i], 0) {
			return math.NaN()
		}
		sp += p[i]
		sq += q[i]
	}
	if sp == 0 || sq == 0 {
		return math.NaN()
	}
	var left, right float64
	for i := range p {
		pi, qi := p[i]/sp, q[i]/sq
		m := (pi + qi) / 2
		left += relEntr(pi, m)
		right += relEntr(qi, m)
	}
	js := (left + right) / 2
	if js <= 0 {
		return 0
	}
	return math.Sqrt(js)
}

// relEntr is scipy.special.rel_entr for x >= 0, y >= x/2.
func relEntr(x, y float64) float64 {
	if x == 0 {
		return 0
	}
	return x * math.Log(x/y)
}

// Wasserstein1 returns the first Wasserstein (earth mover's) distance between
// the empirical distributions of a and b, as
// scipy.stats.wasserstein_distance(a, b) of scipy 1.10 with no weights:
// ∫ |F_a(x) - F_b(x)| dx over the pooled sample, which for equal sizes is the
// mean absolute difference of the sorted samples. It is in the units of the
// data; identical samples give 0.
//
// It returns NaN if either sample is empty or contains NaN; infinite values
// propagate as in scipy (giving +Inf or NaN). Inputs are not modified.
func Wasserstein1(a, b []float64) float64 {
	if len(a) == 0 || len(b) == 0 || indexNaN(a) >= 0 || indexNaN(b) >= 0 {
		return math.NaN()
	}
	u, v := slices.Clone(a), slices.Clone(b)
	slices.Sort(u)
	slices.Sort(v)
	nu, nv := float64(len(u)), float64(len(v))
	all := make([]float64, 0, len(u)+len(v))
	for i, j := 0, 0; i < len(u) || j < len(v); {
		if j == len(v) || (i < len(u) && u[i] <= v[j]) {
			all = append(all, u[i])
			i++
		} else {
			all = append(all, v[j])
			j++
		}
	}
	// Between consecutive pooled values x_k and x_{k+1} the ECDFs are
	// #{u <= x_k}/nu and #{v <= x_k}/nv (searchsorted side='right').
	sum := 0.0
	cu, cv := 0, 0
	for k := 0; k+1 < len(all); k++ {
		x := all[k]
		for cu < len(u) && u[cu] <= x {
			cu++
		}
		for cv < len(v) && v[cv] <= x {
			cv++
		}
		sum += math.Abs(float64(cu)/nu-float64(cv)/nv) * (all[k+1] - x)
	}
	return sum
}
