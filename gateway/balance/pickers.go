package balance

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/gateway/upstream"
)

// A Picker is a strategy: it chooses one of the candidates the filters
// left. It reads what it needs at each pick (in-flight counts, latency
// estimates, the Snapshot) without a lock, and records nothing that a
// later pick reads: that is a Hook's business, run once the request is
// sent. Pickers are safe for concurrent use.
type Picker interface {
	// Pick returns one of cands (pool indexes, in pool order; at least
	// one), and may say how in r.Decision.
	Pick(r *Request, cands []int32) int32
}

var (
	_ Picker = (*roundRobin)(nil)
	_ Picker = (*leastRequest)(nil)
	_ Picker = (*twoChoices)(nil)
	_ Picker = (*prefixPicker)(nil)
)

// roundRobin takes the candidates in turn.
type roundRobin struct{ next atomic.Uint64 }

func (p *roundRobin) Pick(_ *Request, cands []int32) int32 {
	if len(cands) == 1 {
		return cands[0]
	}
	return cands[p.next.Add(1)%uint64(len(cands))]
}

// leastRequest takes the candidate with the fewest requests in flight
// through this gateway; ties go round robin, so that an idle pool is
// spread evenly.
type leastRequest struct{ next atomic.Uint64 }

func (p *leastRequest) Pick(r *Request, cands []int32) int32 {
	if len(cands) == 1 {
		return cands[0]
	}
	start := int(p.next.Add(1) % uint64(len(cands)))
	best, bestN := int32(-1), int64(math.MaxInt64)
	for k := range cands {
		i := cands[(start+k)%len(cands)]
		if n := r.Backends[i].Inflight(); n < bestN {
			best, bestN = i, n
		}
	}
	return best
}

// twoChoices is the dynamic strategy: it draws two distinct candidates at
// random and takes the cheaper (see the package comment for the cost).
type twoChoices struct{ b *Balancer }

func (p *twoChoices) Pick(r *Request, cands []int32) int32 {
	if len(cands) == 1 {
		return cands[0]
	}
	return p.pick(r.Backends, cands, time.Now())
}

// pick is Pick among at least two candidates, as of now. Costs within
// tieBand of each other are a tie, which goes to the first drawn (at
// random). math/rand/v2's global source is per-thread in the runtime: no
// lock, no allocation.
func (p *twoChoices) pick(backends []*upstream.Backend, cands []int32, now time.Time) int32 {
	n := len(cands)
	x := rand.IntN(n)
	y := rand.IntN(n - 1)
	if y >= x {
		y++
	}
	i, j := cands[x], cands[y]
	b := p.b
	states := b.snap.Load().Backends
	li, lj := b.latencies(backends[i], backends[j], now)
	if b.cost(backends[j], &states[j], lj) < (1-tieBand)*b.cost(backends[i], &states[i], li) {
		return j
	}
	return i
}

// tieBand is the relative difference of cost below which two candidates
// are equal. Equal backends' latency estimates differ by noise (the
// scheduling of a shared host, a batch that ran long): without the band,
// light sequential traffic would stick to whichever looked a little faster
// until the others' estimates decayed, and equal backends would split by
// noise. One request more in flight, a queue, a 10× slower backend are far
// outside it.
const tieBand = 0.1

// latencies returns the latency terms of two candidates: their peak-EWMA
// times to the first byte, a backend never measured taking the other's
// (neither favoured nor shunned until it is), 1 for both when neither was.
func (b *Balancer) latencies(x, y *upstream.Backend, now time.Time) (lx, ly float64) {
	if b.wLatency <= 0 {
		return 1, 1
	}
	lx, _ = x.Latency(now)
	ly, _ = y.Latency(now)
	switch {
	case math.IsNaN(lx) && math.IsNaN(ly):
		return 1, 1
	case math.IsNaN(lx):
		lx = ly
	case math.IsNaN(ly):
		ly = lx
	}
	// Below a millisecond (or decayed toward zero after long idleness) the
	// latency is network and scheduling noise, not the model server; the
	// in-flight counts decide.
	return max(lx, minLatency), max(ly, minLatency)
}

// minLatency is the smallest latency term, in seconds.
const minLatency = 1e-3

// maxErrorShare caps the error term: a backend that failed every recent
// attempt costs 100^e times as much, not infinitely more (passive ejection,
// not the balancer, takes a dead backend out).
const maxErrorShare = 0.01

// Cost returns the dynamic strategy's cost of sending one more request to
// the backend at index i of the pool, as of now (see the package comment).
// A backend never measured is given the mean latency of those that were
// (Pick gives it its rival's: neither favoured nor shunned), 1 s when none
// was. For the admin API and tests.
func (b *Balancer) Cost(i int, now time.Time) float64 {
	backends := b.pool.Backends()
	l := 1.0
	if b.wLatency > 0 {
		if v, _ := backends[i].Latency(now); !math.IsNaN(v) {
			l = max(v, minLatency)
		} else {
			var sum float64
			var n int
			for _, be := range backends {
				if v, _ := be.Latency(now); !math.IsNaN(v) {
					sum += max(v, minLatency)
					n++
				}
			}
			if n > 0 {
				l = sum / float64(n)
			}
		}
	}
	return b.cost(backends[i], &b.snap.Load().Backends[i], l)
}

func (b *Balancer) cost(be *upstream.Backend, st *State, latency float64) float64 {
	q := float64(be.Inflight()) + 1
	if w := st.Waiting; b.wQueue > 0 && w > 0 { // false for NaN
		q += b.wQueue * w
	}
	switch {
	case b.wLatency == 1:
		q *= latency
	case b.wLatency > 0:
		q *= math.Pow(latency, b.wLatency)
	}
	return q * st.ErrorFactor / st.Weight
}
