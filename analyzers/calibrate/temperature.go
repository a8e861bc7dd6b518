package calibrate

import "math"

// Temperature search range and tolerance, in log T.
var (
	logTMin = math.Log(0.05)
	logTMax = math.Log(20)
)

const logTTol = 1e-10

// clipEps keeps logits finite for confidences of exactly 0 or 1.
const clipEps = 1e-12

// logit returns log(p/(1-p)) of p clipped to [clipEps, 1-clipEps].
func logit(p float64) float64 {
	p = min(max(p, clipEps), 1-clipEps)
	return math.Log(p / (1 - p))
}

// nll is the mean binary negative log-likelihood of the labels under
// sigmoid(z/t) for each logit z: −log σ(z/t) = softplus(−z/t) for a correct
// label, −log(1−σ(z/t)) = softplus(z/t) for a wrong one.
func nll(logits []float64, labels []bool, t float64) float64 {
	var sum float64
	for i, z := range logits {
		z /= t
		if labels[i] {
			z = -z
		}
		sum += softplus(z)
	}
	return sum / float64(len(logits))
}

// softplus is log(1+e^x) without overflow, as numpy.logaddexp(0, x)
// computes it.
func softplus(x float64) float64 {
	if x > 0 {
		return x + math.Log1p(math.Exp(-x))
	}
	return math.Log1p(math.Exp(x))
}

// fitTemperature returns the T minimizing nll over log T in
// [logTMin, logTMax].
func fitTemperature(logits []float64, labels []bool) float64 {
	f := func(u float64) float64 { return nll(logits, labels, math.Exp(u)) }
	return math.Exp(brentMin(f, logTMin, logTMax, logTTol))
}

// brentMin minimizes f on [a, b] with Brent's method (golden section with
// parabolic steps) until the bracket around the minimum is within about xtol.
// It follows scipy 1.10's optimize._minimize_scalar_bounded (fminbound),
// except that its tolerance is xtol/3 + 2⁻⁵²·|x| rather than
// xtol/3 + √ε·|x|, so that xtol is the tolerance actually reached in x: the
// √ε term would stop near 1.5e-8·|log T| however small xtol is.
func brentMin(f func(float64) float64, a, b, xtol float64) float64 {
	const maxEval = 500
	goldenMean := 0.5 * (3 - math.Sqrt(5))
	fulc := a + goldenMean*(b-a)
	nfc, xf := fulc, fulc
	var rat, e float64
	fx := f(xf)
	ffulc, fnfc := fx, fx
	xm := 0.5 * (a + b)
	tol1 := 0x1p-52*math.Abs(xf) + xtol/3
	tol2 := 2 * tol1
	for eval := 1; math.Abs(xf-xm) > tol2-0.5*(b-a) && eval < maxEval; eval++ {
		golden := true
		if math.Abs(e) > tol1 {
			golden = false
			r := (xf - nfc) * (fx - ffulc)
			q := (xf - fulc) * (fx - fnfc)
			p := (xf-fulc)*q - (xf-nfc)*r
			q = 2 * (q - r)
			if q > 0 {
				p = -p
			}
			q = math.Abs(q)
			r = e
			e = rat
			if math.Abs(p) < math.Abs(0.5*q*r) && p > q*(a-xf) && p < q*(b-xf) {
				rat = p / q
				x := xf + rat
				if x-a < tol2 || b-x < tol2 {
					rat = tol1 * signNonZero(xm-xf)
				}
			} else {
				golden = true
			}
		}
		if golden {
			if xf >= xm {
				e = a - xf
			} else {
				e = b - xf
			}
			rat = goldenMean * e
		}
		x := xf + signNonZero(rat)*max(math.Abs(rat), tol1)
		fu := f(x)
		if fu <= fx {
			if x >= xf {
				a = xf
			} else {
				b = xf
			}
			fulc, ffulc = nfc, fnfc
			nfc, fnfc = xf, fx
			xf, fx = x, fu
		} else {
			if x < xf {
				a = x
			} else {
				b = x
			}
			if fu <= fnfc || nfc == xf {
				fulc, ffulc = nfc, fnfc
				nfc, fnfc = x, fu
			} else if fu <= ffulc || fulc == xf || fulc == nfc {
				fulc, ffulc = x, fu
			}
		}
		xm = 0.5 * (a + b)
		tol1 = 0x1p-52*math.Abs(xf) + xtol/3
		tol2 = 2 * tol1
	}
	return xf
}

// signNonZero is numpy's sign(v) + (v == 0): −1 for negative v, else 1.
func signNonZero(v float64) float64 {
	if v < 0 {
		return -1
	}
	return 1
}
