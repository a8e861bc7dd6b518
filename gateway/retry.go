package gateway

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Retries. An attempt that fails before anything reached the client — a
// transport error before the response (refused or reset connection, closed
// keep-alive; not a timeout, which may leave the generation running, and
// not a client that went away) or a 5xx answer, whose body is discarded
// unread — is retried on another backend chosen by the balancer, never one
// already tried, up to retries.attempts tries in all. The request body is
// replayed from the bytes the gateway already holds; a streamed upload
// (passthrough.go), which it does not hold, is retried only while no byte
// of it was read (in practice: the backend could not be reached). The
// last attempt, or one with no other healthy backend left, answers as it
// would without retries: the backend's 5xx passes through, a transport
// error is a 502.
// Each attempt is its own inference span. Once the response headers are
// accepted there is no retry: a stream that breaks later ends with an error
// event (tap.go).

// attemptState is a call's attempts: how many were made, the backends
// that failed, where the next goes and the control of the current one.
// serveProxy, forward and attempt (server.go) start attempts; retry and
// settle decide whether one follows; startAttempt (cancel.go) lists the
// current one for the backend-down and idle watches.
type attemptState struct {
	kinds    []string            // the route's backend kinds
	attempts int                 // attempts started
	start    time.Time           // when the current attempt started
	tried    []*upstream.Backend // backends that failed this request, over triedBuf
	triedBuf [maxAttempts]*upstream.Backend
	next     *upstream.Backend // set when the attempt failed and goes on there
	ctl      *attemptCtl       // cancels the current attempt (cancel.go)
	// pinned: only this backend can answer (it holds the response a
	// follow-up names), so a failed attempt is not retried elsewhere.
	pinned  bool
	settled bool // the observer has the request (settle)

	// Each of the first inlineAttempts attempts' body reader, context
	// and control, kept here rather than allocated per attempt.
	bodies   [inlineAttempts]bytes.Reader
	contexts [inlineAttempts]callContext
	ctls     [inlineAttempts]attemptCtl
}

// maxAttempts bounds retries.attempts (config validates [1, 10]).
const maxAttempts = 10

// errRetry is returned by modifyResponse to make the proxy discard a 5xx
// answer that is retried elsewhere.
var errRetry = errors.New("retrying on another backend")

// Retry reasons, the values of vigil_retries_total's reason label.
const (
	retryConnect   = "connect"   // the backend could not be reached
	retryTransport = "transport" // the connection failed after it was made
	retryStatus    = "status_5xx"
)

// retry decides whether the failed attempt goes on to another backend; if
// so it sets x.retry.next, ends the attempt's span and counts the retry.
func (s *Server) retry(x *call, reason string, status int) bool {
	x.retry.tried = append(x.retry.tried, x.backend)
	if x.retry.pinned || x.retry.attempts >= min(s.cfg.Retries.Attempts, maxAttempts) {
		return false
	}
	// A retry is routed by load, whatever the strategy: under prefix,
	// Pick (no prompt key) is the dynamic choice. The backend that held
	// the prompt's prefix was the one tried first; the others are alike
	// cold for it, so load alone tells them apart.
	next, err := s.balancer.Pick(x.req.Model, x.retry.kinds, x.retry.tried...)
	if err != nil {
		return false
	}
	if x.stream != nil && !x.stream.handOn() {
		return false // the body streamed out in part; it cannot be sent again
	}
	x.retry.next = next
	s.metrics.retries.WithLabelValues(reason).Inc()
	s.log.Debug("retrying on another backend", "request_id", x.req.ID, "from", x.backend.Name, "to", next.Name, "reason", reason)
	s.endAttempt(x, status, exchange.ClassUpstream5xx)
	return true
}

// settle fixes the backend of the exchange once no attempt follows, and
// hands the request to the observer: before settling, req.Backend may still
// change, so the dispatcher goroutine must not see req yet.
func (x *call) settle() {
	if x.retry.settled {
		return
	}
	x.retry.settled = true
	x.req.Backend = x.backend.Name
	if x.disp != nil {
		x.disp.request(&x.pending)
	}
}

func (s *Server) recordFailure(b *upstream.Backend) {
	if ejected, until := b.RecordFailure(time.Now()); ejected {
		s.metrics.ejections.WithLabelValues(b.Name).Inc()
		s.log.Warn("backend ejected", "backend", b.Name,
			"failures", b.ConsecutiveFailures(), "until", until.Format(time.RFC3339Nano))
		s.backendDown(b)
	}
}

func (s *Server) recordSuccess(b *upstream.Backend) {
	if b.RecordSuccess(time.Now()) {
		s.log.Info("backend readmitted", "backend", b.Name, "by", "request", "failed_probes", b.FailedProbes())
	}
}

// observeBackend feeds the finished attempt to the backend's passive health
// and latency average: a stream that broke after its headers (or went idle
// for limits.stream_idle_timeout) is a failure, one that ended (or whose
// client left) a success; the time to the first body byte of a good
// answer is its latency.
func (s *Server) observeBackend(ctx context.Context, x *call, now time.Time) {
	b := x.backend
	if b == nil || x.retry.attempts == 0 || x.resp.apiErr != nil {
		return
	}
	if x.resp.readErr != nil && ctx.Err() == nil {
		if x.retry.ctl != nil && x.retry.ctl.idled.Load() {
			s.metrics.cancels.WithLabelValues(b.Name, "stream_idle").Inc()
		}
		s.recordFailure(b)
		return
	}
	if x.tapped && x.tap.sse && x.resp.status < 500 {
		s.recordSuccess(b) // a stream's success is its end (modifyResponse)
	}
	if !x.resp.firstByte.IsZero() && x.resp.status < 500 {
		b.ObserveLatency(x.resp.firstByte.Sub(x.retry.start), now)
	}
	if x.resp.usageReported {
		// The prefix-cache figures from the gateway's side (upstream's
		// prefixcache.go): what the backend said it read from its cache.
		b.ObserveTokens(x.resp.prompt(), int(x.resp.cachedTokens))
	}
}

// runBalancer scrapes the backends' load and recomputes the weights every
// balancer.scrape_interval until ctx is done. Picks never wait for it.
func (s *Server) runBalancer(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Balancer.ScrapeInterval)
	defer t.Stop()
	for {
		s.refreshWeights(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refreshWeights runs one round: scrape, end elapsed ejections, reweigh.
func (s *Server) refreshWeights(ctx context.Context) {
	s.scraper.ScrapeAll(ctx)
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	if s.checker.Interval <= 0 {
		// Nothing probes an ejected backend: its back-off's end readmits it.
		s.pool.Sweep(now, func(b *upstream.Backend) {
			s.log.Info("backend readmitted", "backend", b.Name, "by", "backoff")
		})
	}
	uctx, cancel := context.WithTimeout(ctx, s.cfg.Balancer.ScrapeInterval)
	defer cancel()
	if err := s.balancer.Update(uctx, now); err != nil {
		s.log.Warn("sharing balancer weights failed; using local weights", "err", err)
	}
}
