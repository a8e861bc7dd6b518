package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/mat"
)

// MCD is a Minimum Covariance Determinant fit: a robust location and
// covariance of multivariate data that ignores up to about half of the
// observations as outliers. It mirrors the fitted attributes of
// sklearn.covariance.MinCovDet (scikit-learn 1.2). A fitted MCD is not
// modified by its methods and is safe for concurrent use; the zero value
// is not usable (Mahalanobis returns NaN).
type MCD struct {
	// Location is the reweighted robust location (sklearn location_).
	Location []float64
	// Covariance is the reweighted robust covariance (sklearn covariance_):
	// the maximum-likelihood covariance (divisor n) of the observations in
	// Support.
	Covariance *mat.SymDense
	// Support marks the observations used for Location and Covariance: those
	// whose corrected raw squared distance is below ChiSquareCutoff(p, 0.975)
	// (sklearn support_).
	Support []bool
	// Dist holds the squared Mahalanobis distance of every training
	// observation under Location and Covariance (sklearn dist_).
	Dist []float64

	// RawLocation is the mean of the raw MCD support (sklearn raw_location_).
	RawLocation []float64
	// RawCovariance is the maximum-likelihood covariance of the raw support,
	// before consistency correction (sklearn raw_covariance_; scikit-learn
	// 1.2 computes the corrected covariance but does not store it).
	RawCovariance *mat.SymDense
	// RawSupport marks the h = ceil((n+p+1)/2) observations whose covariance
	// has the smallest determinant found (sklearn raw_support_).
	RawSupport []bool
	// Correction is the consistency factor median(raw distances) /
	// ChiSquareCutoff(p, 0.5). RawCovariance*Correction estimates the
	// covariance of Gaussian data; the reweighting step divides the raw
	// distances by it.
	Correction float64

	precision []float64 // inverse of Covariance, p×p row-major
}

