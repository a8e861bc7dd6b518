package stats

import (
	"errors"

	"gonum.org/v1/gonum/mat"
)

// LedoitWolf returns the Ledoit–Wolf shrunk covariance of the rows of x,
// (1−s)·S + s·(tr S/p)·I for the empirical covariance S (divided by n) and
// the shrinkage s that minimises the expected squared error (Ledoit and
// Wolf 2004), as scikit-learn's covariance.ledoit_wolf computes them. With
// centered the rows are taken as centered already (assume_centered);
// otherwise their mean is subtracted first. Where there are more features
// than rows, or nearly so, S is singular and the shrunk covariance is not.
func LedoitWolf(x mat.Matrix, centered bool) (*mat.SymDense, float64, error) {
	n, p := x.Dims()
	if n < 2 || p < 1 {
		return nil, 0, errors.New("ledoit-wolf: fewer than 2 rows")
	}
	xc := mat.DenseCopyOf(x)
	if !centered {
		for j := range p {
			var m float64
			for i := range n {
				m += xc.At(i, j)
			}
			m /= float64(n)
			for i := range n {
				xc.Set(i, j, xc.At(i, j)-m)
			}
		}
	}
	var s mat.SymDense
	s.SymOuterK(1/float64(n), xc.T())
	var trace float64
	for j := range p {
		trace += s.At(j, j)
	}
	mu := trace / float64(p)
	// beta: the spread of the rows' outer products around S; delta: the
	// distance of S from mu·I.
	var sq2, sq4 float64 // Σ S_ij², Σ_ij Σ_k x_ki² x_kj²
	for i := range p {
		for j := range p {
			v := s.At(i, j)
			sq2 += v * v
		}
	}
	x2 := mat.NewDense(n, p, nil)
	x2.Apply(func(_, _ int, v float64) float64 { return v * v }, xc)
	var g mat.SymDense
	g.SymOuterK(1, x2.T())
	for i := range p {
		for j := range p {
			sq4 += g.At(i, j)
		}
	}
	nf, pf := float64(n), float64(p)
	beta := (sq4/nf - sq2) / (pf * nf)
	delta := (sq2 - 2*mu*trace + pf*mu*mu) / pf
	beta = min(beta, delta)
	shrink := 0.0
	if beta > 0 && delta > 0 {
		shrink = beta / delta
	}
	out := mat.NewSymDense(p, nil)
	for i := range p {
		for j := i; j < p; j++ {
			v := (1 - shrink) * s.At(i, j)
			if i == j {
				v += shrink * mu
			}
			out.SetSym(i, j, v)
		}
	}
	return out, shrink, nil
}
