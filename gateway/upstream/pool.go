// Package upstream holds the state of the inference backends that the
// balancer, the health checks, the load scraper and the admin API share:
// immutable configuration, and live state in atomics and immutable
// snapshots behind atomic pointers, so that readers never take a lock.
package upstream

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// Backend kinds, as config names them.
const (
	KindOpenAI = config.KindOpenAI
	KindTGI    = config.KindTGI
)

// Sentinel errors of picking a backend.
var (
	// ErrUnknownModel means no backend is configured to serve the model.
	ErrUnknownModel = errors.New("no backend serves this model")
	// ErrNoHealthy means backends serve the model but none is healthy (or
	// every healthy one was excluded).
	ErrNoHealthy = errors.New("no healthy backend")
)

// A Backend is one inference server. Its configuration is immutable; its
// health, in-flight count, load signals and observations are atomics or
// immutable snapshots behind atomic pointers, safe for concurrent use.
type Backend struct {
	Name string
	URL  *url.URL
	Kind string
	// Weight is the configured base weight, > 0.
	Weight float64
	// Agent is the node load agent's base URL; nil when none is configured.
	Agent *url.URL
	// Metrics is the server's Prometheus endpoint; nil when none is configured.
	Metrics *url.URL
	// models is nil when the backend serves every model.
	models map[string]struct{}

	pool *Pool

	healthy  atomic.Bool // the last active check passed (true before any)
	inflight atomic.Int64
	picks    atomic.Int64 // requests (attempts) sent, ever

	// Passive health (health.go).
	fails        atomic.Int64 // consecutive failed requests
	ejections    atomic.Int64 // back-offs (ejections, failed probes) since the last successful request
	ejectedUntil atomic.Int64 // unix nanoseconds: the back-off's end; 0: not ejected
	failedProbes atomic.Int64 // failed readmission probes since the last ejection
	answered     atomic.Int64 // unix nanoseconds of the last answer below 500 (its headers)

	agentLoad  atomic.Pointer[AgentLoad]
	serverLoad atomic.Pointer[ServerLoad]
	latency    peakEWMA // seconds to the first response byte
	errRate    ewma     // 1 per failed attempt, 0 per successful one

	// Prefix cache (prefixcache.go) and model discovery (models.go).
	promptTokens atomic.Int64 // reported by answers through this gateway
	cachedTokens atomic.Int64 // of promptTokens, read from the prefix cache
	prefixCache  atomic.Pointer[PrefixCache]
	prefix       prefixState
	discovered   atomic.Pointer[ModelSet]
}

// Models returns the configured model list; nil means every model.
func (b *Backend) Models() []string {
	if b.models == nil {
		return nil
	}
	out := make([]string, 0, len(b.models))
	for m := range b.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Inflight returns the number of requests being proxied to the backend.
func (b *Backend) Inflight() int64 { return b.inflight.Load() }

// Picks returns the number of requests (attempts) sent to the backend since
// the gateway started.
func (b *Backend) Picks() int64 { return b.picks.Load() }

// Acquire counts a request in flight; call the returned func, or Release,
// when it ends.
func (b *Backend) Acquire() (release func()) {
	b.picks.Add(1)
	b.inflight.Add(1)
	return b.Release
}

// Release ends what Acquire began: the request no longer counts in
// flight on b.
func (b *Backend) Release() { b.inflight.Add(-1) }

// A Pool is the fixed set of configured backends. It is safe for concurrent use.
type Pool struct {
	backends []*Backend
	passive  Passive
	decay    float64 // latency decay time in nanoseconds, > 0

	// listing indexes the backends' fresh discovered model lists
	// (models.go); nil when there are none. listingMu serializes its
	// rebuilds.
	listing   atomic.Pointer[listing]
	listingMu sync.Mutex
}

// Passive configures passive ejection (see [Backend.RecordFailure]).
type Passive struct {
	// Failures is the number of consecutive failures that eject a backend.
	// Zero disables passive ejection.
	Failures int
	// Backoff is the first ejection's length; it doubles with each further
	// ejection up to MaxBackoff.
	Backoff, MaxBackoff time.Duration
}

// NewPool builds a pool from validated backend configs; health gives the
// passive ejection settings and latencyDecay (balancer.latency_decay) the
// decay time of the latency estimates (see [Backend.ObserveLatency]), > 0.
// Every backend starts healthy: an unchecked backend is given the benefit
// of the doubt.
func NewPool(cfgs []config.Backend, health config.Health, latencyDecay time.Duration) (*Pool, error) {
	if latencyDecay <= 0 {
		return nil, fmt.Errorf("balancer.latency_decay: must be > 0, got %v", latencyDecay)
	}
	p := &Pool{passive: Passive{Failures: health.Failures, Backoff: health.Backoff, MaxBackoff: max(health.MaxBackoff, health.Backoff)},
		decay: float64(latencyDecay)}
	for i, c := range cfgs {
		u, err := url.Parse(c.URL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("backends[%d].url: invalid URL %q", i, c.URL)
		}
		b := &Backend{Name: c.Name, URL: u, Kind: c.Kind, Weight: c.Weight, pool: p}
		if b.Agent, err = optionalURL(c.Agent); err != nil {
			return nil, fmt.Errorf("backends[%d].agent: invalid URL %q", i, c.Agent)
		}
		if b.Metrics, err = optionalURL(c.Metrics); err != nil {
			return nil, fmt.Errorf("backends[%d].metrics: invalid URL %q", i, c.Metrics)
		}
		if len(c.Models) > 0 {
			b.models = make(map[string]struct{}, len(c.Models))
			for _, m := range c.Models {
				b.models[m] = struct{}{}
			}
		}
		b.healthy.Store(true)
		b.errRate.reset()
		p.backends = append(p.backends, b)
	}
	return p, nil
}

func optionalURL(s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, errors.New("invalid URL")
	}
	return u, nil
}

