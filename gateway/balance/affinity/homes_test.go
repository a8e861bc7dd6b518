package affinity

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// placeAll places anchors over n backends with the given weights and
// slack, scoring by rendezvous over the backends' names, and returns the
// homes per backend.
func placeAll(h *Homes, anchors []uint64, weights []float64, slack float64, now time.Time) []int {
	names := make([]uint64, len(weights))
	cands := make([]int32, len(weights))
	for i := range weights {
		names[i] = mix(uint64(i) + 1)
		cands[i] = int32(i)
	}
	for _, a := range anchors {
		h.Place(a, a^1, cands, slack,
			func(c int32) float64 { return weights[c] },
			func(c int32) float64 { return Score(a, names[c], weights[c]) }, now)
	}
	return h.Counts()
}

// TestPlaceBounded: rendezvous alone leaves some backend over its share
// for most sets of 12 anchors over 3 backends; bounded placement with
// slack 0 never does, and follows the weights.
func TestPlaceBounded(t *testing.T) {
	now := time.Unix(1000, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	uneven := 0
	for trial := range 200 {
		anchors := make([]uint64, 12)
		for i := range anchors {
			anchors[i] = rng.Uint64()
		}
		free := placeAll(NewHomes(64, 3, time.Minute), anchors, []float64{1, 1, 1}, 100, now)
		if free[0] != 4 || free[1] != 4 || free[2] != 4 {
			uneven++
		}
		if got := placeAll(NewHomes(64, 3, time.Minute), anchors, []float64{1, 1, 1}, 0, now); got[0] != 4 || got[1] != 4 || got[2] != 4 {
			t.Fatalf("trial %d: slack 0 placed %v, want 4/4/4", trial, got)
		}
		if got := placeAll(NewHomes(64, 3, time.Minute), anchors, []float64{2, 1, 1}, 0, now); got[0] != 6 || got[1] != 3 || got[2] != 3 {
			t.Fatalf("trial %d: weights 2/1/1 placed %v, want 6/3/3", trial, got)
		}
		// Slack 0.5: at most ⌈1.5 × 4⌉ = 6 each.
		for i, c := range placeAll(NewHomes(64, 3, time.Minute), anchors, []float64{1, 1, 1}, 0.5, now) {
			if c > 6 {
				t.Fatalf("trial %d: slack 0.5 put %d anchors on backend %d", trial, c, i)
			}
		}
	}
	// Binomial: 4/4/4 has probability 12!/(4!)³/3¹² ≈ 0.065.
	if uneven < 150 {
		t.Errorf("rendezvous alone was even in %d of 200 trials; the test no longer shows what bounding is for", 200-uneven)
	}
}

// TestPlaceDeterministic: the same anchors in the same order get the same
// homes in another table (another replica), and an anchor's home is its
// rendezvous choice whenever that backend has room.
func TestPlaceDeterministic(t *testing.T) {
	now := time.Unix(1000, 0)
	anchors := make([]uint64, 300)
	for i := range anchors {
		anchors[i] = mix(uint64(i) * 7)
	}
	a, b := NewHomes(1024, 4, time.Minute), NewHomes(1024, 4, time.Minute)
	placeAll(a, anchors, []float64{1, 1, 1, 1}, 0, now)
	placeAll(b, anchors, []float64{1, 1, 1, 1}, 0, now)
	for _, x := range anchors {
		ha, _, _ := a.Lookup(x, now)
		hb, _, _ := b.Lookup(x, now)
		if ha != hb {
			t.Fatalf("anchor %x: %d and %d", x, ha, hb)
		}
	}
	// The first anchor had the whole pool free: its rendezvous choice.
	first := NewHomes(8, 4, time.Minute)
	placeAll(first, anchors[:1], []float64{1, 1, 1, 1}, 0, now)
	want, best := -1, -1.0
	for i := range 4 {
		if s := Score(anchors[0], mix(uint64(i)+1), 1); s > best {
			want, best = i, s
		}
	}
	if got, _, _ := first.Lookup(anchors[0], now); got != want {
		t.Errorf("first anchor's home %d, want its rendezvous choice %d", got, want)
	}
}

// TestHomesExpireAndBound: an anchor unused for the ttl is forgotten and
// stops counting; one in use is kept; the table never holds more than its
// size, and the counts always add up to what it holds.
func TestHomesExpireAndBound(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := NewHomes(100, 3, time.Minute)
	anchors := make([]uint64, 30)
	for i := range anchors {
		anchors[i] = uint64(i) + 1
	}
	placeAll(h, anchors, []float64{1, 1, 1}, 0, t0)
	// Half are used again 50 s later; a minute after that the rest go.
	for _, a := range anchors[:15] {
		if _, _, ok := h.Lookup(a, t0.Add(50*time.Second)); !ok {
			t.Fatalf("anchor %d lost before its ttl", a)
		}
	}
	h.Sweep(t0.Add(70 * time.Second))
	if h.Len() != 15 {
		t.Errorf("after the sweep: %d anchors, want 15", h.Len())
	}
	if _, _, ok := h.Lookup(anchors[20], t0.Add(70*time.Second)); ok {
		t.Error("an expired anchor still has a home")
	}
	sum := 0
	for _, c := range h.Counts() {
		sum += c
	}
	if sum != 15 {
		t.Errorf("counts %v add up to %d, want 15", h.Counts(), sum)
	}
	// An anchor past its ttl but not yet swept reads as unknown too.
	if _, _, ok := h.Lookup(anchors[0], t0.Add(200*time.Second)); ok {
		t.Error("an anchor past its ttl, not yet swept, still has a home")
	}

	// Bound: 1000 anchors through a table of 100.
	b := NewHomes(100, 3, time.Hour)
	many := make([]uint64, 1000)
	for i := range many {
		many[i] = uint64(i) + 1
	}
	placeAll(b, many, []float64{1, 1, 1}, 0, t0)
	if b.Len() != 100 {
		t.Errorf("table holds %d anchors, want its size 100", b.Len())
	}
	sum = 0
	for _, c := range b.Counts() {
		sum += c
	}
	if sum != 100 {
		t.Errorf("counts %v add up to %d, want 100", b.Counts(), sum)
	}
}

// TestHomesShare: placed anchors are queued once for publication, again
// when used after a quarter of the ttl; a failed publication is queued
// again; adopting another replica's home moves the count and names the
// home given up.
func TestHomesRequestShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := NewHomes(100, 3, time.Minute)
	placeAll(h, []uint64{10, 20, 30}, []float64{1, 1, 1}, 0, t0)
	h.Lookup(10, t0) // placed and already queued: not queued twice
	got := h.Drain(nil, 2, t0)
	got = h.Drain(got, 10, t0)
	if len(got) != 3 {
		t.Fatalf("drained %v, want the 3 placed anchors once each", got)
	}
	if more := h.Drain(nil, 10, t0); len(more) != 0 {
		t.Errorf("drained again: %v", more)
	}
	// Used soon after publication: not queued; after ttl/4: queued.
	h.Lookup(10, t0.Add(5*time.Second))
	if more := h.Drain(nil, 10, t0.Add(5*time.Second)); len(more) != 0 {
		t.Errorf("republished after 5 s: %v", more)
	}
	h.Lookup(10, t0.Add(20*time.Second))
	again := h.Drain(nil, 10, t0.Add(20*time.Second))
	if len(again) != 1 || again[0].Anchor != 10 {
		t.Fatalf("after ttl/4: %v, want anchor 10", again)
	}
	h.Requeue(again)
	if re := h.Drain(nil, 10, t0.Add(21*time.Second)); len(re) != 1 {
		t.Errorf("requeued: %v", re)
	}

	home, _, _ := h.Lookup(20, t0)
	to := (home + 1) % 3
	before := h.Counts()
	first, prev, changed := h.Adopt(20, to)
	if !changed || prev != home || first != 20^1 {
		t.Errorf("Adopt = %d, %d, %v; want first block %d, previous %d, changed", first, prev, changed, 20^1, home)
	}
	after := h.Counts()
	if after[home] != before[home]-1 || after[to] != before[to]+1 {
		t.Errorf("counts %v → %v", before, after)
	}
	if got, _, _ := h.Lookup(20, t0); got != to {
		t.Errorf("home after Adopt: %d, want %d", got, to)
	}
	if _, _, changed := h.Adopt(20, to); changed {
		t.Error("adopting the same home again reports a change")
	}
	if _, _, changed := h.Adopt(99, 0); changed {
		t.Error("adopting an unknown anchor reports a change")
	}
}