// FitMCD fits a Minimum Covariance Determinant estimate to the rows of x
// (n observations of p features) with the FastMCD algorithm of Rousseeuw &
// Van Driessen (1999), following sklearn.covariance.MinCovDet(
// support_fraction=None, assume_centered=False).fit of scikit-learn 1.2 step
// by step:
//
//   - The support size is h = ceil((n+p+1)/2), the maximal-breakdown choice.
//   - For n <= 500, 30 random h-subsets (scikit-learn starts from random
//     subsets of size h, not p+1 as in the paper) each get two C-steps; the
//     10 with the smallest determinant are iterated to convergence (at most
//     30 C-steps) and the best is kept.
//   - For n > 500 the data are shuffled into n/300 subsets, 500 starts in
//     all are spread over them (two C-steps each, 10 best per subset), the
//     pooled candidates are refined on a random subset of min(n, 1500)
//     observations and, for n >= 1500, the best of those (10 when
//     n > 1500) once more on all the data.
//   - For p == 1 the exact shortest-half estimator is used instead.
//   - The raw estimate is then made consistent at the normal model (raw
//     distances divided by Correction) and reweighted: Location and
//     Covariance are recomputed from the observations whose corrected
//     distance is below the 0.975 chi-square quantile.
//
// Random starts come from rng; a nil rng means a fixed seed, so fits are
// reproducible. Different generators (this one and numpy's) can converge to
// different local minima on data without a clear majority structure; on
// data with a unique optimum the result does not depend on rng.
// Observations tied in distance at the support boundary are chosen as
// numpy's (unstable) argsort orders them, which this package reproduces;
// scikit-learn's one-dimensional estimator produces such a tie by
// construction.
//
// Singular covariances are reported, not regularized: FitMCD returns
// ErrSingular when a feature is constant, when n <= p, or when a C-step
// meets a singular covariance, which happens when at least about half of
// the observations lie on one hyperplane (the "exact fit" case: a feature
// constant over the support, or one feature a linear combination of the
// others up to a residual variance of 1e-12 of its own). scikit-learn
// returns such degenerate fits with a warning; a drift detector cannot use
// them. Drop, merge or jitter such features first.
// ErrEmpty is returned for a nil or empty x and ErrNaN for NaN or infinite
// entries. x is not modified.
func FitMCD(x *mat.Dense, rng *rand.Rand) (*MCD, error) {
	if x == nil || x.IsEmpty() {
		return nil, fmt.Errorf("mcd: %w data", ErrEmpty)
	}
	n, p := x.Dims()
	data := make([]float64, 0, n*p)
	for i := 0; i < n; i++ {
		for j := 0; j < p; j++ {
			v := x.At(i, j)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("mcd: x[%d][%d]: %w", i, j, ErrNaN)
			}
			data = append(data, v)
		}
	}
	if n <= p || n < 2 {
		return nil, fmt.Errorf("mcd: %d observations of %d features: %w", n, p, ErrSingular)
	}
	for j := 0; j < p; j++ {
		constant := true
		for i := 1; i < n && constant; i++ {
			constant = data[i*p+j] == data[j]
		}
		if constant {
			return nil, fmt.Errorf("mcd: feature %d is constant: %w", j, ErrSingular)
		}
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(0x5eed, 0x5eed))
	}
	f := &mcdFitter{p: p, rng: rng}
	raw, err := f.fastMCD(data, n)
	if err != nil {
		return nil, err
	}

	// Consistency correction (sklearn correct_covariance).
	med := median(raw.dist)
	correction := med / chi2ISF(0.5, p)
	if !(correction > 0) {
		return nil, fmt.Errorf("mcd: median raw distance %v: %w", med, ErrSingular)
	}
	dist := make([]float64, n)
	for i, d := range raw.dist {
		dist[i] = d / correction
	}
	// Reweighting (sklearn reweight_covariance).
	cutoff := chi2ISF(0.025, p)
	support := make([]bool, n)
	for i, d := range dist {
		support[i] = d < cutoff
	}
	loc, cov := meanCov(data, p, support)
	linv := make([]float64, p*p)
	if _, ok := choleskyInvFactor(linv, cov, p); !ok {
		return nil, fmt.Errorf("mcd: reweighted covariance: %w", ErrSingular)
	}
	mahalanobisAll(dist, data, p, loc, linv)
	return &MCD{
		Location:      loc,
		Covariance:    mat.NewSymDense(p, cov),
		Support:       support,
		Dist:          dist,
		RawLocation:   raw.loc,
		RawCovariance: mat.NewSymDense(p, slices.Clone(raw.cov)),
		RawSupport:    raw.support,
		Correction:    correction,
		precision:     precisionFromInvFactor(linv, p),
	}, nil
}

// Mahalanobis returns the squared Mahalanobis distance of x from Location
// under Covariance, (x-μ)ᵀ Σ⁻¹ (x-μ), as sklearn's MinCovDet.mahalanobis.
// For p-variate Gaussian data it follows χ²(p); compare it with
// ChiSquareCutoff. It returns NaN if m is not fitted, len(x) differs from
// the number of features, or x holds NaN.
func (m *MCD) Mahalanobis(x []float64) float64 {
	if m == nil || len(m.Location) == 0 || len(x) != len(m.Location) {
		return math.NaN()
	}
	return quadForm(m.precision, x, m.Location)
}

// quadForm returns (x-mu)ᵀ P (x-mu) for a p×p row-major P.
func quadForm(prec, x, mu []float64) float64 {
	p := len(mu)
	s := 0.0
	for i := 0; i < p; i++ {
		zi := x[i] - mu[i]
		row := prec[i*p : (i+1)*p]
		t := 0.0
		for j := 0; j < p; j++ {
			t += row[j] * (x[j] - mu[j])
		}
		s += zi * t
	}
	return s
}

// mcdCandidate is one (location, covariance) pair found by C-steps, with the
// log-determinant of the covariance, its support and the squared distances
// of the data it was fitted to.
type mcdCandidate struct {
	loc     []float64
	cov     []float64 // p×p row-major
	det     float64
	support []bool
	dist    []float64
}

