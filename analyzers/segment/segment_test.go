package segment

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/window"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func newTest(max int) *Registry { return New(max, time.Minute, time.Second, time.Minute) }

// TestFirstNamesTakeFreeSegments: names take a segment at their first
// request while there is room; the rest stay in Other, and a lookup
// that does not admit leaves a new name there.
func TestFirstNamesTakeFreeSegments(t *testing.T) {
	r := newTest(2)
	want := []string{"a", "a", "b", Other, "b"}
	for i, m := range []string{"a", "a", "b", "c", "b"} {
		if got := r.Of(t0.Add(time.Duration(i)*time.Millisecond), m); got != want[i] {
			t.Errorf("request %d of %s went to %s, want %s", i, m, got, want[i])
		}
	}
	if ch := r.Rebalance(t0.Add(time.Second)); len(ch.Added)+len(ch.Removed) > 0 {
		t.Errorf("rebalance %+v, want no change", ch)
	}
	for m, want := range map[string]string{"a": "a", "b": "b", "c": Other, "never": Other} {
		if got := r.Segment(t0, m, false); got != want {
			t.Errorf("Segment(%s) = %s, want %s", m, got, want)
		}
	}
	if got := newTest(2).Segment(t0, "x", false); got != Other {
		t.Errorf("a lookup without admission gave x %s, want %s", got, Other)
	}
}

// TestBusierNameTakesPlace: a name with evictFactor times the traffic of
// the weakest segment takes its place; one with less does not, so that
// equal models do not take turns.
func TestBusierNameTakesPlace(t *testing.T) {
	r := newTest(1)
	at := t0
	send := func(m string, n int) {
		for range n {
			at = at.Add(time.Millisecond)
			r.Of(at, m)
		}
	}
	send("a", 10)
	r.Rebalance(at)
	send("b", 15) // a scores 10 + its fleet count 10 = 20
	if ch := r.Rebalance(at); len(ch.Added) != 0 {
		t.Fatalf("b with 15 against a's 20 took a segment: %+v", ch)
	}
	send("b", 30) // 45: more than twice 20
	ch := r.Rebalance(at)
	if diff := cmp.Diff(Change{Added: []string{"b"}, Removed: []string{"a"}}, ch); diff != "" {
		t.Errorf("rebalance (-want +got):\n%s", diff)
	}
}

// TestPinnedNeverLeave: configured names keep their segment whatever the
// traffic, and count against the bound.
func TestPinnedNeverLeave(t *testing.T) {
	r := newTest(2)
	r.Pin("cfg", "cfg")
	at := t0
	for range 1000 {
		at = at.Add(time.Millisecond)
		r.Of(at, "hot")
	}
	r.Rebalance(at)
	for range 5000 {
		at = at.Add(time.Millisecond)
		r.Of(at, "hotter")
	}
	r.Rebalance(at.Add(time.Hour)) // everything decayed: no traffic lately
	if got := r.Active(); !slices.Contains(got, "cfg") || len(got) > 2 {
		t.Errorf("active %v, want cfg among at most 2", got)
	}
}

// TestFloodStaysBounded: 10,000 distinct names, each sent once amid a
// steady real model, leave the registry within its bound, and the real
// model has a segment.
func TestFloodStaysBounded(t *testing.T) {
	const max = 4
	r := newTest(max)
	at := t0
	for i := range 10000 {
		at = at.Add(time.Millisecond)
		r.Of(at, fmt.Sprintf("flood-%d", i))
		if i%5 == 0 {
			r.Of(at, "real")
		}
		if i%1000 == 999 {
			r.Rebalance(at)
		}
		if n := r.Tracked(); n > candidatesPerSegment*max {
			t.Fatalf("after %d names the registry counts %d, want at most %d", i+1, n, candidatesPerSegment*max)
		}
	}
	active := r.Active()
	if len(active) > max || !slices.Contains(active, "real") {
		t.Errorf("active %v, want at most %d with real", active, max)
	}
	var buckets int
	view, _ := r.fleet.View()
	for _, b := range view.All() {
		buckets++
		if n := len(b.Categories()); n > MaxNames(max) {
			t.Errorf("a fleet bucket holds %d names, want at most %d", n, MaxNames(max))
		}
	}
	if buckets == 0 {
		t.Error("the fleet series holds no bucket")
	}
}

// TestReplicasConverge: a name only another replica sees gets a segment
// here through the shared counts, so both keep (and merge) its windows.
func TestReplicasConverge(t *testing.T) {
	a, b := newTest(4), newTest(4)
	at := t0
	for range 50 {
		at = at.Add(10 * time.Millisecond)
		a.Of(at, "only-on-a")
	}
	a.Rebalance(at)
	for range 50 {
		at = at.Add(10 * time.Millisecond)
		a.Of(at, "only-on-a") // now counted under its segment's name
	}
	// What share.Sharer does: a's touched buckets go to b.
	var exported []window.Encoded
	a.Shared(func(name string, s window.Sharer) {
		enc, err := s.Export()
		if err != nil {
			t.Fatal(err)
		}
		exported = enc
	})
	b.Shared(func(name string, s window.Sharer) {
		for _, e := range exported {
			if err := s.Import("a", e); err != nil {
				t.Fatal(err)
			}
		}
	})
	if ch := b.Rebalance(at); !slices.Contains(ch.Added, "only-on-a") {
		t.Errorf("b's rebalance %+v, want only-on-a added", ch)
	}
}

// TestPromptHoldsItsSegment: a name that took a segment with its prompt
// keeps it through a rebalance before its answer is counted; a name idle
// for a half-life loses it.
func TestPromptHoldsItsSegment(t *testing.T) {
	r := newTest(4)
	if got := r.Segment(t0, "slow", true); got != "slow" {
		t.Fatalf("the prompt of slow went to %s, want its own segment", got)
	}
	if ch := r.Rebalance(t0.Add(time.Second)); len(ch.Removed) > 0 {
		t.Errorf("a rebalance before the answer removed %v", ch.Removed)
	}
	if ch := r.Rebalance(t0.Add(time.Minute + time.Second)); !slices.Equal(ch.Removed, []string{"slow"}) {
		t.Errorf("a half-life later, idle: rebalance %+v, want slow removed", ch)
	}
}

// TestUnnamedIsOther: a request that names no model counts in Other even
// while segments are free, and "" never becomes a segment, however busy.
func TestUnnamedIsOther(t *testing.T) {
	r := newTest(2)
	for i := range 100 {
		if got := r.Of(t0.Add(time.Duration(i)*time.Millisecond), ""); got != Other {
			t.Fatalf("request %d without a model went to %q, want %s", i, got, Other)
		}
	}
	if got := r.Segment(t0, "", true); got != Other {
		t.Errorf("Segment(\"\") = %q, want %s", got, Other)
	}
	r.Rebalance(t0.Add(time.Second))
	if got := r.Active(); len(got) != 0 {
		t.Errorf("active segments %q after unnamed requests, want none", got)
	}
}
