package precision

import (
	"cmp"
	"math"
	"slices"
)

// Side is one side's next-token distribution at a position as far as a
// server listed it. A Side is a value; Divergence and Top1 only read it.
type Side struct {
	// Alts are the tokens whose log-probabilities are known, in any order.
	// A token listed twice counts once (the first usable entry); entries
	// whose logprob is NaN, ±Inf or at or below vLLM's -9999 placeholder
	// are unknown and ignored.
	Alts []Alt
	// TopK says that the TopK most likely tokens of the distribution are
	// all among Alts (the server's top-k list), so any token not in Alts is
	// no more likely than the TopK-th largest listed probability. 0 (or
	// fewer than TopK usable Alts): no such guarantee.
	TopK int
}

// eps floors every q-mass so that a token p gives mass and q gives none
// (or too little to represent) costs a large but finite amount; raising a
// q-mass only lowers Σ p log(p/q), so the lower bound stays a bound.
const eps = 1e-10

// scratch is how many listed tokens per side Divergence handles without
// allocating: servers list at most 20 alternatives plus the chosen token.
const scratch = 24

type listed struct {
	tok string
	pr  float64
}

type view struct {
	alts []listed
	rest float64 // the unlisted mass, 1 − Σ listed (0 when they sum above 1)
	cap  float64 // the most any unlisted token can hold: min(K-th listed, rest)
}

// see reads s into buf: usable entries, deduplicated, as probabilities;
// listed masses summing above 1 (rounding) are scaled to sum to 1.
func see(s Side, buf []listed) view {
	v := view{alts: buf[:0]}
	sum := 0.0
next:
	for _, a := range s.Alts {
		lp := a.Logprob
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp <= placeholder {
			continue
		}
		for _, b := range v.alts {
			if b.tok == a.Token {
				continue next
			}
		}
		pr := math.Exp(min(lp, 0))
		v.alts = append(v.alts, listed{a.Token, pr})
		sum += pr
	}
	if sum > 1 {
		for i := range v.alts {
			v.alts[i].pr /= sum
		}
		sum = 1
	}
	v.rest = max(1-sum, 0)
	v.cap = v.rest
	if k := s.TopK; k > 0 && len(v.alts) >= k {
		// The K-th largest: the value with fewer than K values above it
		// and at least K at or above it.
		for _, a := range v.alts {
			above, atOrAbove := 0, 0
			for _, b := range v.alts {
				if b.pr > a.pr {
					above++
				}
				if b.pr >= a.pr {
					atOrAbove++
				}
			}
			if above < k && k <= atOrAbove {
				v.cap = min(a.pr, v.rest)
				break
			}
		}
	}
	return v
}

// event is where one token only one side lists changes regime in the
// minimization of Divergence's lower bound: a p-only token's q-mass
// min(cq, p/r) leaves its cap at r = p/cq; a q-only token's p-mass
// min(cp, r·q) reaches its cap at r = cp/q.
type event struct {
	r     float64
	mass  float64 // p (p-only) or q (q-only) of the token
	qOnly bool
}