// mcdFitter holds what the FastMCD stages share. It is used by one fit.
type mcdFitter struct {
	p       int
	rng     *rand.Rand
	idx     []int     // randomSupport's permutation
	scratch []float64 // smallest's quickselect copy
}

// fastMCD is sklearn's fast_mcd: the raw MCD location, covariance, support
// and distances of the n rows in data.
func (f *mcdFitter) fastMCD(data []float64, n int) (*mcdCandidate, error) {
	p := f.p
	h := (n + p + 2) / 2 // int(np.ceil(0.5 * (n + p + 1)))
	if p == 1 {
		return shortestHalf(data, h)
	}
	if n <= 500 {
		best, err := f.selectCandidates(data, n, h, 30, nil, 10, 2)
		if err != nil {
			return nil, err
		}
		full, err := f.selectCandidates(data, n, h, 0, best, 1, 30)
		if err != nil {
			return nil, err
		}
		return full[0], nil
	}

	// 1. Candidates from subsets of about 300 observations.
	nSubsets := n / 300
	nSub := n / nSubsets
	shuffle := f.rng.Perm(n)
	hSub := int(math.Ceil(float64(nSub) * (float64(h) / float64(n))))
	nTrials := max(10, 500/nSubsets)
	const nBestSub = 10
	var pooled []*mcdCandidate
	sub := make([]float64, nSub*p)
	for i := 0; i < nSubsets; i++ {
		gatherRows(sub, data, p, shuffle[i*nSub:(i+1)*nSub])
		best, err := f.selectCandidates(sub, nSub, hSub, nTrials, nil, nBestSub, 2)
		if err != nil {
			return nil, err
		}
		pooled = append(pooled, best...)
	}
	// 2. Refine them on a merged set (possibly all the data).
	nMerged := min(1500, n)
	hMerged := int(math.Ceil(float64(nMerged) * (float64(h) / float64(n))))
	nBestMerged := 1
	if n > 1500 {
		nBestMerged = 10
	}
	selection := f.rng.Perm(n)[:nMerged]
	merged := make([]float64, nMerged*p)
	gatherRows(merged, data, p, selection)
	bestMerged, err := f.selectCandidates(merged, nMerged, hMerged, 0, pooled, nBestMerged, 30)
	if err != nil {
		return nil, err
	}
	// 3. The overall best.
	if n < 1500 {
		c := bestMerged[0]
		support := make([]bool, n)
		dist := make([]float64, n)
		for k, row := range selection {
			support[row] = c.support[k]
			dist[row] = c.dist[k]
		}
		return &mcdCandidate{loc: c.loc, cov: c.cov, det: c.det, support: support, dist: dist}, nil
	}
	full, err := f.selectCandidates(data, n, h, 0, bestMerged, 1, 30)
	if err != nil {
		return nil, err
	}
	return full[0], nil
}

func gatherRows(dst, data []float64, p int, rows []int) {
	for k, r := range rows {
		copy(dst[k*p:(k+1)*p], data[r*p:(r+1)*p])
	}
}

// selectCandidates is sklearn's select_candidates: run C-steps from nTrials
// random h-subsets (when starts is nil) or from each candidate in starts,
// and return the keep results with the smallest determinants.
func (f *mcdFitter) selectCandidates(data []float64, n, h, nTrials int, starts []*mcdCandidate, keep, nIter int) ([]*mcdCandidate, error) {
	var all []*mcdCandidate
	if starts == nil {
		for range nTrials {
			c, err := f.cStep(data, n, h, nil, nIter)
			if err != nil {
				return nil, err
			}
			all = append(all, c)
		}
	} else {
		for _, s := range starts {
			c, err := f.cStep(data, n, h, s, nIter)
			if err != nil {
				return nil, err
			}
			all = append(all, c)
		}
	}
	dets := make([]float64, len(all))
	for i, c := range all {
		dets[i] = c.det
	}
	// Starts that converge to the same support tie exactly; order them as
	// numpy does.
	order := numpyArgsort(dets)
	best := make([]*mcdCandidate, 0, keep)
	for _, i := range order[:min(keep, len(order))] {
		best = append(best, all[i])
	}
	return best, nil
}

