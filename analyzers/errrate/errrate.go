// Package errrate counts requests and failed requests by key (a backend,
// or a model's segment) in time buckets shared across replicas: the error
// rates and the SLO burn rates alert on them.
package errrate

import (
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// Rates counts requests and failed requests by key in time buckets,
// shared across replicas like the signals' windows, so that the error
// rates the sending replica alerts on are the whole deployment's, not its
// own share of the traffic. A key is a backend's name (or "" for the
// requests the gateway answered itself), or a model's segment;
// window.Counts bounds them.
type Rates struct {
	mu            sync.Mutex
	total, failed *window.Shared[window.Counts, *window.Counts]
	ttl           time.Duration // of the shared snapshots: the span, and ten minutes more
	name          string        // of the shared series, before "/total" and "/failed"
}

// New keeps span of buckets of the given width, and the bucket
// in progress: the longest window asked of Since.
func New(bucket, span time.Duration) *Rates {
	return NewNamed("errors", bucket, span, 0)
}

// NewNamed is New for rates shared as the series name+"/total" and
// name+"/failed", keeping at most maxKeys keys per bucket (zero or less:
// window.DefaultMaxCategories).
func NewNamed(name string, bucket, span time.Duration, maxKeys int) *Rates {
	n := int(span/bucket) + 4
	var newCounts func() *window.Counts
	if maxKeys > 0 {
		newCounts = func() *window.Counts { return window.NewCounts(maxKeys) }
	}
	return &Rates{
		total:  window.NewShared[window.Counts](bucket, n, newCounts),
		failed: window.NewShared[window.Counts](bucket, n, newCounts),
		ttl:    time.Duration(n)*bucket + 10*time.Minute,
		name:   name,
	}
}

// Sharing keeps the snapshots as long as the longest burn-rate window
// reads them (the sharer's default ttl is shorter than 6 h), read every
// flush.
func (e *Rates) Sharing(string) (ttl time.Duration, readEvery int) { return e.ttl, 1 }

// Add counts one response of key that ended at t.
func (e *Rates) Add(t time.Time, key string, failed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.total.Bucket(t); b != nil {
		b.Add(key)
	}
	if failed {
		if b := e.failed.Bucket(t); b != nil {
			b.Add(key)
		}
	}
}

// Shared hands the series to the replica flusher, under the lock.
func (e *Rates) Shared(f func(name string, s window.Sharer)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f(e.name+"/total", e.total)
	f(e.name+"/failed", e.failed)
}

// Since returns, per key, the requests and failed requests of the buckets
// overlapping [from, to), every replica's.
func (e *Rates) Since(from, to time.Time) map[string][2]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][2]int64{}
	tv, _ := e.total.View()
	fv, _ := e.failed.View()
	total, _ := tv.Range(from, to)
	failed, _ := fv.Range(from, to)
	for _, b := range total.Categories() {
		out[b] = [2]int64{total.Get(b), failed.Get(b)}
	}
	return out
}

// Sum returns the requests and failed requests of every key in the
// buckets overlapping [from, to).
func (e *Rates) Sum(from, to time.Time) (total, failed int64) {
	for _, c := range e.Since(from, to) {
		total, failed = total+c[0], failed+c[1]
	}
	return total, failed
}