// Divergence estimates KL(p ‖ q) in nats between two next-token
// distributions known through Sides: p the reference, q the backend.
//
// lower is a rigorous lower bound of the true KL over the whole vocabulary,
// given what is listed. Partition the vocabulary into cells: each token
// either side lists, and "rest", everything else. By the log-sum
// inequality (data processing), the KL between the two distributions
// coarsened to any partition is at most the true KL. The cell masses are
// only partly known: a token both sides list is known on both; a token only
// p lists has known p and unknown q-mass x ∈ [0, cq], where cq is the
// TopK-th largest probability q lists (or q's unlisted mass when q gives
// no TopK guarantee); symmetrically a q-only token has unknown p-mass
// y ∈ [0, cp]; rest takes each side's remaining mass, P = Rp − Σy and
// Q = Rq − Σx. The true masses are one feasible choice, so the minimum of
// the partition KL over all feasible choices is a lower bound. It is a
// convex problem; its KKT conditions give, with r = P/Q,
// x = min(cq, p/r) and y = min(cp, r·q), and r is the unique root of
// P(r) = r·Q(r) where P > 0 (P(r)/r − Q(r) decreases strictly there);
// when that region holds no root, P = Q = 0 and x, y water-fill their
// sides' unlisted masses. Both are piecewise rational in r with at most
// one break per token, so Divergence solves them exactly on the sorted
// breaks. The bound is never below the plain coarsening {tokens both
// list} + {rest}, which is the same problem with the one-side tokens merged
// into rest. q-masses are floored at 1e-10 (which only lowers the bound);
// if a side's listed masses sum above 1 through rounding they are scaled
// to sum to 1 and its unlisted mass is 0.
//
// estimate is lower plus a correction for what no listing shows: the KL
// inside p's unlisted mass Rp. If the log-ratio d = log p − log q of the
// tokens is drawn independently of their probabilities, the KL inside a
// cell of p-mass P and q-mass Q is P·(log(P/Q) + J) with the Jensen gap
// J = log E[e^(−d)] + E[d] ≥ 0 (≈ Var(d)/2 for small noise), whatever the
// cell. Divergence estimates J from the n ≥ 2 tokens both sides list, with
// the small-sample factor n/(n−1), and returns lower + Rp·Ĵ ≥ lower. On
// synthetic LLM-like distributions (gen_divergence.py --eval: 1200 cases,
// heavy head, 0.5–50 % tail mass, V = 400 and 32000, logit noise
// σ = 0.01–1) it underestimates the full-vocabulary KL by 4 % on average at
// k = 20 (mean absolute error 9 %) and by 8 % at k = 5 (mean absolute error
// 22 %: five shared tokens estimate J poorly), most at σ = 1, where the
// tokens both sides list are selected for agreeing. Not an upper bound: a
// single position can be over- or underestimated. The bound alone
// underestimates by 27 % and 35 %; spreading the unlisted mass evenly (KL)
// overestimates up to a thousandfold at small σ.
//
// Divergence allocates nothing for up to 24 usable tokens per side.
func Divergence(p, q Side) (estimate, lower float64) {
	var pbuf, qbuf [scratch]listed
	pv, qv := see(p, pbuf[:]), see(q, qbuf[:])
	rp, rq := pv.rest, max(qv.rest, eps)
	cp, cq := pv.cap, max(qv.cap, eps)

	var evbuf [2 * scratch]event
	events := evbuf[:0]
	var matched [scratch]bool
	var qMatched []bool
	if len(qv.alts) <= scratch {
		qMatched = matched[:len(qv.alts)]
	} else {
		qMatched = make([]bool, len(qv.alts))
	}
	head := 0.0
	// Jensen gap sample: mean of d and a running log Σ e^(−d).
	n, sumD, lseMax, lseSum := 0, 0.0, math.Inf(-1), 0.0
	for _, a := range pv.alts {
		j := -1
		for i, b := range qv.alts {
			if b.tok == a.tok {
				j = i
				break
			}
		}
		if j < 0 {
			events = append(events, event{r: a.pr / cq, mass: a.pr})
			continue
		}
		qMatched[j] = true
		if a.pr <= 0 {
			continue
		}
		d := math.Log(a.pr / max(qv.alts[j].pr, eps))
		head += a.pr * d
		n++
		sumD += d
		if -d > lseMax {
			lseSum = lseSum*math.Exp(lseMax+d) + 1
			lseMax = -d
		} else {
			lseSum += math.Exp(-d - lseMax)
		}
	}
	for i, b := range qv.alts {
		if !qMatched[i] {
			m := max(b.pr, eps)
			events = append(events, event{r: cp / m, mass: m, qOnly: true})
		}
	}
	lower = max(head+oneSided(events, rp, rq, cp, cq), 0)
	estimate = lower
	if n >= 2 {
		fn := float64(n)
		j := (lseMax + math.Log(lseSum) - math.Log(fn) + sumD/fn) * fn / (fn - 1)
		estimate += rp * max(j, 0)
	}
	return estimate, lower
}

