package calibrate

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func at(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }

func TestStoreTTL(t *testing.T) {
	s := NewStore(10, time.Minute, 10)
	s.Remember("a", 0.9, at(0))
	s.Remember("b", 0.8, at(30))
	if err := s.Label("a", true, at(59)); err != nil {
		t.Fatalf("Label(a) just before the ttl: %v", err)
	}
	// Expiry is at Remember + ttl exactly.
	if err := s.Label("a", false, at(60)); !errors.Is(err, ErrUnknown) {
		t.Fatalf("Label(a) at the ttl: err = %v, want ErrUnknown", err)
	}
	if p, _ := s.Len(); p != 1 {
		t.Errorf("pending after a lazy expiry = %d, want 1", p)
	}
	// An insert purges the expired ones at the old end.
	s.Remember("c", 0.7, at(95))
	if p, l := s.Len(); p != 1 || l != 1 {
		t.Errorf("Len after purge = %d, %d, want 1, 1", p, l)
	}
	if err := s.Label("b", true, at(95)); !errors.Is(err, ErrUnknown) {
		t.Errorf("Label(b) after purge: err = %v, want ErrUnknown", err)
	}
	if err := s.Label("c", false, at(95)); err != nil {
		t.Errorf("Label(c): %v", err)
	}
	want := []Pair{{0.9, true}, {0.7, false}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("Pairs (-want +got):\n%s", diff)
	}
}

func TestStoreNoTTL(t *testing.T) {
	s := NewStore(2, 0, 2)
	s.Remember("a", 0.5, at(0))
	if err := s.Label("a", true, at(1e6)); err != nil {
		t.Fatalf("ttl 0 should not expire: %v", err)
	}
}

func TestStoreEviction(t *testing.T) {
	s := NewStore(3, time.Hour, 10)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		s.Remember(id, 0.5, at(i))
	}
	if p, _ := s.Len(); p != 3 {
		t.Fatalf("pending = %d, want 3", p)
	}
	for _, id := range []string{"a", "b"} {
		if err := s.Label(id, true, at(5)); !errors.Is(err, ErrUnknown) {
			t.Errorf("Label(%s) after eviction: err = %v, want ErrUnknown", id, err)
		}
	}
	for _, id := range []string{"c", "d", "e"} {
		if err := s.Label(id, true, at(5)); err != nil {
			t.Errorf("Label(%s): %v", id, err)
		}
	}
	// Remembering c again makes it the newest, so d goes next, not c.
	s.Remember("c", 0.25, at(6))
	s.Remember("f", 0.5, at(7))
	if err := s.Label("d", true, at(8)); !errors.Is(err, ErrUnknown) {
		t.Errorf("Label(d): err = %v, want ErrUnknown", err)
	}
	if err := s.Label("c", false, at(8)); err != nil {
		t.Errorf("Label(c) after re-Remember: %v", err)
	}
	// c's first label stays; the re-remembered c got a new pair.
	want := []Pair{{0.5, true}, {0.5, true}, {0.5, true}, {0.25, false}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("Pairs (-want +got):\n%s", diff)
	}
}

func TestStoreLabelsRing(t *testing.T) {
	s := NewStore(100, time.Hour, 3)
	for i := range 5 {
		id := fmt.Sprint(i)
		s.Remember(id, float64(i+1)/10, at(i))
		if err := s.Label(id, i%2 == 0, at(i)); err != nil {
			t.Fatal(err)
		}
	}
	want := []Pair{{0.3, true}, {0.4, false}, {0.5, true}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("Pairs (-want +got):\n%s", diff)
	}
	if p, l := s.Len(); p != 5 || l != 3 {
		t.Errorf("Len = %d, %d, want 5, 3", p, l)
	}
	// Relabelling a pair still in the ring replaces it in place.
	if err := s.Label("3", true, at(6)); err != nil {
		t.Fatal(err)
	}
	want = []Pair{{0.3, true}, {0.4, true}, {0.5, true}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("after relabel (-want +got):\n%s", diff)
	}
	// Relabelling one whose pair has left the ring adds a new pair.
	if err := s.Label("0", false, at(6)); err != nil {
		t.Fatal(err)
	}
	want = []Pair{{0.4, true}, {0.5, true}, {0.1, false}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("after relabel of a dropped pair (-want +got):\n%s", diff)
	}
	// Relabelling the newest pair again keeps one pair for it.
	for _, c := range []bool{true, false, true} {
		if err := s.Label("0", c, at(7)); err != nil {
			t.Fatal(err)
		}
	}
	want = []Pair{{0.4, true}, {0.5, true}, {0.1, true}}
	if diff := cmp.Diff(want, s.Pairs()); diff != "" {
		t.Errorf("after repeated relabel (-want +got):\n%s", diff)
	}
}

