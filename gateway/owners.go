package gateway

import (
	"container/list"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// owners remembers which backend made each Responses API response (and
// which holds each conversation): vLLM keeps a stored response in the
// memory of the instance that made it, so a follow-up answered by another
// instance would be a 404 there. The map is a bounded LRU with a TTL in
// process, written through to the shared store off the request path, so
// that another replica finds the owner of a response it did not see made.
// Safe for concurrent use.
type owners struct {
	ttl     time.Duration
	max     int
	timeout time.Duration
	store   state.Store // nil: this process only
	log     *slog.Logger

	mu    sync.Mutex
	items map[string]*list.Element
	order list.List // front: most recently used; values *ownerEntry

	// writes bounds the store writes in flight: a slow store loses
	// writes (the owner stays known here) rather than piling up
	// goroutines.
	writes chan struct{}
}

type ownerEntry struct {
	key, backend string
	expires      time.Time
}

// maxOwnerWrites bounds the shared store writes in flight.
const maxOwnerWrites = 64

func newOwners(c config.Responses, store state.Store, log *slog.Logger) *owners {
	return &owners{
		ttl: c.OwnerTTL, max: c.MaxOwners, timeout: c.LookupTimeout, store: store, log: log,
		items: make(map[string]*list.Element), writes: make(chan struct{}, maxOwnerWrites),
	}
}

// responseKey and conversationKey are the keys of a response's and a
// conversation's owner, here and in the shared store.
func responseKey(id string) string     { return "responses:owner:" + id }
func conversationKey(id string) string { return "responses:conversation:" + id }

// record remembers backend as the owner of key, here at once and in the
// shared store in the background.
func (o *owners) record(key, backend string) {
	o.put(key, backend, time.Now().Add(o.ttl))
	if o.store == nil {
		return
	}
	select {
	case o.writes <- struct{}{}:
	default:
		o.log.Debug("response owner not shared: too many store writes in flight", "key", key)
		return
	}
	go func() {
		defer func() { <-o.writes }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.store.Set(ctx, key, []byte(backend), o.ttl); err != nil {
			// Debug: during a Redis outage every response would log;
			// the store logs its own failures, rate-limited.
			o.log.Debug("response owner not shared", "key", key, "err", err)
		}
	}()
}

func (o *owners) put(key, backend string, expires time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if e, ok := o.items[key]; ok {
		oe := e.Value.(*ownerEntry)
		oe.backend, oe.expires = backend, expires
		o.order.MoveToFront(e)
		return
	}
	o.items[key] = o.order.PushFront(&ownerEntry{key: key, backend: backend, expires: expires})
	for o.order.Len() > o.max {
		last := o.order.Back()
		o.order.Remove(last)
		delete(o.items, last.Value.(*ownerEntry).key)
	}
}

// lookup returns the owner of key: from this process's map, else from the
// shared store within the lookup timeout. ok is false when no owner is
// known; err is set when the store could not tell.
func (o *owners) lookup(ctx context.Context, key string) (backend string, ok bool, err error) {
	now := time.Now()
	o.mu.Lock()
	if e, found := o.items[key]; found {
		oe := e.Value.(*ownerEntry)
		if now.Before(oe.expires) {
			o.order.MoveToFront(e)
			o.mu.Unlock()
			return oe.backend, true, nil
		}
		o.order.Remove(e)
		delete(o.items, key)
	}
	o.mu.Unlock()
	if o.store == nil {
		return "", false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	v, err := o.store.Get(ctx, key)
	switch {
	case errors.Is(err, state.ErrNotFound):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	// The store's TTL runs from the write; here it restarts, a bound
	// rather than the exact expiry.
	o.put(key, string(v), now.Add(o.ttl))
	return string(v), true, nil
}
