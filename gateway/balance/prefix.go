package balance

import (
	"math"
	"time"

	"github.com/vigil-gw/vigil/gateway/balance/affinity"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// The prefix strategy is two parts over one index: prefixPicker reads the
// index and the homes to choose, prefixRecorder (a Hook) records the
// prompt for the backend the request went to.
var _ Hook = (*prefixRecorder)(nil)

// maxStack is the number of candidates the prefix picker keeps its
// per-candidate figures for on the stack; larger pools still work, with
// allocations per pick.
const maxStack = 64

// prefixPicker is the prefix strategy's picker. A prompt below min_chars
// or without a full block goes as dynamic sends it (ReasonShort).
// Otherwise the preferred backend is the candidate that served the
// longest leading run of the prompt's blocks (ReasonMatch; ties go to the
// anchor's home, then to the higher rendezvous score), or, when none
// served any, the anchor's home, or a new one placed by bounded
// rendezvous hashing, which every replica computes alike
// (ReasonPlacement). The load guard, after SGLang's cache-aware router:
// with load = requests in flight through this gateway + the server's
// queue (when fresh), the preferred backend is passed over when
//
//	load(preferred) − min load > guard_abs  and  load(preferred) > guard_rel × min load
//
// for the best of the candidates within those bounds (ReasonLoad,
// GuardOverride). It records nothing in the index: prefixRecorder does,
// once the gateway has sent the request.
type prefixPicker struct {
	b        *Balancer // the Snapshot, for the servers' queues
	dyn      twoChoices
	index    *affinity.Index
	homes    *affinity.Homes
	names    []uint64 // each backend's name hashed, in pool order, for rendezvous scores
	minChars int

	guardAbs, guardRel, hotGuardAbs float64
	homeSlack                       float64
}

func (p *prefixPicker) Pick(r *Request, cands []int32) int32 {
	key := r.Key()
	if len(cands) == 1 {
		// No choice to make, but the backend is about to hold the prompt.
		if key != nil && key.Chars >= p.minChars {
			r.Decision.Blocks = key.N
		}
		return cands[0]
	}
	backends, d, now := r.Backends, &r.Decision, time.Now()
	if key == nil || key.N == 0 || key.Chars < p.minChars {
		d.Reason = ReasonShort
		if key != nil {
			d.Blocks = key.N
		}
		return p.dyn.pick(backends, cands, now)
	}
	d.Blocks = key.N
	var heldBuf [maxStack]int
	var okBuf [maxStack]bool
	held, ok := heldBuf[:], okBuf[:]
	if len(cands) > maxStack {
		held, ok = make([]int, len(cands)), make([]bool, len(cands))
	}
	held, ok = held[:len(cands)], ok[:len(cands)]
	p.index.Match(key.Chain(), cands, held)
	home, share, hasHome := p.homes.Lookup(key.Anchor, now)
	pref, most := p.best(backends, cands, held, nil, key.Anchor, home)
	d.Reason, d.Matched = ReasonPlacement, most
	if most > 0 {
		d.Reason = ReasonMatch
	} else if !hasHome {
		pref = p.homes.Place(key.Anchor, key.Blocks[0], cands, p.homeSlack,
			func(c int32) float64 { return backends[c].Weight },
			func(c int32) float64 { return affinity.Score(key.Anchor, p.names[c], backends[c].Weight) }, now)
	}
	states := p.b.snap.Load().Backends
	var loadBuf [maxStack]float64
	loads := loadBuf[:]
	if len(cands) > maxStack {
		loads = make([]float64, len(cands))
	}
	loads = loads[:len(cands)]
	minLoad, prefLoad := math.Inf(1), 0.0
	for k, c := range cands {
		loads[k] = load(backends[c], &states[c])
		minLoad = min(minLoad, loads[k])
		if c == pref {
			prefLoad = loads[k]
		}
	}
	// A hot anchor sends more requests than one backend's even share of
	// the fleet's: more than one server may have to take them. Its
	// holders share them by load (they hold the prefix alike, so no cache
	// is spent), and the guard spills to a new holder at hotGuardAbs
	// rather than guard_abs: a copy of a prefix this busy pays for
	// itself, and the holder's queue is what its requests would wait in.
	guardAbs := p.guardAbs
	if share*float64(len(cands)) > 1 {
		guardAbs = min(guardAbs, p.hotGuardAbs)
		if most > 0 {
			for k, c := range cands {
				if held[k] == most && loads[k] < prefLoad {
					pref, prefLoad = c, loads[k]
				}
			}
		}
		d.Hot = true
	}
	d.Preferred = backends[pref]
	chosen := pref
	over := func(l float64) bool {
		return l-minLoad > guardAbs && l > p.guardRel*minLoad
	}
	if over(prefLoad) {
		// Spill: to the best of the backends within the guard's bounds
		// (the least loaded always is), a copy of the prefix first: a hot
		// tenant then spreads over as many backends as its load needs
		// and no more, each holding its prefix. None holds any: the
		// dynamic choice among them.
		var obuf [maxStack]int32
		others := obuf[:0]
		for k, c := range cands {
			ok[k] = !over(loads[k])
			if ok[k] {
				others = append(others, c)
			}
		}
		if alt, n := p.best(backends, cands, held, ok, key.Anchor, home); n > 0 {
			chosen = alt
		} else if chosen = others[0]; len(others) > 1 {
			chosen = p.dyn.pick(backends, others, now)
		}
		d.Reason, d.GuardOverride = ReasonLoad, true
	}
	return chosen
}

// best returns the candidate (among those ok allows; nil: all) that holds
// the most leading blocks of the prompt, and how many. Ties go to the
// anchor's home (pool index; -1: none), then to the higher rendezvous
// score for the anchor, not to the lower load: every replica breaks them
// alike, and once the guard has spilled a tenant to a second backend
// (which the index then records as a holder too) its requests go back to
// the first as soon as the guard allows, rather than alternating between
// the two and filling both caches with it. With no holder at all the
// result is the anchor's home, else its rendezvous choice.
func (p *prefixPicker) best(backends []*upstream.Backend, cands []int32, held []int, ok []bool, anchor uint64, home int) (int32, int) {
	pick, most, score := int32(-1), -1, math.Inf(-1)
	isHome := false
	for k, c := range cands {
		if ok != nil && !ok[k] {
			continue
		}
		h := int(c) == home
		sc := affinity.Score(anchor, p.names[c], backends[c].Weight)
		if held[k] > most || held[k] == most && (h && !isHome || h == isHome && sc > score) {
			pick, most, score, isHome = c, held[k], sc, h
		}
	}
	return pick, most
}

// load is the load the prefix strategy's guard compares: requests in
// flight through this gateway plus the server's queue when known and
// fresh.
func load(be *upstream.Backend, st *State) float64 {
	l := float64(be.Inflight())
	if w := st.Waiting; w > 0 { // false for NaN
		l += w
	}
	return l
}

// prefixRecorder records the prompt's chain for the backend the request
// went to: that backend holds the prefix from now on, whichever way it
// was chosen (match, placement, the guard's spill, the only candidate).
// It runs after the pick, so that a pick that only asks whether another
// backend could take a request leaves the index as it was.
type prefixRecorder struct {
	index    *affinity.Index
	minChars int
}

func (h *prefixRecorder) Picked(r *Request, backend int32) {
	if k := r.Key(); k != nil && k.Chars >= h.minChars {
		h.index.Record(k.Chain(), int(backend))
	}
}
