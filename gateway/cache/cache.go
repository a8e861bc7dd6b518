// Package cache keeps whole responses of deterministic requests (cache.*
// in the configuration) in the shared state store or in process, and
// serves them again; identical misses in flight cause one upstream call.
package cache

import (
	"bytes"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/state"
)

// store is where cached responses live: the shared state store, or a
// bounded in-process map. Both are safe for concurrent use.
type store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// Cache caches whole responses of deterministic requests. Identical
// misses arriving together cause one upstream call: a singleflight within
// the process (Do) and, with a shared store, a short lease across replicas
// (AwaitOther). It is safe for concurrent use.
type Cache struct {
	cfg     config.Cache
	store   store
	leases  leaser // nil without a shared store
	replica string
	group   singleflight.Group
}

// leaser is the lease part of state.Store.
type leaser interface {
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
}

// Response is what the cache keeps of a response.
type Response struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type"`
	Body        []byte `json:"body"`
}

// New is a cache with cfg in shared, leased by replica; in a bounded
// in-process store when shared is nil.
func New(cfg config.Cache, shared state.Store, replica string) *Cache {
	c := &Cache{cfg: cfg, replica: replica}
	if shared != nil {
		c.store, c.leases = shared, shared
	} else {
		c.store = newLocal(cfg.MaxEntries)
	}
	return c
}

// Key returns the cache key of a deterministic request: a hash of the
// operation and the body re-encoded with sorted keys and no spaces (so that
// formatting does not matter), or false when the request is not
// deterministic (sampling at a temperature above 0 without a seed).
func (c *Cache) Key(op exchange.Operation, f *request.Fields, body []byte) (string, bool) {
	switch op {
	case exchange.OpEmbeddings:
	case exchange.OpChat, exchange.OpCompletion:
		t, ok := f.Temperature.Get()
		deterministic := (ok && t == 0) || f.Seed.Present()
		if !deterministic {
			return "", false
		}
	default:
		return "", false
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return "", false
	}
	norm, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return "", false
	}
	h := sha256.New()
	h.Write([]byte(op))
	h.Write([]byte{0})
	h.Write(norm)
	return "cache:" + hex.EncodeToString(h.Sum(nil)), true
}

// Get returns the response cached under key; nil on a miss, or when the
// store fails.
func (c *Cache) Get(ctx context.Context, key string) *Response {
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	b, err := c.store.Get(ctx, key)
	if err != nil {
		return nil // missing, or the store is down: a miss either way
	}
	var cr Response
	if json.Unmarshal(b, &cr) != nil {
		return nil
	}
	return &cr
}

// Put caches cr under key for cache.ttl, jittered; a failure is a later
// miss.
func (c *Cache) Put(ctx context.Context, key string, cr *Response) {
	b, err := json.Marshal(cr)
	if err != nil {
		return
	}
	ttl := time.Duration(float64(c.cfg.TTL) * (1 + c.cfg.Jitter*(2*rand.Float64()-1)))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	c.store.Set(ctx, key, b, ttl)
}

// AwaitOther, when another replica holds the fetch lease of key, polls the
// cache for its result until the lease time is up.
func (c *Cache) AwaitOther(ctx context.Context, key string) *Response {
	if c.leases == nil {
		return nil
	}
	lctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	mine, err := c.leases.Acquire(lctx, "fetch-"+key, c.replica, c.cfg.LockTTL)
	cancel()
	if err != nil || mine {
		return nil
	}
	deadline := time.Now().Add(c.cfg.LockTTL)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if cr := c.Get(ctx, key); cr != nil {
			return cr
		}
		time.Sleep(25 * time.Millisecond)
	}
	return nil
}

// Do runs fn once for all the callers with the same key in flight, and
// gives each fn's result; shared says whether it went to more than one.
func (c *Cache) Do(key string, fn func() (any, error)) (v any, err error, shared bool) {
	return c.group.Do(key, fn)
}

// Capture returns w passing a response through and keeping a copy of it,
// up to cache.max_body_bytes, for Put.
func (c *Cache) Capture(w http.ResponseWriter) *CaptureWriter {
	return &CaptureWriter{ResponseWriter: w, limit: c.cfg.MaxBodyBytes}
}

// Serve writes a cached response: JSON as it was, SSE event by event
// with a flush after each, as a stream is.
func Serve(w http.ResponseWriter, cr *Response) {
	h := w.Header()
	h.Set("Content-Type", cr.ContentType)
	h.Set("X-Vigil-Cache", "hit")
	w.WriteHeader(cr.Status)
	if !strings.HasPrefix(cr.ContentType, "text/event-stream") {
		w.Write(cr.Body)
		return
	}
	rc := http.NewResponseController(w)
	for rest := cr.Body; len(rest) > 0; {
		i := bytes.Index(rest, []byte("\n\n"))
		n := len(rest)
		if i >= 0 {
			n = i + 2
		}
		w.Write(rest[:n])
		rc.Flush()
		rest = rest[n:]
	}
}

// CaptureWriter passes a response through and keeps a copy, up to limit,
// for the cache. Flush and Unwrap keep streaming working.
type CaptureWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
	limit  int
	over   bool
}

// WriteHeader records the first status and passes code on.
func (c *CaptureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

// Write passes p on and keeps a copy while the limit allows.
func (c *CaptureWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if !c.over {
		if c.buf.Len()+len(p) > c.limit {
			c.over = true
			c.buf = bytes.Buffer{}
		} else {
			c.buf.Write(p)
		}
	}
	return c.ResponseWriter.Write(p)
}

// Flush flushes the underlying writer.
func (c *CaptureWriter) Flush() { http.NewResponseController(c.ResponseWriter).Flush() }

// Unwrap returns the underlying writer, for http.ResponseController.
func (c *CaptureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Result is the response to cache, or nil when it should not be (not a
// 200 from a backend, too large, or broken). upstreamOK says that the
// backend answered 200 and its answer was read whole without a
// gateway-made error.
func (c *CaptureWriter) Result(upstreamOK bool) *Response {
	if c.status != http.StatusOK || c.over || !upstreamOK {
		return nil
	}
	return &Response{Status: c.status, ContentType: c.Header().Get("Content-Type"), Body: bytes.Clone(c.buf.Bytes())}
}

// local is a bounded in-process store: least recently used
// entries go first; expired ones on access.
type local struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front: most recent
	items map[string]*list.Element
}

type localEntry struct {
	key     string
	value   []byte
	expires time.Time
}

func newLocal(max int) *local {
	return &local{max: max, ll: list.New(), items: map[string]*list.Element{}}
}

func (l *local) Get(_ context.Context, key string) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.items[key]
	if !ok {
		return nil, state.ErrNotFound
	}
	ent := e.Value.(*localEntry)
	if time.Now().After(ent.expires) {
		l.ll.Remove(e)
		delete(l.items, key)
		return nil, state.ErrNotFound
	}
	l.ll.MoveToFront(e)
	return ent.value, nil
}

func (l *local) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.items[key]; ok {
		ent := e.Value.(*localEntry)
		ent.value, ent.expires = value, time.Now().Add(ttl)
		l.ll.MoveToFront(e)
		return nil
	}
	l.items[key] = l.ll.PushFront(&localEntry{key: key, value: value, expires: time.Now().Add(ttl)})
	for l.ll.Len() > l.max {
		last := l.ll.Back()
		l.ll.Remove(last)
		delete(l.items, last.Value.(*localEntry).key)
	}
	return nil
}