func TestStoreUnknownAndInvalid(t *testing.T) {
	s := NewStore(10, time.Hour, 10)
	if err := s.Label("nope", true, at(0)); !errors.Is(err, ErrUnknown) {
		t.Errorf("Label of a never-remembered id: err = %v, want ErrUnknown", err)
	}
	for _, c := range []float64{math.NaN(), 0, -0.1, 1.0000001, math.Inf(1)} {
		s.Remember("x", c, at(0))
	}
	s.Remember("", 0.5, at(0))
	if p, _ := s.Len(); p != 0 {
		t.Errorf("invalid confidences and the empty id were remembered: pending = %d", p)
	}
	s.Remember("one", 1, at(0))
	if err := s.Label("one", true, at(0)); err != nil {
		t.Errorf("confidence 1 is valid: %v", err)
	}
	if got := s.Pairs(); len(got) != 1 {
		t.Errorf("Pairs = %v", got)
	}
}

func TestStoreDefaults(t *testing.T) {
	s := NewStore(0, 0, -1)
	if s.maxPending != DefaultMaxPending || s.maxLabels != DefaultMaxLabels {
		t.Errorf("defaults = %d, %d", s.maxPending, s.maxLabels)
	}
	if got := s.Pairs(); got == nil || len(got) != 0 {
		t.Errorf("Pairs of an empty store = %#v, want empty non-nil", got)
	}
}

// TestStoreSteadyStateAllocs checks that Remember and Label reuse the
// node slab and ring once they are full.
func TestStoreSteadyStateAllocs(t *testing.T) {
	s := NewStore(64, time.Hour, 64)
	ids := make([]string, 256)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	i := 0
	step := func() {
		id := ids[i%len(ids)]
		s.Remember(id, 0.5, at(i))
		_ = s.Label(id, true, at(i))
		i++
	}
	for range 1000 {
		step()
	}
	if a := testing.AllocsPerRun(1000, step); a != 0 {
		t.Errorf("Remember+Label allocate %v times per call in steady state", a)
	}
}

func TestStoreConcurrent(t *testing.T) {
	s := NewStore(200, 50*time.Millisecond, 100)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				id := fmt.Sprint(g, "-", i)
				now := t0.Add(time.Duration(i) * time.Millisecond)
				s.Remember(id, 0.5, now)
				if err := s.Label(fmt.Sprint(g, "-", i/2), i%3 == 0, now); err != nil && !errors.Is(err, ErrUnknown) {
					t.Error(err)
				}
				if i%50 == 0 {
					_ = s.Pairs()
					_, _ = s.Len()
				}
			}
		})
	}
	wg.Wait()
	p, l := s.Len()
	if p > 200 || l > 100 || l == 0 {
		t.Errorf("Len = %d, %d: bounds 200, 100", p, l)
	}
	if got := len(s.Pairs()); got != l {
		t.Errorf("len(Pairs) = %d, Len says %d", got, l)
	}
	s.checkInvariants(t)
}

// checkInvariants verifies the list and the index agree.
func (s *Store) checkInvariants(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	n, prev := 0, int32(nilNode)
	for i := s.head; i != nilNode; i = s.nodes[i].next {
		nd := s.nodes[i]
		if nd.prev != prev {
			t.Fatalf("node %d: prev %d, want %d", i, nd.prev, prev)
		}
		if j, ok := s.index[nd.id]; !ok || j != i {
			t.Fatalf("node %d (%q) not indexed", i, nd.id)
		}
		prev = i
		n++
	}
	if prev != s.tail || n != len(s.index) {
		t.Fatalf("list has %d nodes ending at %d; index %d, tail %d", n, prev, len(s.index), s.tail)
	}
}
