package gateway

import (
	"context"
	"time"

	"github.com/vigil-gw/vigil/gateway/upstream"
)

// What the request path tells the backends' state: passive health (a
// failure counts toward ejection, a success readmits), the latency
// estimate and the prefix-cache figures; and the balancer's background
// round.

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
	if b == nil || x.retry.attempts == 0 || x.answer.apiErr != nil {
		return
	}
	if x.resp.readErr != nil && ctx.Err() == nil {
		if x.retry.ctl != nil && x.retry.ctl.idled.Load() {
			s.metrics.cancels.WithLabelValues(b.Name, "stream_idle").Inc()
		}
		s.recordFailure(b)
		return
	}
	if x.tapped && x.tap.sse && x.answer.status < 500 {
		s.recordSuccess(b) // a stream's success is its end (judge, proxy.go)
	}
	if !x.resp.firstByte.IsZero() && x.answer.status < 500 {
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
