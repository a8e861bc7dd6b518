package analyzers

import (
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// errorRates counts requests and failed requests by backend in time
// buckets, shared across replicas like the signals' windows, so that the
// error rates the sending replica alerts on are the whole deployment's,
// not its own share of the traffic. Backend names are bounded by
// window.Counts (the configured backends; "" for requests no backend
// answered).
type errorRates struct {
	mu            sync.Mutex
	total, failed *window.Shared[window.Counts, *window.Counts]
}

func newErrorRates(bucket, period time.Duration) *errorRates {
	span := int(period/bucket) + 4 // a period and the bucket in progress
	return &errorRates{
		total:  window.NewShared[window.Counts](bucket, span, nil),
		failed: window.NewShared[window.Counts](bucket, span, nil),
	}
}

// add counts one response of backend that ended at t.
func (e *errorRates) add(t time.Time, backend string, failed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if b := e.total.Bucket(t); b != nil {
		b.Add(backend)
	}
	if failed {
		if b := e.failed.Bucket(t); b != nil {
			b.Add(backend)
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

// since returns, per backend, the requests and failed requests of the
// buckets overlapping [from, to), every replica's.
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