func TestIndexForget(t *testing.T) {
	x := NewIndex(64)
	chain := []uint64{1, 2, 3}
	x.Record(chain, 0)
	x.Record(chain, 2)
	x.Forget(1, 2)
	held := make([]int, 2)
	x.Match(chain, []int32{0, 2}, held)
	if held[0] != 3 || held[1] != 0 {
		t.Errorf("after forgetting block 1 on backend 2: held %v, want [3 0]", held)
	}
	x.Forget(1, 70) // out of range: ignored
	x.Forget(99, 0) // not held: ignored
	x.Match(chain, []int32{0}, held)
	if held[0] != 3 {
		t.Errorf("backend 0 lost its blocks: %d", held[0])
	}
}

// TestHomesRequestShare: Lookup tells an anchor's share of the requests, the
// older ones weighing less (rateTau), so that a tenant that was hot and
// went quiet stops being hot within seconds.
func TestHomesShare(t *testing.T) {
	t0 := time.Unix(1000, 0)
	h := NewHomes(64, 3, time.Hour)
	// As the balancer does: a request is looked up, then placed when it
	// has no home.
	h.Lookup(1, t0)
	h.Lookup(2, t0)
	placeAll(h, []uint64{1, 2}, []float64{1, 1, 1}, 0, t0)
	for range 7 {
		h.Lookup(1, t0)
	}
	if _, _, ok := h.Lookup(3, t0); ok { // no home: counted, no share
		t.Fatal("anchor 3 has a home")
	}
	if _, s, _ := h.Lookup(2, t0); s != 0 { // 2 requests: too few to tell
		t.Errorf("share of anchor 2 after 2 requests: %v, want 0", s)
	}
	// Anchor 1: 1 + 7 + this one, of those and anchor 2's 2 and 3's.
	if _, s, _ := h.Lookup(1, t0); math.Abs(s-9.0/12) > 1e-9 {
		t.Errorf("share of anchor 1: %v, want 9/12", s)
	}
	// 60 s (six time constants) later anchors 1 and 2 send 9 requests
	// each: the earlier 12 weigh 12·e⁻⁶ ≈ 0.03 then.
	t1 := t0.Add(6 * rateTau)
	for range 9 {
		h.Lookup(2, t1)
	}
	for range 8 {
		h.Lookup(1, t1)
	}
	e6 := math.Exp(-6)
	want := (9*e6 + 9) / (12*e6 + 18)
	if _, s, _ := h.Lookup(1, t1); math.Abs(s-want) > 1e-9 {
		t.Errorf("share of anchor 1 a minute later: %v, want %v", s, want)
	}
}

func BenchmarkHomesLookup(b *testing.B) {
	h := NewHomes(1<<16, 8, time.Minute)
	now := time.Now()
	placeAll(h, []uint64{1, 2, 3, 4}, []float64{1, 1, 1, 1, 1, 1, 1, 1}, 0, now)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Lookup(uint64(i%4)+1, now)
	}
}
