package analyzers

import (
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// errorRates counts requests and failed requests by key in time buckets,
// shared across replicas like the signals' windows, so that the error
// rates the sending replica alerts on are the whole deployment's, not its
// own share of the traffic. A key is a backend's name, or for a request
// the gateway answered itself modelKey(model) (a configured model) or ""
// (any other); window.Counts bounds them.
type errorRates struct {
	mu            sync.Mutex
	total, failed *window.Shared[window.Counts, *window.Counts]
	ttl           time.Duration // of the shared snapshots: the span, and ten minutes more
}

// modelKeyPrefix starts the key of the requests of a model that no backend
// answered; backend names cannot hold ':'.
const modelKeyPrefix = "model:"

func modelKey(model string) string { return modelKeyPrefix + model }

// newErrorRates keeps span of buckets of the given width, and the bucket
// in progress: the longest window asked of since.
func newErrorRates(bucket, span time.Duration) *errorRates {
	n := int(span/bucket) + 4
	return &errorRates{
		total:  window.NewShared[window.Counts](bucket, n, nil),
		failed: window.NewShared[window.Counts](bucket, n, nil),
		ttl:    time.Duration(n)*bucket + 10*time.Minute,
	}
}

var _ sharePolicy = (*errorRates)(nil)

// sharing keeps the snapshots as long as the longest burn-rate window
// reads them (the sharer's default ttl is shorter than 6 h), read every
// flush.
func (e *errorRates) sharing(string) (ttl time.Duration, readEvery int) { return e.ttl, 1 }

// add counts one response of key that ended at t.
func (e *errorRates) add(t time.Time, key string, failed bool) {
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
func (e *errorRates) Shared(f func(name string, s window.Sharer)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f("errors/total", e.total)
	f("errors/failed", e.failed)
}

// since returns, per key, the requests and failed requests of the buckets
// overlapping [from, to), every replica's.
func (e *errorRates) since(from, to time.Time) map[string][2]int64 {
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

// sum returns the requests and failed requests of every key in the
// buckets overlapping [from, to).
func (e *errorRates) sum(from, to time.Time) (total, failed int64) {
	for _, c := range e.since(from, to) {
		total, failed = total+c[0], failed+c[1]
	}
	return total, failed
}