var errExactFit = fmt.Errorf("mcd: an h-subset has singular covariance (exact fit): %w", ErrSingular)

// cStep is sklearn's _c_step: starting from a random h-subset (init nil) or
// from the h observations closest under init, repeatedly replace the support
// by the h observations nearest (in Mahalanobis distance) to the current
// support's mean and covariance, which never increases the determinant,
// until it stops decreasing or nIter steps are done.
func (f *mcdFitter) cStep(data []float64, n, h int, init *mcdCandidate, nIter int) (*mcdCandidate, error) {
	p := f.p
	// Double buffers: the previous estimate must survive the next step.
	supports := [2][]bool{make([]bool, n), make([]bool, n)}
	dists := [2][]float64{make([]float64, n), make([]float64, n)}
	cur := 0
	support := supports[cur]
	linv := make([]float64, p*p)
	if init == nil {
		f.randomSupport(support, h)
	} else {
		if _, ok := choleskyInvFactor(linv, init.cov, p); !ok {
			return nil, errExactFit
		}
		mahalanobisAll(dists[0], data, p, init.loc, linv)
		f.smallest(support, dists[0], h)
	}
	loc, cov := meanCov(data, p, support)
	det, ok := choleskyInvFactor(linv, cov, p)
	if !ok {
		return nil, errExactFit
	}

	prevDet := math.Inf(1)
	remaining := nIter
	var prev mcdCandidate
	precInv := make([]float64, p*p) // inverse factor of the previous covariance
	dist := dists[0]
	for det < prevDet && remaining > 0 {
		prev = mcdCandidate{loc: loc, cov: cov, det: det, support: support}
		prevDet = det
		precInv, linv = linv, precInv
		mahalanobisAll(dist, data, p, loc, precInv)
		cur = 1 - cur
		support = supports[cur]
		f.smallest(support, dist, h)
		loc, cov = meanCov(data, p, support)
		if det, ok = choleskyInvFactor(linv, cov, p); !ok {
			return nil, errExactFit
		}
		remaining--
	}
	prevDist := dist
	// As in scikit-learn, the returned distances use the new location with
	// the previous step's covariance (identical once converged).
	dist = dists[1]
	mahalanobisAll(dist, data, p, loc, precInv)
	if !allClose(det, prevDet) && det > prevDet && remaining > 0 {
		// The determinant went up (rounding): keep the previous estimate.
		prev.dist = prevDist
		return &prev, nil
	}
	return &mcdCandidate{loc: loc, cov: cov, det: det, support: support, dist: dist}, nil
}

// allClose is numpy.allclose for scalars (rtol 1e-5, atol 1e-8).
func allClose(a, b float64) bool {
	return math.Abs(a-b) <= 1e-8+1e-5*math.Abs(b)
}

// randomSupport marks h of len(support) observations chosen uniformly at
// random (sklearn: permutation(n)[:h]).
func (f *mcdFitter) randomSupport(support []bool, h int) {
	n := len(support)
	idx := f.idx[:0]
	for i := 0; i < n; i++ {
		idx = append(idx, i)
	}
	f.idx = idx
	clear(support)
	for i := 0; i < h; i++ {
		j := i + f.rng.IntN(n-i)
		idx[i], idx[j] = idx[j], idx[i]
		support[idx[i]] = true
	}
}

// smallest marks in support the h observations with the smallest dist, as
// scikit-learn's argsort(dist)[:h]. When ties straddle the boundary, which
// of the tied observations are taken is decided by numpy's unstable
// argsort, reproduced by numpyArgsort; otherwise the set is unique and a
// quickselect finds it in linear time.
func (f *mcdFitter) smallest(support []bool, dist []float64, h int) {
	f.scratch = append(f.scratch[:0], dist...)
	smallestInto(support, dist, h, f.scratch)
}

