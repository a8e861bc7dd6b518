// Package segment decides which models get a segment of their own: the
// signals are kept per model, besides fleet-wide, and the number of
// models so kept is bounded whatever names clients send.
//
// A Registry counts requests by model name and gives a segment to the
// most active names, at most Max of them; every other name falls into the
// segment Other. The counts decay by half every half-life, so that "most
// active" means lately. Names compete in a table of a few times Max
// entries (the Space-Saving rule: a new name takes the place of the least
// counted one), so that 10,000 distinct names cost what 4·Max do.
//
// Replicas agree on the segments through a shared series of their
// segments' request counts (Shared): a name another replica gives a
// segment counts here too, so every replica ranks by the fleet's traffic
// and a replica that has not seen a model yet still keeps (and merges)
// its windows.
package segment

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// Other is the segment of the models without one of their own, and of
// the requests that name no model (TGI's native API, a completion whose
// body leaves it out): a name of its own for them would be a segment
// that mixes whatever models the backends serve.
const Other = "other"

// candidatesPerSegment sizes the table of counted names.
const candidatesPerSegment = 4

// evictFactor is how many times more traffic a name needs than the least
// active segment's to take its place: hysteresis, so that two models of
// equal traffic do not take turns, each time starting their windows anew.
const evictFactor = 2

// MaxNames bounds the segment names that one bucket of counts by segment
// needs room for: a bucket spans changes of segments, and replicas
// disagree for a while on which names have one.
func MaxNames(max int) int { return candidatesPerSegment * (max + 1) }

// A Registry maps model names to segments. It is safe for concurrent use.
type Registry struct {
	max      int
	halfLife time.Duration
	span     time.Duration // of the fleet counts ranked

	mu     sync.Mutex
	counts map[string]entry // decayed local requests, at most 4·max names
	active map[string]bool  // names with a segment of their own
	pinned map[string]bool  // active names that never lose their segment (Pin)
	// since is when each active name took its segment: a name is not
	// idle before a half-life has passed (its first prompt may come
	// long before its first answer is counted).
	since map[string]time.Time
	fleet *window.Shared[window.Counts, *window.Counts]
	decay time.Time // when the counts were last halved
}

// New returns a registry of at most max segments (besides Other) whose
// counts halve every halfLife; the fleet's counts are kept in buckets of
// width over span.
func New(max int, halfLife, width, span time.Duration) *Registry {
	n := int(span/width) + 2
	return &Registry{
		max: max, halfLife: halfLife, span: span,
		counts: map[string]entry{}, active: map[string]bool{}, pinned: map[string]bool{}, since: map[string]time.Time{},
		fleet: window.NewShared[window.Counts](width, n, func() *window.Counts {
			// Replicas agree on at most max names; room for some
			// disagreement while they converge.
			return window.NewCounts(MaxNames(max))
		}),
	}
}

// Pin gives names a segment each for good (the models the configuration
// lists: known names, whose first requests must not go to Other), within
// the bound: beyond max names, the first in sorted order.
func (r *Registry) Pin(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names = slices.Clone(names)
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		if len(r.active) >= r.max || n == Other {
			break
		}
		r.active[n], r.pinned[n] = true, true
	}
}

