package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Attempts the gateway cancels itself, so that a faulty backend cannot hold
// a request without bound. Two faults would
// otherwise hold a request for as long as the backend cares to:
//
//   - A backend that hangs before its response headers: requests already
//     waiting on it would wait for limits.upstream_timeout even after the
//     health check (or passive ejection) marked it down. Such an attempt is
//     cancelled when its backend is marked down, if another backend can take
//     the request, and retried there like a refused connection.
//   - A response body that stops coming (a stream stalled after its
//     headers): the attempt is cancelled once a body read has waited
//     limits.stream_idle_timeout on the backend. The stream ends with an
//     error event (tap.go) and the backend gets a failure for passive
//     ejection. Time spent waiting on a slow client does not count.
//
// Both cancel the attempt's own context, with a cause that the error
// handler and the tap tell apart from a client that went away. The
// attempts in flight are kept in one intrusive list per backend, so that
// watching them costs no allocation: the health check's OnChange and
// passive ejection walk a backend's list; one goroutine (sweepIdle) walks
// them all a few times per stream_idle_timeout.

// Causes of an attempt cancelled by the gateway.
var (
	errBackendDown = errors.New("the backend was marked down before it answered")
	errStreamIdle  = errors.New("the backend sent nothing for limits.stream_idle_timeout")
)

// retryDown is the retry reason of an attempt cancelled by errBackendDown.
const retryDown = "backend_down"

// States of an attempt's response headers, for attemptCtl.state.
const (
	ctlWaiting  = iota // no headers yet
	ctlAnswered        // headers arrived: no longer moved off a backend going down
	ctlDown            // cancelled: the backend was marked down
)

// attemptCtl is one attempt as the watchers see it. The request's
// goroutine sets it up before it is listed and takes it off the list when
// the attempt ends; the watchers touch only the atomics and cancel, under
// the list's lock.
type attemptCtl struct {
	cancel context.CancelCauseFunc
	state  atomic.Int32
	// For the backend-down watch: the request may go on (a retry is left)
	// to a backend that serves model on a route of kinds, other than
	// tried and the attempt's own backend.
	retry   bool
	backend *upstream.Backend
	model   string
	kinds   []string
	tried   []*upstream.Backend
	// idleFor is limits.stream_idle_timeout when the idle watch is on.
	// reads counts the tap's body reads begun and ended (odd: a read is
	// waiting on the backend), so that the tap reads no clock for it;
	// sweepIdle notes when it first saw the current odd value (seen,
	// seenAt: the sweeper's own, under the list's lock).
	idleFor time.Duration
	reads   atomic.Uint64
	seen    uint64
	seenAt  time.Time
	idled   atomic.Bool // cancelled by errStreamIdle

	list       *attemptList // nil: not listed
	prev, next *attemptCtl
}

// attemptList is the attempts in flight on one backend: a circular list
// through a sentinel.
type attemptList struct {
	mu   sync.Mutex
	head attemptCtl
}

func newAttemptLists(pool *upstream.Pool) map[*upstream.Backend]*attemptList {
	m := make(map[*upstream.Backend]*attemptList, len(pool.Backends()))
	for _, b := range pool.Backends() {
		l := &attemptList{}
		l.head.prev, l.head.next = &l.head, &l.head
		m[b] = l
	}
	return m
}

// startAttempt gives the attempt on x.backend its context, derived from
// ctx, and lists it for the watchers that apply: the backend-down watch
// when the request has a retry left, the idle watch when
// limits.stream_idle_timeout is on.
func (s *Server) startAttempt(ctx context.Context, x *call, c *attemptCtl) context.Context {
	*c = attemptCtl{}
	ctx, c.cancel = context.WithCancelCause(ctx)
	c.retry = x.retry.attempts < min(s.cfg.Retries.Attempts, maxAttempts)
	if !c.retry && s.cfg.Limits.StreamIdleTimeout <= 0 {
		return ctx
	}
	b := x.backend
	l := s.attemptLists[b]
	if l == nil {
		return ctx // a backend not in the pool (tests)
	}
	c.backend, c.model, c.kinds, c.tried = b, x.req.Model, x.kinds, slices.Clip(x.retry.tried)
	c.idleFor = s.cfg.Limits.StreamIdleTimeout
	l.mu.Lock()
	c.list, c.prev, c.next = l, l.head.prev, &l.head
	l.head.prev.next = c
	l.head.prev = c
	if c.retry && !b.Healthy() { // marked down between the pick and now
		s.moveOff(c)
	}
	l.mu.Unlock()
	return ctx
}

// backendDown moves the attempts waiting on b, which was just marked down,
// to other backends.
func (s *Server) backendDown(b *upstream.Backend) {
	l := s.attemptLists[b]
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := l.head.next; c != &l.head; c = c.next {
		if c.retry {
			s.moveOff(c)
		}
	}
}

// moveOff cancels an attempt that has no headers yet, if another backend
// can take its request (with none, the backend may still answer: it is
// left waiting). The caller holds the attempt's list lock.
func (s *Server) moveOff(c *attemptCtl) {
	if c.state.Load() != ctlWaiting {
		return
	}
	if _, err := s.balancer.Pick(c.model, c.kinds, append(c.tried, c.backend)...); err != nil {
		return
	}
	if c.state.CompareAndSwap(ctlWaiting, ctlDown) {
		c.cancel(errBackendDown)
	}
}

// answered records that the attempt's response headers arrived. It
// reports false when the attempt was cancelled first because its backend
// went down: the response is then discarded and the request goes on.
func (c *attemptCtl) answered() bool {
	if c == nil {
		return true
	}
	return c.state.CompareAndSwap(ctlWaiting, ctlAnswered) || c.state.Load() == ctlAnswered
}

// cancelledDown reports whether the attempt was cancelled because its
// backend went down.
func (c *attemptCtl) cancelledDown() bool { return c != nil && c.state.Load() == ctlDown }

// end takes the attempt off its list and releases its context.
func (c *attemptCtl) end() {
	if l := c.list; l != nil {
		l.mu.Lock()
		c.prev.next, c.next.prev = c.next, c.prev
		c.prev, c.next, c.list = nil, nil, nil
		l.mu.Unlock()
	}
	c.cancel(nil)
}

// sweepIdle cancels, every idle/8 (at most every second), the attempts
// whose current body read has waited idle (from when a sweep first saw
// it: between idle and idle plus one tick), until ctx is done.
func (s *Server) sweepIdle(ctx context.Context, idle time.Duration) error {
	t := time.NewTicker(min(max(idle/8, time.Millisecond), time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			for _, l := range s.attemptLists {
				l.mu.Lock()
				for c := l.head.next; c != &l.head; c = c.next {
					switch r := c.reads.Load(); {
					case r%2 == 0 || r != c.seen:
						c.seen, c.seenAt = r, now // not in a read, or in a new one
					case now.Sub(c.seenAt) >= idle && !c.idled.Load():
						c.idled.Store(true)
						c.cancel(errStreamIdle)
					}
				}
				l.mu.Unlock()
			}
		}
	}
}
