package affinity

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Homes remembers each anchor's home: the backend (pool index) its
// prompts were first placed on, which the balancer prefers among the
// backends that hold equally much of a prompt. Homes count toward their
// backend's share of the anchors, which bounds first placements
// ([Homes.Place]): consistent hashing with bounded loads (Mirrokni,
// Thorup and Zadimoghaddam, 2018), the load being the number of live
// anchors, since what a server's prefix cache must hold is its tenants'
// prefixes. Rendezvous hashing alone gives each backend a share of the
// anchors that is only right on average: twelve tenants on three servers
// fell 5/4/3 in the prefix benchmark, and the server with five thrashed
// its cache.
//
// An anchor not used for the ttl is forgotten and no longer counts. The
// table holds at most its size in anchors whatever the traffic; a new
// anchor in a full table displaces one at random.
//
// Replicas agree on homes through a shared store: each publishes the
// homes it has placed or used since its last publication ([Homes.Drain]),
// the store keeps the first claim of each anchor, and every replica adopts
// the stored home ([Homes.Adopt]). Nothing of that is on the request path.
//
// Homes is safe for concurrent use; its methods take one short lock.
type Homes struct {
	mu    sync.Mutex
	m     map[uint64]home
	max   int
	ttl   int64 // nanoseconds
	count []int // live homes per backend (pool index)
	// pending are anchors to publish, each at most once (home.queued),
	// at most max of them.
	pending []uint64
	// rate and rateAt: the requests of all anchors, decayed over rateTau,
	// as of rateAt (unix nanoseconds); each home keeps its own.
	rate   float64
	rateAt int64
}

// rateTau is the time constant over which Lookup weighs requests to tell
// an anchor's share of the traffic: long enough that a share is not one
// burst, short enough that a tenant turning hot is seen within seconds.
const rateTau = 10 * time.Second

// shareMin is the fewest requests, decayed over rateTau, of an anchor
// whose share Lookup reports: a share of a handful is noise, such as one
// tenant's second request among the first few after a start.
const shareMin = 8

// decay returns a count c as of at, decayed over rateTau to t.
func decay(c float64, at, t int64) float64 {
	if t <= at {
		return c
	}
	return c * math.Exp(-float64(t-at)/float64(rateTau))
}

type home struct {
	backend int
	first   uint64 // the chain's first block: what a lost claim forgets in the index
	seen    int64  // last use, unix nanoseconds
	shared  int64  // last publication, unix nanoseconds; 0: never
	queued  bool
	rate    float64 // requests, decayed over rateTau as of seen
}

// A Claim is an anchor and its home, as published to the store.
type Claim struct {
	Anchor  uint64
	Backend int
}

// NewHomes returns an empty table of at most size anchors over a pool of
// backends backends; an anchor unused for ttl is forgotten.
func NewHomes(size, backends int, ttl time.Duration) *Homes {
	size = max(size, 1)
	// The map grows with the anchors in use rather than being sized for
	// the most it may hold: an idle gateway should not carry megabytes.
	return &Homes{m: make(map[uint64]home, min(size, 1024)), max: size, ttl: int64(ttl), count: make([]int, backends)}
}

// Lookup counts a request for the anchor at now and returns the anchor's
// home and its share of the requests of the last rateTau or so (0 with no
// home or fewer than shareMin requests), marking it used. An anchor last
// published more than a quarter of the ttl ago is queued for publication
// again, so that the store's copy lives as long as the anchor is used.
func (h *Homes) Lookup(anchor uint64, now time.Time) (backend int, share float64, ok bool) {
	t := now.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rate, h.rateAt = decay(h.rate, h.rateAt, t)+1, max(h.rateAt, t)
	e, ok := h.m[anchor]
	if !ok || t-e.seen > h.ttl {
		return -1, 0, false
	}
	e.rate = decay(e.rate, e.seen, t) + 1
	e.seen = max(e.seen, t)
	if !e.queued && t-e.shared > h.ttl/4 && len(h.pending) < h.max {
		e.queued = true
		h.pending = append(h.pending, anchor)
	}
	h.m[anchor] = e
	if e.rate < shareMin {
		return e.backend, 0, true
	}
	return e.backend, min(e.rate/h.rate, 1), true
}