// smallestInto is smallest with scratch space for len(dist) values.
func smallestInto(support []bool, dist []float64, h int, scratch []float64) {
	n := len(dist)
	if h >= n {
		for i := range support {
			support[i] = true
		}
		return
	}
	kth := kthSmallest(scratch, h-1)
	below, equal := 0, 0
	for _, d := range dist {
		if d < kth {
			below++
		} else if d == kth {
			equal++
		}
	}
	if below+equal > h {
		clear(support)
		for _, i := range numpyArgsort(dist)[:h] {
			support[i] = true
		}
		return
	}
	for i, d := range dist {
		support[i] = d <= kth
	}
}

// kthSmallest returns the k-th smallest (0-based) element of a by Hoare
// quickselect, reordering a.
func kthSmallest(a []float64, k int) float64 {
	lo, hi := 0, len(a)-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		x, y, z := a[lo], a[mid], a[hi]
		pivot := max(min(x, y), min(max(x, y), z)) // median of three
		i, j := lo, hi
		for i <= j {
			for a[i] < pivot {
				i++
			}
			for a[j] > pivot {
				j--
			}
			if i <= j {
				a[i], a[j] = a[j], a[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return a[k]
		}
	}
	return a[k]
}

// meanCov returns the mean and the maximum-likelihood covariance (divisor
// h) of the rows of data marked in support (numpy.cov(bias=True)).
//
// The mean is accumulated as offsets from the first selected row, so a
// feature constant over the support gets exactly zero variance (a plain sum
// can leave a rounding residue that would pass for a tiny variance).
func meanCov(data []float64, p int, support []bool) ([]float64, []float64) {
	loc := make([]float64, p)
	var first []float64
	h := 0
	for i, in := range support {
		if !in {
			continue
		}
		row := data[i*p : (i+1)*p]
		if first == nil {
			first = row
		}
		h++
		for j, v := range row {
			loc[j] += v - first[j]
		}
	}
	if h == 0 {
		return loc, make([]float64, p*p) // all zero: cholesky rejects it
	}
	fh := float64(h)
	for j := range loc {
		loc[j] = first[j] + loc[j]/fh
	}
	cov := make([]float64, p*p)
	z := make([]float64, p)
	for i, in := range support {
		if !in {
			continue
		}
		for j, v := range data[i*p : (i+1)*p] {
			z[j] = v - loc[j]
		}
		for a := 0; a < p; a++ {
			row := cov[a*p : (a+1)*p]
			za := z[a]
			for b := a; b < p; b++ {
				row[b] += za * z[b]
			}
		}
	}
	inv := 1 / fh
	for a := 0; a < p; a++ {
		for b := a; b < p; b++ {
			cov[a*p+b] *= inv
			cov[b*p+a] = cov[a*p+b]
		}
	}
	return loc, cov
}

// collinearTol is the fraction of a feature's variance, left unexplained by
// the other features, below which a covariance is treated as singular.
const collinearTol = 1e-12

// choleskyInvFactor factors the p×p matrix a = L Lᵀ and writes L⁻¹ (lower
// triangular, row-major) into linv, returning log det(a). ok is false if a
// is singular: some feature has zero variance or is, up to collinearTol, a
// linear combination of the others (scikit-learn's fast_logdet returns -Inf
// for exactly singular matrices). The test is scale-invariant, so features
// in very different units are fine.
func choleskyInvFactor(linv, a []float64, p int) (logDet float64, ok bool) {
	l := make([]float64, p*p)
	for j := 0; j < p; j++ {
		d := a[j*p+j]
		for k := 0; k < j; k++ {
			d -= l[j*p+k] * l[j*p+k]
		}
		// d is the variance of feature j left unexplained by features < j;
		// a tiny fraction of its variance is rounding residue of an exact
		// linear dependence.
		if !(d > collinearTol*a[j*p+j]) {
			return math.Inf(-1), false
		}
		ljj := math.Sqrt(d)
		l[j*p+j] = ljj
		logDet += 2 * math.Log(ljj)
		for i := j + 1; i < p; i++ {
			s := a[i*p+j]
			for k := 0; k < j; k++ {
				s -= l[i*p+k] * l[j*p+k]
			}
			l[i*p+j] = s / ljj
		}
	}
	// Invert L column by column by forward substitution.
	clear(linv)
	for c := 0; c < p; c++ {
		for r := c; r < p; r++ {
			t := 0.0
			if r == c {
				t = 1
			}
			for k := c; k < r; k++ {
				t -= l[r*p+k] * linv[k*p+c]
			}
			linv[r*p+c] = t / l[r*p+r]
		}
	}
	return logDet, true
}

// mahalanobisAll writes into dist, for every row x of data, the squared
// distance (x-loc)ᵀ Σ⁻¹ (x-loc) = ‖L⁻¹(x-loc)‖², given L⁻¹ for Σ = L Lᵀ.
func mahalanobisAll(dist, data []float64, p int, loc, linv []float64) {
	var zbuf [16]float64
	z := zbuf[:0]
	if p > len(zbuf) {
		z = make([]float64, 0, p)
	}
	z = z[:p]
	for i := range dist {
		row := data[i*p : (i+1)*p]
		for a := range z {
			z[a] = row[a] - loc[a]
		}
		s := 0.0
		for a := 0; a < p; a++ {
			y := 0.0
			for b, v := range linv[a*p : a*p+a+1] {
				y += v * z[b]
			}
			s += y * y
		}
		dist[i] = s
	}
}

// precisionFromInvFactor returns Σ⁻¹ = L⁻ᵀ L⁻¹ as a p×p row-major matrix.
func precisionFromInvFactor(linv []float64, p int) []float64 {
	inv := make([]float64, p*p)
	for i := 0; i < p; i++ {
		for j := i; j < p; j++ {
			s := 0.0
			for k := j; k < p; k++ {
				s += linv[k*p+i] * linv[k*p+j]
			}
			inv[i*p+j] = s
			inv[j*p+i] = s
		}
	}
	return inv
}

// shortestHalf is fast_mcd's p == 1 branch: the location is the midpoint of
// the shortest interval holding h sorted observations (averaged over ties),
// the support the h observations nearest to it, and the covariance their
// variance.
func shortestHalf(data []float64, h int) (*mcdCandidate, error) {
	n := len(data)
	var location float64
	support := make([]bool, n)
	if h < n {
		sorted := slices.Clone(data)
		slices.Sort(sorted)
		minDiff := math.Inf(1)
		for i := 0; i < n-h; i++ {
			minDiff = min(minDiff, sorted[h+i]-sorted[i])
		}
		// numpy: 0.5 * (X_sorted[h + starts] + X_sorted[starts]).mean()
		sum, count := 0.0, 0
		for i := 0; i < n-h; i++ {
			if sorted[h+i]-sorted[i] == minDiff {
				sum += sorted[h+i] + sorted[i]
				count++
			}
		}
		location = 0.5 * (sum / float64(count))
		absDev := make([]float64, n)
		for i, v := range data {
			absDev[i] = math.Abs(v - location)
		}
		smallestInto(support, absDev, h, slices.Clone(absDev))
	} else {
		for i := range support {
			support[i] = true
		}
		location = mean(data)
	}
	sel := make([]float64, 0, h)
	for i, in := range support {
		if in {
			sel = append(sel, data[i])
		}
	}
	m := mean(sel)
	variance := 0.0
	for _, v := range sel {
		variance += (v - m) * (v - m)
	}
	variance /= float64(len(sel))
	if !(variance > 0) {
		return nil, errExactFit
	}
	dist := make([]float64, n)
	for i, v := range data {
		dist[i] = (v - location) * (1 / variance) * (v - location)
	}
	return &mcdCandidate{loc: []float64{location}, cov: []float64{variance}, support: support, dist: dist}, nil
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

// median is numpy.median: the mean of the two middle values for even n.
func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
