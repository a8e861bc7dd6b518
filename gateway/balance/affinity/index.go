package affinity

import (
	"math/bits"
	"sync/atomic"
)

// An Index remembers which backends recently served a request containing
// each block: block hash → a bitmask over the pool's backends (bit i: the
// backend at pool index i). It holds at most its size in entries whatever
// the traffic, and is safe for concurrent use without a lock: Match and
// Record are a few atomic loads and stores per block and never allocate.
//
// # Why a set-associative table
//
// The index is a fixed array of ways, grouped in sets of indexWays; a
// block hash maps to one set (multiply and shift) and lives in one of its
// ways. A way holds the hash, the mask and the tick of its last use; a new
// block takes the set's empty or least recently used way. This is LRU
// within each set, an approximation of LRU over the whole index that
// caches (CPU caches, for one) have long used: O(1) per update, memory
// fixed at construction (24 bytes an entry: 6 MiB for the default 2¹⁸) and
// no pointers for the garbage collector to trace, where a map per
// generation would allocate as it grows and need a lock around it.
//
// Ways are written without a lock, so two requests that replace the same
// way at the same moment can leave one's hash with the other's mask: a
// wrong hint for one block, which costs at most one request's cache hit
// and is corrected by the next Record. Readers check the hash again after
// reading the mask, so a way being replaced reads as a miss.
//
// Pools of more than 64 backends: the backends past index 63 are never
// recorded and never match, and are chosen by rendezvous placement and
// load only.
type Index struct {
	ways []way
	sets int
	tick atomic.Uint32
}

// indexWays is the associativity: enough that a few hot blocks colliding
// in a set do not evict each other, few enough that a lookup reads one or
// two cache lines.
const indexWays = 4

// MaxBackends is the number of backends an Index tracks (pool indexes
// 0..63).
const MaxBackends = 64

type way struct {
	hash atomic.Uint64
	mask atomic.Uint64 // 0: empty
	used atomic.Uint32 // tick of the last Record or Match hit
}

// NewIndex returns an Index of at most size entries (rounded down to a
// multiple of indexWays; at least one set).
func NewIndex(size int) *Index {
	sets := max(size/indexWays, 1)
	return &Index{ways: make([]way, sets*indexWays), sets: sets}
}

// Cap returns the most entries the Index holds.
func (x *Index) Cap() int { return len(x.ways) }

// Len counts the entries in use. It reads the whole table: for tests and
// the admin API, not the request path.
func (x *Index) Len() int {
	n := 0
	for i := range x.ways {
		if x.ways[i].mask.Load() != 0 {
			n++
		}
	}
	return n
}

func (x *Index) set(h uint64) []way {
	s := bucket(mix(h), x.sets) * indexWays
	return x.ways[s : s+indexWays : s+indexWays]
}

// lookup returns the mask of block h, 0 when the index does not hold it.
func (x *Index) lookup(h uint64, now uint32) uint64 {
	set := x.set(h)
	for i := range set {
		w := &set[i]
		if w.hash.Load() != h {
			continue
		}
		m := w.mask.Load()
		if m == 0 || w.hash.Load() != h {
			return 0
		}
		touch(w, now)
		return m
	}
	return 0
}

// refreshTicks is how stale a way's tick may get before a use refreshes
// it: a hot block (a system prompt every request shares) is then written
// once every refreshTicks requests, not by every one, so its cache line
// does not bounce between cores; recency is approximate by as much.
const refreshTicks = 16

func touch(w *way, now uint32) {
	if now-w.used.Load() > refreshTicks {
		w.used.Store(now)
	}
}

// Record notes that the backend at pool index backend served a request
// holding every block of chain. A backend index outside [0, MaxBackends)
// is not recorded.
func (x *Index) Record(chain []uint64, backend int) {
	if backend < 0 || backend >= MaxBackends || len(chain) == 0 {
		return
	}
	bit := uint64(1) << backend
	now := x.tick.Add(1)
	for _, h := range chain {
		x.record(h, bit, now)
	}
}

func (x *Index) record(h, bit uint64, now uint32) {
	set := x.set(h)
	victim, oldest := 0, uint32(0)
	for i := range set {
		w := &set[i]
		m := w.mask.Load()
		if m != 0 && w.hash.Load() == h {
			if m&bit == 0 {
				w.mask.Or(bit)
			}
			touch(w, now)
			return
		}
		// Age by distance from now, so that the tick wrapping around
		// does not make the newest look the oldest.
		age := now - w.used.Load()
		if m == 0 {
			age = ^uint32(0)
		}
		if i == 0 || age > oldest {
			victim, oldest = i, age
		}
	}
	w := &set[victim]
	w.mask.Store(0) // readers see the way empty while it changes hands
	w.hash.Store(h)
	w.mask.Store(bit)
	w.used.Store(now)
}

// Forget clears the backend's bit on block h: from then on the backend
// holds no prompt that starts with that block, as far as the index knows.
func (x *Index) Forget(h uint64, backend int) {
	if backend < 0 || backend >= MaxBackends {
		return
	}
	set := x.set(h)
	for i := range set {
		w := &set[i]
		if w.hash.Load() == h {
			w.mask.And(^(uint64(1) << backend))
			return
		}
	}
}

// Match returns, in held (len(held) >= len(cands)), the number of leading
// blocks of chain that each backend of cands (pool indexes) served: the
// length of the prefix of chain it holds, as far as the index knows. It
// stops reading at the first block no candidate holds.
func (x *Index) Match(chain []uint64, cands []int32, held []int) {
	var alive uint64
	for k, c := range cands {
		held[k] = 0
		if c >= 0 && c < MaxBackends {
			alive |= 1 << c
		}
	}
	if alive == 0 || len(chain) == 0 {
		return
	}
	var depth [MaxBackends]int32
	now := x.tick.Load()
	n := 0
	for ; n < len(chain) && alive != 0; n++ {
		m := x.lookup(chain[n], now)
		for lost := alive &^ m; lost != 0; lost &= lost - 1 {
			depth[bits.TrailingZeros64(lost)] = int32(n)
		}
		alive &= m
	}
	for ; alive != 0; alive &= alive - 1 {
		depth[bits.TrailingZeros64(alive)] = int32(n)
	}
	for k, c := range cands {
		if c >= 0 && c < MaxBackends {
			held[k] = int(depth[c])
		}
	}
}