// Place chooses a home for an anchor that has none, among cands (pool
// indexes; weight gives each one's base weight, score its rendezvous
// score for the anchor), records it with the chain's first block, and
// returns it. The choice is the highest-scoring candidate whose live
// anchors are fewer than its bound,
//
//	bound = ⌈(1 + slack) × (anchors on cands + 1) × weight / Σ weight over cands⌉
//
// and the highest-scoring candidate when none is under its bound (which
// happens only with weights or a slack that leave no room). With slack 0
// the anchors are spread as evenly as the weights allow, whatever the
// hash puts together.
func (h *Homes) Place(anchor, first uint64, cands []int32, slack float64, weight func(int32) float64, score func(int32) float64, now time.Time) int32 {
	t := now.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	// Two first requests of one anchor at once: the second takes the
	// home the first just placed, not a second one.
	if e, ok := h.m[anchor]; ok && t-e.seen <= h.ttl && slices.Contains(cands, int32(e.backend)) {
		e.rate = decay(e.rate, e.seen, t) + 1
		e.seen = max(e.seen, t)
		h.m[anchor] = e
		return int32(e.backend)
	}
	total, wsum := 0, 0.0
	for _, c := range cands {
		total += h.live(c)
		wsum += weight(c)
	}
	pick, top := int32(-1), int32(-1)
	pickScore, topScore := math.Inf(-1), math.Inf(-1)
	for _, c := range cands {
		sc := score(c)
		if sc > topScore {
			top, topScore = c, sc
		}
		// The bound less a hair, so that 12 anchors over three equal
		// backends bound each at 4, not at ⌈4.0000000001⌉.
		bound := math.Ceil((1+slack)*float64(total+1)*weight(c)/wsum - 1e-9)
		if float64(h.live(c)) < bound && sc > pickScore {
			pick, pickScore = c, sc
		}
	}
	if pick < 0 {
		pick = top
	}
	h.put(anchor, first, int(pick), t)
	return pick
}

func (h *Homes) live(c int32) int {
	if int(c) < len(h.count) {
		return h.count[c]
	}
	return 0
}

// put records the anchor's home, displacing an anchor at random when
// the table is full.
func (h *Homes) put(anchor, first uint64, backend int, t int64) {
	rate := 1.0 // the request that places it, counted in h.rate by Lookup
	if old, ok := h.m[anchor]; ok {
		h.dec(old.backend)
		rate = decay(old.rate, old.seen, t) + 1
	} else if len(h.m) >= h.max {
		for k, e := range h.m { // map order: a random victim
			h.dec(e.backend)
			delete(h.m, k)
			break
		}
	}
	h.m[anchor] = home{backend: backend, first: first, seen: t, rate: rate}
	if backend >= 0 && backend < len(h.count) {
		h.count[backend]++
	}
	if len(h.pending) < h.max {
		e := h.m[anchor]
		e.queued = true
		h.m[anchor] = e
		h.pending = append(h.pending, anchor)
	}
}

func (h *Homes) dec(backend int) {
	if backend >= 0 && backend < len(h.count) {
		h.count[backend]--
	}
}

// Sweep forgets the anchors unused for the ttl as of now.
func (h *Homes) Sweep(now time.Time) {
	t := now.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, e := range h.m {
		if t-e.seen > h.ttl {
			h.dec(e.backend)
			delete(h.m, k)
		}
	}
}

// Drain appends to dst, and takes off the queue, up to n anchors to
// publish with their homes, marking them published at now.
func (h *Homes) Drain(dst []Claim, n int, now time.Time) []Claim {
	t := now.UnixNano()
	h.mu.Lock()
	defer h.mu.Unlock()
	k := 0
	for ; k < len(h.pending) && n > 0; k++ {
		a := h.pending[k]
		e, ok := h.m[a]
		if !ok || !e.queued {
			continue
		}
		e.queued, e.shared = false, t
		h.m[a] = e
		dst = append(dst, Claim{Anchor: a, Backend: e.backend})
		n--
	}
	h.pending = append(h.pending[:0], h.pending[k:]...)
	return dst
}

// Requeue queues claims that Drain returned but the store did not take,
// to publish them again.
func (h *Homes) Requeue(claims []Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range claims {
		e, ok := h.m[c.Anchor]
		if !ok || e.queued || len(h.pending) >= h.max {
			continue
		}
		e.queued, e.shared = true, 0
		h.m[c.Anchor] = e
		h.pending = append(h.pending, c.Anchor)
	}
}

// Adopt makes backend the anchor's home, as the store has it. When that
// differs from this replica's own home it reports the one given up and
// the chain's first block, which the caller forgets in its index for
// that backend, so that the anchor's prompts go to the adopted home
// rather than to where this replica sent them before it knew. An anchor
// this replica does not know is left alone.
func (h *Homes) Adopt(anchor uint64, backend int) (first uint64, prev int, changed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.m[anchor]
	if !ok || e.backend == backend {
		return 0, -1, false
	}
	h.dec(e.backend)
	prev, e.backend = e.backend, backend
	if backend >= 0 && backend < len(h.count) {
		h.count[backend]++
	}
	h.m[anchor] = e
	return e.first, prev, true
}

// Counts returns the live homes per backend (pool order), for tests and
// the admin API.
func (h *Homes) Counts() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.count...)
}

// Len returns the number of anchors held.
func (h *Homes) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}
