package stats

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// PSIEpsilon is the floor applied to every bin proportion before the PSI sum,
// so that a bin empty in one sample contributes a large but finite term.
// Proportions p are replaced by max(p, PSIEpsilon) without renormalizing.
const PSIEpsilon = 1e-4

// PSI returns the Population Stability Index of cur against ref,
//
//	PSI = Σ_bins (c - r) * ln(c / r),
//
// where r and c are the fractions of ref and cur in each bin, each floored at
// PSIEpsilon (see there). Bins are cut at reference quantiles: the edges are
// numpy.quantile(ref, i/bins) for i = 0..bins with numpy's default 'linear'
// interpolation, duplicates removed, and the outermost edges replaced by -Inf
// and +Inf so every value of cur falls in some bin. A value equal to an inner
// edge belongs to the bin above it. Heavily tied reference data therefore
// yields fewer than bins bins; a constant reference yields one bin and PSI 0.
//
// Common reading: below 0.1 no shift, 0.1–0.25 moderate, above 0.25 major.
// Errors: ErrEmpty if ref or cur is empty, ErrNaN if either holds a NaN or
// infinite value, and an error if bins < 1. Inputs are not modified.
func PSI(ref, cur []float64, bins int) (float64, error) {
	if len(ref) == 0 || len(cur) == 0 {
		return 0, fmt.Errorf("psi: %w (len(ref)=%d, len(cur)=%d)", ErrEmpty, len(ref), len(cur))
	}
	if bins < 1 {
		return 0, fmt.Errorf("psi: bins = %d, want >= 1", bins)
	}
	if i := indexNonFinite(ref); i >= 0 {
		return 0, fmt.Errorf("psi: ref[%d]: %w", i, ErrNaN)
	}
	if i := indexNonFinite(cur); i >= 0 {
		return 0, fmt.Errorf("psi: cur[%d]: %w", i, ErrNaN)
	}
	sorted := slices.Clone(ref)
	slices.Sort(sorted)
	edges := make([]float64, bins+1)
	for i := range edges {
		edges[i] = quantileSorted(sorted, float64(i)/float64(bins))
	}
	slices.Sort(edges)
	edges = slices.Compact(edges)
	var inner []float64 // the outer edges stand for -Inf and +Inf
	if len(edges) > 2 {
		inner = edges[1 : len(edges)-1]
	}

	refCounts := make([]float64, len(inner)+1)
	curCounts := make([]float64, len(inner)+1)
	// sorted is ordered, so its bins are consecutive runs.
	b := 0
	for _, v := range sorted {
		for b < len(inner) && v >= inner[b] {
			b++
		}
		refCounts[b]++
	}
	for _, v := range cur {
		// Number of inner edges <= v (numpy searchsorted side='right').
		curCounts[sort.Search(len(inner), func(i int) bool { return inner[i] > v })]++
	}
	return psiFromCounts(refCounts, curCounts, float64(len(ref)), float64(len(cur))), nil
}

// PSICategorical returns the Population Stability Index between two count
// vectors over the same categories (refCounts[i] and curCounts[i] count
// category i): Σ (c - r) ln(c / r) over the count proportions, each floored
// at PSIEpsilon. A category absent from both samples contributes 0.
// Errors: ErrEmpty if the vectors are empty or either sums to zero, ErrShape
// if their lengths differ, ErrNegative for a negative count and ErrNaN for a
// NaN or infinite one. Inputs are not modified.
func PSICategorical(refCounts, curCounts []float64) (float64, error) {
	if len(refCounts) != len(curCounts) {
		return 0, fmt.Errorf("psi: %d reference categories, %d current: %w", len(refCounts), len(curCounts), ErrShape)
	}
	if len(refCounts) == 0 {
		return 0, fmt.Errorf("psi: %w count vectors", ErrEmpty)
	}
	var refTotal, curTotal float64
	for i := range refCounts {
		r, c := refCounts[i], curCounts[i]
		switch {
		case math.IsNaN(r) || math.IsInf(r, 0) || math.IsNaN(c) || math.IsInf(c, 0):
			return 0, fmt.Errorf("psi: category %d: %w", i, ErrNaN)
		case r < 0 || c < 0:
			return 0, fmt.Errorf("psi: category %d: %w", i, ErrNegative)
		}
		refTotal += r
		curTotal += c
	}
	if refTotal == 0 || curTotal == 0 {
		return 0, fmt.Errorf("psi: %w: reference total %v, current total %v", ErrEmpty, refTotal, curTotal)
	}
	return psiFromCounts(refCounts, curCounts, refTotal, curTotal), nil
}

func psiFromCounts(refCounts, curCounts []float64, refTotal, curTotal float64) float64 {
	psi := 0.0
	for i := range refCounts {
		r := max(refCounts[i]/refTotal, PSIEpsilon)
		c := max(curCounts[i]/curTotal, PSIEpsilon)
		psi += (c - r) * math.Log(c/r)
	}
	return psi
}

func indexNonFinite(x []float64) int {
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return i
		}
	}
	return -1
}

// quantileSorted is numpy.quantile(x, q) with method='linear' on sorted,
// non-empty x, with numpy 1.24's arithmetic: virtual index (n-1)*q, and a
// lerp that interpolates from the nearer end.
func quantileSorted(x []float64, q float64) float64 {
	n := len(x)
	vi := float64(n-1) * q
	if vi >= float64(n-1) {
		return x[n-1]
	}
	if vi < 0 {
		return x[0]
	}
	prev := math.Floor(vi)
	i := int(prev)
	a, b := x[i], x[i+1]
	t := vi - prev
	diff := b - a
	if t >= 0.5 {
		return b - diff*(1-t)
	}
	return a + diff*t
}