// Of counts one request of model at t and returns its segment: model
// itself when it has one (a new name takes a free segment at once), else
// Other.
func (r *Registry) Of(t time.Time, model string) string {
	if model == "" {
		model = Other
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count(model, 1)
	seg := r.segment(t, model, true)
	if b := r.fleet.Bucket(t); b != nil {
		b.Add(seg)
	}
	return seg
}

// Segment returns model's segment without counting a request; when admit,
// a new name takes a free segment at t, as in Of.
func (r *Registry) Segment(t time.Time, model string, admit bool) string {
	if model == "" {
		return Other
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.segment(t, model, admit)
}

// segment is Segment. Callers hold r.mu.
func (r *Registry) segment(t time.Time, model string, admit bool) string {
	if r.active[model] {
		return model
	}
	if admit && model != Other && len(r.active) < r.max {
		r.active[model], r.since[model] = true, t
		return model
	}
	return Other
}

// count adds n to name's count, making room by the Space-Saving rule: a
// new name replaces the least counted name without a segment and
// inherits its count, an overestimate that lets a real newcomer climb
// past the names a flood of one-off names leaves behind. Callers hold
// r.mu.
func (r *Registry) count(name string, n float64) {
	if e, ok := r.counts[name]; ok || len(r.counts) < candidatesPerSegment*r.max {
		e.n += n
		r.counts[name] = e
		return
	}
	victim, least := "", 0.0
	for k, e := range r.counts {
		if r.active[k] {
			continue
		}
		if victim == "" || e.n < least || e.n == least && k < victim {
			victim, least = k, e.n
		}
	}
	if victim == "" {
		return
	}
	delete(r.counts, victim)
	r.counts[name] = entry{n: least + n, err: least}
}

// entry is a name's count in the Space-Saving table: n counted, of which
// up to err inherited from the name it replaced. n − err is what the name
// surely had: the rankings use it, so that a flood of one-off names, each
// inheriting the flood's count, never looks busier than a real model.
type entry struct{ n, err float64 }

// Change is what a Rebalance did.
type Change struct {
	Added, Removed []string
}

// Rebalance updates the segments as of now: the counts decay, the
// fleet's counts of the segments other replicas keep are added, and the
// most active names take the free segments, or the place of a segment
// with evictFactor times less traffic. It returns the names that gained
// and lost a segment, sorted.
func (r *Registry) Rebalance(now time.Time) Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.decay.IsZero() {
		r.decay = now
	}
	for now.Sub(r.decay) >= r.halfLife {
		r.decay = r.decay.Add(r.halfLife)
		for k, e := range r.counts {
			if e.n /= 2; e.n < 0.01 && !r.active[k] {
				delete(r.counts, k)
			} else {
				e.err /= 2
				r.counts[k] = e
			}
		}
	}
	score := map[string]float64{}
	for k, e := range r.counts {
		score[k] = e.n - e.err
	}
	view, _ := r.fleet.View()
	fleet, _ := view.Range(now.Add(-r.span), now.Add(time.Nanosecond))
	for _, k := range fleet.Categories() {
		if k != Other {
			score[k] += float64(fleet.Get(k))
		}
	}
	var ch Change
	// Segments without traffic for the whole span, here or elsewhere, end.
	for k := range r.active {
		if score[k] < 0.01 && !r.pinned[k] && now.Sub(r.since[k]) >= r.halfLife {
			delete(r.active, k)
			delete(r.since, k)
			ch.Removed = append(ch.Removed, k)
		}
	}
	cands := make([]string, 0, len(score))
	for k, v := range score {
		if !r.active[k] && k != Other && v >= 1 {
			cands = append(cands, k)
		}
	}
	byScore := func(a, b string) int {
		if c := cmp.Compare(score[b], score[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	}
	slices.SortFunc(cands, byScore)
	for _, k := range cands {
		if len(r.active) < r.max {
			r.active[k], r.since[k] = true, now
			ch.Added = append(ch.Added, k)
			continue
		}
		weakest := ""
		for a := range r.active {
			if !r.pinned[a] && (weakest == "" || byScore(a, weakest) > 0) {
				weakest = a
			}
		}
		if weakest == "" || score[k] < evictFactor*score[weakest] {
			break // the rest score lower still
		}
		delete(r.active, weakest)
		delete(r.since, weakest)
		ch.Removed = append(ch.Removed, weakest)
		r.active[k], r.since[k] = true, now
		ch.Added = append(ch.Added, k)
	}
	slices.Sort(ch.Added)
	slices.Sort(ch.Removed)
	return ch
}

// Active returns the names with a segment of their own, sorted.
func (r *Registry) Active() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.active))
	for k := range r.active {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Tracked returns how many names the registry counts: at most
// 4·max, whatever the names sent.
func (r *Registry) Tracked() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

// Shared hands the fleet's segment counts to the replica flusher.
func (r *Registry) Shared(f func(name string, s window.Sharer)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f("segments", r.fleet)
}
