package gateway

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Attempts the gateway cancels itself (issue 18). Two faults would
// otherwise hold a request for as long as the backend cares to:
//
//   - A backend that hangs before its response headers: requests already
//     waiting on it would wait for limits.upstream_timeout even after the
//     health check (or passive ejection) marked it down. Such an attempt is
//     cancelled when its backend is marked down, if another backend can take
//     the request, and retried there like a refused connection.
//   - A response body that stops coming (a stream stalled after its
//     headers): the attempt is cancelled after limits.stream_idle_timeout
//     without a byte while the gateway waits on the backend. The stream
//     ends with an error event (tap.go) and the backend gets a failure for
//     passive ejection.
//
// Both cancel the attempt's own context, with a cause that the error
// handler and the tap tell apart from a client that went away.

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
	ctlAnswered        // headers arrived: no longer cancelled for its backend going down
	ctlDown            // cancelled: the backend was marked down
)

// attemptCtl holds what cancels one attempt from outside the request's
// goroutine. The request's goroutine owns it; the callbacks touch only the
// atomics, the cancel function and, under mu, the timer.
type attemptCtl struct {
	cancel   context.CancelCauseFunc
	state    atomic.Int32
	stopDown func() bool // stops the watch of the backend's Down context; nil: none

	// The idle watch of the response body. waiting is when the current
	// body read began (unix ns), or -1 between reads: while the client
	// is slow to take what was read, the backend is not idle.
	idleFor time.Duration
	waiting atomic.Int64
	idled   atomic.Bool // the attempt was cancelled by errStreamIdle
	mu      sync.Mutex
	idle    *time.Timer
	ended   bool
}

// startAttempt gives the attempt on x.backend its context, derived from
// ctx, and arms the backend-down watch when the request has a retry left.
func (s *Server) startAttempt(ctx context.Context, x *call) context.Context {
	c := &attemptCtl{idleFor: s.cfg.Limits.StreamIdleTimeout}
	c.waiting.Store(-1)
	ctx, c.cancel = context.WithCancelCause(ctx)
	x.ctl = c
	if x.attempts >= min(s.cfg.Retries.Attempts, maxAttempts) {
		return ctx
	}
	// What the callback needs, copied: it runs on the goroutine that marks
	// the backend down. x.tried only grows past this length meanwhile.
	b, model, kinds, tried := x.backend, x.req.Model, x.kinds, slices.Clip(x.tried)
	down := func() {
		if c.state.Load() != ctlWaiting {
			return
		}
		if _, err := s.balancer.Pick(model, kinds, append(tried, b)...); err != nil {
			return // nowhere else to go: the backend may still answer
		}
		if c.state.CompareAndSwap(ctlWaiting, ctlDown) {
			c.cancel(errBackendDown)
		}
	}
	c.stopDown = context.AfterFunc(b.Down(), down)
	if !b.Healthy() { // marked down between the pick and the watch
		down()
	}
	return ctx
}

// answered records that the attempt's response headers arrived. It
// reports false when the attempt was cancelled first because its backend
// went down: the response is then discarded and the request goes on.
func (c *attemptCtl) answered() bool {
	if c == nil {
		return true
	}
	if c.stopDown != nil {
		c.stopDown()
	}
	return c.state.CompareAndSwap(ctlWaiting, ctlAnswered) || c.state.Load() == ctlAnswered
}

// cancelledDown reports whether the attempt was cancelled because its
// backend went down.
func (c *attemptCtl) cancelledDown() bool { return c != nil && c.state.Load() == ctlDown }

// watchIdle arms the idle watch of the response body; the tap brackets its
// reads with reading and read.
func (c *attemptCtl) watchIdle() {
	if c == nil || c.idleFor <= 0 {
		return
	}
	c.mu.Lock()
	if !c.ended {
		c.idle = time.AfterFunc(c.idleFor, c.checkIdle)
	}
	c.mu.Unlock()
}

func (c *attemptCtl) reading(now time.Time) { c.waiting.Store(now.UnixNano()) }
func (c *attemptCtl) read()                 { c.waiting.Store(-1) }

// checkIdle cancels the attempt if its current body read has waited
// idleFor, and otherwise arms the timer for the rest of that time.
func (c *attemptCtl) checkIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return
	}
	next := c.idleFor
	if since := c.waiting.Load(); since >= 0 {
		waited := time.Duration(time.Now().UnixNano() - since)
		if waited >= c.idleFor {
			c.idled.Store(true)
			c.cancel(errStreamIdle)
			return
		}
		next = c.idleFor - waited
	}
	c.idle.Reset(next)
}

// end releases the attempt's watches and context once it is over.
func (c *attemptCtl) end() {
	if c.stopDown != nil {
		c.stopDown()
	}
	c.mu.Lock()
	c.ended = true
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
	c.cancel(nil)
}