// Backends returns the backends in configuration order. The slice is
// shared: do not modify it.
func (p *Pool) Backends() []*Backend { return p.backends }

// Ready reports whether at least one backend is healthy.
func (p *Pool) Ready() bool {
	for _, b := range p.backends {
		if b.Healthy() {
			return true
		}
	}
	return false
}

// ewma is an exponentially weighted moving average updated lock-free. NaN
// means no observation yet.
type ewma struct {
	bits atomic.Uint64 // math.Float64bits of the average
	at   atomic.Int64  // unix nanoseconds of the last observation
}

func (e *ewma) reset() { e.bits.Store(math.Float64bits(math.NaN())) }

func (e *ewma) observe(v, alpha float64, now time.Time) {
	for {
		old := e.bits.Load()
		avg := math.Float64frombits(old)
		if math.IsNaN(avg) {
			avg = v
		} else {
			avg += alpha * (v - avg)
		}
		if e.bits.CompareAndSwap(old, math.Float64bits(avg)) {
			break
		}
	}
	e.at.Store(now.UnixNano())
}

// value returns the average and the time of the last observation; NaN and
// the zero time before any.
func (e *ewma) value() (float64, time.Time) {
	v := math.Float64frombits(e.bits.Load())
	at := e.at.Load()
	if math.IsNaN(v) || at == 0 {
		return math.NaN(), time.Time{}
	}
	return v, time.Unix(0, at)
}

// errorAlpha smooths the error rate: the latest attempt counts for a tenth,
// so three failures in a row (health.failures' default) move it to about
// 0.27.
const errorAlpha = 0.1

// peakEWMA is the "peak EWMA" latency estimate of Finagle and Linkerd
// (Finagle's PeakEwma load metric, Linkerd's and tower's PeakEwma
// balancer): an observation above the estimate replaces it at once (the
// peak), one below is blended in with weight 1 − e^(−Δt/τ), Δt the time
// since the previous observation, but at least minBlend; while nothing is
// observed the estimate decays toward zero as e^(−t/τ). It reacts to a
// slowdown with the first slow answer; the decay makes an avoided backend
// look cheap again after a while, so that it is tried and re-measured.
//
// minBlend is Vigil's addition. With purely time-based blending a backend
// answering hundreds of requests a second keeps one outlier (a pause of the
// machine) for about τ: its estimate is the maximum of the last seconds, a
// noisy statistic, and among equal backends the split then follows the
// noise (10 % more estimated latency is about 10 % less traffic). With the
// floor, ten or so normal answers forgive an outlier, while a backend that
// is really slower keeps answering slowly and keeps its peak.
type peakEWMA struct {
	mu  sync.Mutex    // serializes observations
	est atomic.Uint64 // math.Float64bits of seconds as of at
	at  atomic.Int64  // unix nanoseconds of the last observation; 0: none
}

// minBlend is the least weight of an observation below the estimate.
const minBlend = 0.1

func (p *peakEWMA) observe(v float64, now int64, tau float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at.Load()
	est := math.Float64frombits(p.est.Load())
	w := math.Exp(-float64(max(now-at, 0)) / tau)
	switch {
	case at == 0:
		est = v
	case v > est*w:
		est = v // the peak
	default:
		a := max(1-w, minBlend)
		est = est*(1-a) + v*a
	}
	// A reader between the two stores may pair the new estimate with the
	// old time (or the reverse): off by the decay of one interval, once.
	p.est.Store(math.Float64bits(est))
	p.at.Store(max(at, now))
}

// value returns the estimate decayed to now and the time of the last
// observation; NaN and 0 before any. It takes no lock.
func (p *peakEWMA) value(now int64, tau float64) (float64, int64) {
	at := p.at.Load()
	if at == 0 {
		return math.NaN(), 0
	}
	est := math.Float64frombits(p.est.Load())
	return est * math.Exp(-float64(max(now-at, 0))/tau), at
}

// ObserveLatency records the time from sending a request to the first byte
// of its response body: for a stream the time to its first token, for a
// whole response its generation time.
func (b *Backend) ObserveLatency(d time.Duration, now time.Time) {
	b.latency.observe(d.Seconds(), now.UnixNano(), b.pool.decay)
}

// Latency returns the backend's peak-EWMA time to the first byte in seconds
// as of now (decayed since the last observation) and when it was last
// observed; NaN and the zero time before any observation.
func (b *Backend) Latency(now time.Time) (float64, time.Time) {
	v, at := b.latency.value(now.UnixNano(), b.pool.decay)
	if at == 0 {
		return math.NaN(), time.Time{}
	}
	return v, time.Unix(0, at)
}

// ErrorRate returns the EWMA of the share of failed attempts and when it was
// last updated; NaN before any attempt.
func (b *Backend) ErrorRate() (float64, time.Time) { return b.errRate.value() }
