package affinity

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func chainOf(seed uint64, n int) []uint64 {
	c := make([]uint64, n)
	for i := range c {
		c[i] = mix(seed*1000 + uint64(i) + 1)
	}
	return c
}

func TestMatch(t *testing.T) {
	x := NewIndex(1 << 12)
	a := chainOf(1, 10)
	x.Record(a[:10], 0)
	x.Record(a[:4], 2)
	x.Record(a[:7], 63)
	x.Record(a, 64) // out of range: not recorded
	x.Record(a, -1) // out of range: not recorded
	b := append(append([]uint64(nil), a[:3]...), chainOf(2, 5)...)
	x.Record(b, 1) // shares the first three blocks
	tests := []struct {
		name  string
		chain []uint64
		cands []int32
		want  []int
	}{
		{"all", a, []int32{0, 1, 2, 3, 63, 64}, []int{10, 3, 4, 0, 7, 0}},
		{"subset", a, []int32{2, 1}, []int{4, 3}},
		{"shorter query", a[:2], []int32{0, 1, 2}, []int{2, 2, 2}},
		{"other chain", b, []int32{0, 1, 2}, []int{3, 8, 3}},
		{"unknown", chainOf(3, 5), []int32{0, 1}, []int{0, 0}},
		{"empty chain", nil, []int32{0}, []int{0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := make([]int, len(tt.cands))
			for i := range held {
				held[i] = -1
			}
			x.Match(tt.chain, tt.cands, held)
			if diff := cmp.Diff(tt.want, held); diff != "" {
				t.Errorf("held (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIndexBound: however many distinct chains are recorded, the index
// holds at most its size, and what was recorded last is still there.
func TestIndexBound(t *testing.T) {
	for _, size := range []int{1, 4, 1000, 1 << 12} {
		x := NewIndex(size)
		if x.Cap() > max(size, indexWays) {
			t.Errorf("size %d: capacity %d", size, x.Cap())
		}
		for i := range uint64(5000) {
			x.Record(chainOf(i, 8), int(i%8))
		}
		if n := x.Len(); n > x.Cap() {
			t.Errorf("size %d: %d entries, more than %d", size, n, x.Cap())
		}
		if x.Cap() < 64 {
			continue // one or two sets: a chain's own blocks evict each other
		}
		last := chainOf(4999, 8)
		held := []int{0}
		x.Match(last[:1], []int32{4999 % 8}, held)
		if held[0] != 1 {
			t.Errorf("size %d: the last block recorded is gone", size)
		}
	}
}

// TestIndexLRU: a block that keeps being used survives a flood of new
// ones that evicts blocks used once.
func TestIndexLRU(t *testing.T) {
	x := NewIndex(1 << 10)
	hot := chainOf(0, 4)
	cold := chainOf(1, 4)
	x.Record(hot, 0)
	x.Record(cold, 0)
	held := []int{0}
	for i := range uint64(20000) {
		x.Record(chainOf(i+2, 1), 1)
		if i%64 == 0 {
			x.Match(hot, []int32{0}, held) // a hit refreshes
		}
	}
	if x.Match(hot, []int32{0}, held); held[0] != 4 {
		t.Errorf("hot chain: %d of 4 blocks left", held[0])
	}
	if x.Match(cold, []int32{0}, held); held[0] == 4 {
		t.Error("cold chain survived 20× the index's size of new blocks")
	}
}

func TestIndexConcurrent(t *testing.T) {
	x := NewIndex(256)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			held := make([]int, 4)
			for i := range uint64(2000) {
				c := chainOf(i%50, 6)
				x.Record(c, g)
				x.Match(c, []int32{0, 1, 2, int32(g)}, held)
				for _, n := range held {
					if n < 0 || n > len(c) {
						t.Errorf("held %d of %d", n, len(c))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if x.Len() > x.Cap() {
		t.Errorf("%d entries, more than %d", x.Len(), x.Cap())
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	x := NewIndex(1 << 12)
	c := chainOf(1, 64)
	cands := []int32{0, 1, 2}
	held := make([]int, 3)
	if n := testing.AllocsPerRun(100, func() {
		x.Record(c, 1)
		x.Match(c, cands, held)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

// TestScore: rendezvous spreads anchors evenly over equal backends, by
// weight over unequal ones, and moves only the removed backend's anchors.
func TestScore(t *testing.T) {
	h := mustHasher(t, HashXXH)
	names := []uint64{h.HashString("a"), h.HashString("b"), h.HashString("c")}
	pick := func(anchor uint64, weights []float64, n int) int {
		best, bestScore := 0, math.Inf(-1)
		for i := range n {
			if s := Score(anchor, names[i], weights[i]); s > bestScore {
				best, bestScore = i, s
			}
		}
		return best
	}
	const N = 30000
	r := rand.New(rand.NewPCG(1, 2))
	for _, weights := range [][]float64{{1, 1, 1}, {1, 2, 1}} {
		var got [3]int
		moved := 0
		for range N {
			a := r.Uint64()
			p := pick(a, weights, 3)
			got[p]++
			if p != 2 && pick(a, weights, 2) != p {
				moved++
			}
		}
		total := weights[0] + weights[1] + weights[2]
		for i, n := range got {
			// Binomial: σ = sqrt(N p (1-p)) < 82 for N 30000; 5σ.
			if want := N * weights[i] / total; math.Abs(float64(n)-want) > 410 {
				t.Errorf("weights %v: backend %d got %d anchors, want %.0f ± 410", weights, i, n, want)
			}
		}
		if moved != 0 {
			t.Errorf("weights %v: removing backend 2 moved %d anchors of the others", weights, moved)
		}
	}
}