// oneSided is the minimum over the unknown masses of the partition KL's
// terms for the one-side tokens and rest (see Divergence).
func oneSided(events []event, rp, rq, cp, cq float64) float64 {
	if len(events) == 0 {
		return xlogx(rp, rq)
	}
	slices.SortFunc(events, func(a, b event) int { return cmp.Compare(a.r, b.r) })
	// On (lo, hi) between breaks: X(r) = ax + bx/r, Y(r) = ay + by·r.
	ax, bx, ay, by := 0.0, 0.0, 0.0, 0.0
	for _, e := range events {
		if e.qOnly {
			by += e.mass
		} else {
			ax += cq
		}
	}
	root, rP, mu := math.NaN(), math.NaN(), math.NaN()
	if rp <= 0 {
		rP = 0
	}
	if ax <= rq {
		mu = 0
	}
	lo := 0.0
	for i := 0; i <= len(events); i++ {
		hi := math.Inf(1)
		if i < len(events) {
			hi = events[i].r
		}
		if hi > lo || i == len(events) {
			// Interior: P − r·Q = (rp − ay + bx) − r·(by + rq − ax) = 0 with P > 0.
			if math.IsNaN(root) && math.IsNaN(rP) {
				if den := by + rq - ax; den > 0 {
					if r := (rp - ay + bx) / den; r >= lo && r <= hi && r > 0 && rp-ay-by*r > 0 {
						root = r
					}
				}
			}
			// Where p's unlisted mass runs out: Y(r) = rp.
			if math.IsNaN(rP) {
				if by > 0 {
					if r := (rp - ay) / by; r >= lo && r <= hi {
						rP = r
					}
				} else if ay >= rp {
					rP = lo
				}
			}
			// Where q's unlisted mass suffices: X(μ) = rq.
			if math.IsNaN(mu) && rq-ax > 0 {
				if m := bx / (rq - ax); m >= lo && m <= hi {
					mu = m
				}
			}
		}
		if i < len(events) {
			e := events[i]
			if e.qOnly {
				by -= e.mass
				ay += cp
			} else {
				ax -= cq
				bx += e.mass
			}
			lo = hi
		}
	}
	rx, ry := root, root
	if math.IsNaN(root) {
		// No interior optimum: P = Q = 0. rP is finite here (with rq > 0 an
		// interior root exists otherwise); guard against rounding anyway.
		rx, ry = mu, rP
		if math.IsNaN(rx) {
			rx = math.Inf(1)
		}
		if math.IsNaN(ry) {
			ry = math.Inf(1)
		}
	}
	v, sx, sy := 0.0, 0.0, 0.0
	for _, e := range events {
		if e.qOnly {
			y := min(cp, ry*e.mass)
			sy += y
			v += xlogx(y, e.mass)
		} else {
			x := cq
			if rx > 0 {
				x = min(cq, e.mass/rx)
			}
			sx += x
			v += xlogx(e.mass, x)
		}
	}
	if !math.IsNaN(root) {
		if P, Q := rp-sy, rq-sx; P > 0 {
			if Q > 0 {
				v += P * math.Log(P/Q)
			} else {
				v += P * math.Log(root)
			}
		}
	}
	return v
}

// xlogx is a·log(a/b) with 0·log(0/b) = 0.
func xlogx(a, b float64) float64 {
	if a <= 0 {
		return 0
	}
	return a * math.Log(a/b)
}

// Top1 reports the most likely usable listed token of s ("" when none);
// ties go to the first listed.
func Top1(s Side) string {
	best, bestLp := "", math.Inf(-1)
	for _, a := range s.Alts {
		lp := a.Logprob
		if math.IsNaN(lp) || math.IsInf(lp, 0) || lp <= placeholder {
			continue
		}
		if lp > bestLp {
			best, bestLp = a.Token, lp
		}
	}
	return best
}
