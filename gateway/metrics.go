package gateway

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/upstream"

	"github.com/vigil-gw/vigil/exchange"
)

// maxModelLabels bounds the distinct values of the model label; later
// models are reported as "other" so that clients cannot grow the series.
const maxModelLabels = 64

// metrics holds the gateway's instruments, registered on an injected registry.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	ttft     *prometheus.HistogramVec
	tpot     *prometheus.HistogramVec
	tokens   *prometheus.HistogramVec
	// usage counts tokens by tenant and where the count came from.
	usage *prometheus.CounterVec
	// maxGap is each stream's longest gap between content chunks.
	maxGap  *prometheus.HistogramVec
	dropped prometheus.Counter
	// injections counts requests sent upstream with logprobs the client
	// did not ask for (rewrite.Injector).
	injections prometheus.Counter
	// usageInjections counts streams sent upstream asking for usage their
	// client did not ask for (usage.inject).
	usageInjections prometheus.Counter
	cacheHits       prometheus.Counter
	cacheMiss       prometheus.Counter
	// retries counts attempts retried on another backend, by reason.
	retries *prometheus.CounterVec
	// cancels counts attempts the gateway cancelled (cancel.go), by
	// backend and reason.
	cancels *prometheus.CounterVec
	// ejections counts passive ejections by backend.
	ejections *prometheus.CounterVec
	// failedProbes counts failed readmission probes of ejected backends.
	failedProbes *prometheus.CounterVec
	// scrapeErrors counts failed reads of agents and metrics endpoints.
	scrapeErrors *prometheus.CounterVec
	models       modelLabels

	// Children of the vectors above, by label set (observe).
	series    cowMap[seriesKey, *series]
	requestsC cowMap[requestsKey, prometheus.Counter]
	usageC    cowMap[usageLabels, prometheus.Counter]
}

func newMetrics(reg prometheus.Registerer, pool *upstream.Pool, bal *balance.Balancer, known []string) *metrics {
	genAI := []string{"gen_ai_operation_name", "gen_ai_request_model", "backend"}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_requests_total",
			Help: "Requests handled, by backend, model, HTTP status and error class.",
		}, []string{"backend", "model", "code", "error_class"}),
		// Bucket boundaries are those the OpenTelemetry GenAI semantic
		// conventions recommend for these instruments.
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_request_duration_seconds",
			Help:    "Time from request received to last response byte.",
			Buckets: []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92},
		}, genAI),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_to_first_token_seconds",
			Help:    "Time from request received to the first response byte of a stream.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0},
		}, genAI),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_server_time_per_output_token_seconds",
			Help:    "Time per output token after the first, for streams.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5},
		}, genAI),
		tokens: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gen_ai_client_token_usage",
			Help:    "Tokens per request as the backend reported them, by token type (input, output).",
			Buckets: []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864},
		}, []string{"gen_ai_token_type", "gen_ai_request_model", "backend"}),
		usage: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_tokens_total",
			Help: "Tokens by tenant (usage.tenant_header, bounded), model, backend, token type (input, output) and where the count came from (reported by the backend, counted from the stream's content chunks).",
		}, []string{"tenant", "gen_ai_request_model", "backend", "gen_ai_token_type", "usage_source"}),
		maxGap: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "vigil_stream_max_gap_seconds",
			Help:    "The longest gap between consecutive content chunks of a stream's choice (a stall), per stream with at least two content chunks.",
			Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, genAI),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_observer_dropped_events_total",
			Help: "Events not handed to the analyzers because their queue was full.",
		}),
		injections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_logprob_injections_total",
			Help: "Requests sent to a backend with token logprobs their client did not ask for (analyzers.confidence.inject); the client's response has them removed.",
		}),
		usageInjections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_usage_injections_total",
			Help: "Streams sent to a backend asking for token usage their client did not ask for (usage.inject); the client's stream has it removed.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_cache_hits_total",
			Help: "Requests answered from the response cache.",
		}),
		cacheMiss: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_cache_misses_total",
			Help: "Cacheable requests forwarded to a backend (one per group of identical misses).",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_retries_total",
			Help: "Attempts that failed before anything reached the client and were retried on another backend, by reason (connect, transport, status_5xx, backend_down).",
		}, []string{"reason"}),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_attempts_cancelled_total",
			Help: "Attempts the gateway cancelled, by backend and reason: backend_down (marked down before it answered; moved to another backend), stream_idle (the response body sent nothing for limits.stream_idle_timeout).",
		}, []string{"backend", "reason"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_backend_ejections_total",
			Help: "Passive ejections of the backend after consecutive failed requests.",
		}, []string{"backend"}),
		failedProbes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_backend_failed_probes_total",
			Help: "Failed readmission probes of the passively ejected backend (each doubles its back-off, up to health.max_backoff).",
		}, []string{"backend"}),
		scrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_balancer_scrape_errors_total",
			Help: "Failed reads of a backend's load agent, metrics endpoint or model list (/v1/models), by source (agent, metrics, models).",
		}, []string{"backend", "source"}),
	}
	for _, k := range known {
		m.models.admit(k)
	}
	healthy := prometheus.NewDesc("vigil_backend_healthy", "1 when the backend passes its health checks and is not ejected.", []string{"backend"}, nil)
	inflight := prometheus.NewDesc("vigil_backend_inflight_requests", "Requests in flight to the backend.", []string{"backend"}, nil)
	weight := prometheus.NewDesc("vigil_backend_weight", "The backend's current dynamic balancing weight: base × (1 − load), at least 1% of base.", []string{"backend"}, nil)
	load := prometheus.NewDesc("vigil_backend_load", "The backend's load scores in [0, 1], by signal (cpu, mem, gpu, gpu_mem, queue, kv_cache, latency, errors; blend: the node load of cpu, mem, gpu, gpu_mem and kv_cache that sets the weight); absent when unknown or stale.", []string{"backend", "signal"}, nil)
	promptTok := prometheus.NewDesc("vigil_backend_prompt_tokens_total", "Prompt tokens the backend's answers through this gateway reported (usage), since start.", []string{"backend"}, nil)
	cachedTok := prometheus.NewDesc("vigil_backend_cached_prompt_tokens_total", "Of vigil_backend_prompt_tokens_total, those the backend reported reading from its prefix cache (cached_tokens, cache_read_input_tokens).", []string{"backend"}, nil)
	hitRatio := prometheus.NewDesc("vigil_backend_prefix_cache_hit_ratio", "The backend's prefix-cache hit rate over the last minute: hits/queries of its own vllm:prefix_cache_* counters when it exports them, else of the cached prompt tokens its answers reported; absent when no prompt tokens were seen in the minute.", []string{"backend"}, nil)
	fleetRatio := prometheus.NewDesc("vigil_prefix_cache_hit_ratio", "The fleet's prefix-cache hit rate over the last minute: the backends' hits summed over their queries summed; absent when no prompt tokens were seen in the minute.", nil, nil)
	reg.MustRegister(m.requests, m.duration, m.ttft, m.tpot, m.tokens, m.usage, m.maxGap, m.dropped, m.injections, m.usageInjections, m.cacheHits, m.cacheMiss,
		m.retries, m.cancels, m.ejections, m.failedProbes, m.scrapeErrors,
		collectorFunc{descs: []*prometheus.Desc{healthy, inflight, weight, load, promptTok, cachedTok, hitRatio, fleetRatio}, collect: func(ch chan<- prometheus.Metric) {
			snap := bal.Snapshot()
			for i, b := range pool.Backends() {
				h := 0.0
				if b.Healthy() {
					h = 1
				}
				st := &snap.Backends[i]
				ch <- prometheus.MustNewConstMetric(healthy, prometheus.GaugeValue, h, b.Name)
				ch <- prometheus.MustNewConstMetric(inflight, prometheus.GaugeValue, float64(b.Inflight()), b.Name)
				ch <- prometheus.MustNewConstMetric(weight, prometheus.GaugeValue, st.Weight, b.Name)
				for sig, v := range st.Scores {
					if !math.IsNaN(v) {
						ch <- prometheus.MustNewConstMetric(load, prometheus.GaugeValue, v, b.Name, balance.Signal(sig).String())
					}
				}
				ch <- prometheus.MustNewConstMetric(load, prometheus.GaugeValue, st.Load, b.Name, "blend")
				ch <- prometheus.MustNewConstMetric(promptTok, prometheus.CounterValue, float64(b.PromptTokens()), b.Name)
				ch <- prometheus.MustNewConstMetric(cachedTok, prometheus.CounterValue, float64(b.CachedTokens()), b.Name)
				if pc := b.PrefixCache(); pc != nil && !math.IsNaN(pc.HitRate) {
					ch <- prometheus.MustNewConstMetric(hitRatio, prometheus.GaugeValue, pc.HitRate, b.Name)
				}
			}
			if f := pool.FleetPrefixCache(); !math.IsNaN(f.HitRate) {
				ch <- prometheus.MustNewConstMetric(fleetRatio, prometheus.GaugeValue, f.HitRate)
			}
		}})
	return m
}

// observe records one finished request.
func (m *metrics) observe(x *call, status int, class exchange.ErrorClass) {
	model := m.models.label(x.req.Model)
	backend := x.backendName()
	m.requestsFor(backend, model, status, class).Inc()
	if backend == "" || x.cached { // gateway-made: an error before any backend was chosen, or a cache hit
		return
	}
	se := m.seriesFor(x.req.Operation, model, backend)
	se.duration.Observe(x.resp.latency.Seconds())
	if x.req.Stream && !x.resp.firstByte.IsZero() {
		ttft := x.resp.firstByte.Sub(x.req.Start)
		se.ttft.Observe(ttft.Seconds())
		if x.resp.completionTokens > 1 {
			se.tpot.Observe((x.resp.latency - ttft).Seconds() / float64(x.resp.completionTokens-1))
		}
	}
	if x.resp.gaps.Count > 0 {
		se.maxGap.Observe(x.resp.gaps.Max.Seconds())
	}
	if p := x.resp.prompt(); p > 0 {
		se.tokensIn.Observe(float64(p))
		m.usageFor(usageLabels{x.req.Tenant, model, backend, "input", x.resp.usageSource}).Add(float64(p))
	}
	if x.resp.completionTokens > 0 {
		se.tokensOut.Observe(float64(x.resp.completionTokens))
		m.usageFor(usageLabels{x.req.Tenant, model, backend, "output", x.resp.usageSource}).Add(float64(x.resp.completionTokens))
	}
}

// The children of the vectors that observe touches, looked up once per
// label set rather than hashed by WithLabelValues on every request: that
// hashing was a measurable part of the gateway's overhead over a plain
// proxy (nginx). The label sets are bounded (backends, at most
// maxModelLabels models and tenants, HTTP statuses, error classes); past
// maxCachedSeries entries a map stops growing and its misses go to
// WithLabelValues.

// series are the instruments of one operation, model label and backend.
type series struct {
	duration, ttft, tpot, maxGap prometheus.Observer
	tokensIn, tokensOut          prometheus.Observer
	// span is the name and attributes of the inference spans of the
	// series (spans.go), made on first use.
	span atomic.Pointer[seriesSpan]
}

type seriesKey struct {
	op             exchange.Operation
	model, backend string
}

type requestsKey struct {
	backend, model string
	status         int
	class          exchange.ErrorClass
}

type usageLabels struct {
	tenant, model, backend, tokenType string
	source                            exchange.UsageSource
}

func (m *metrics) seriesFor(op exchange.Operation, model, backend string) *series {
	k := seriesKey{op, model, backend}
	return m.series.get(k, func() *series {
		o := string(op)
		return &series{
			duration:  m.duration.WithLabelValues(o, model, backend),
			ttft:      m.ttft.WithLabelValues(o, model, backend),
			tpot:      m.tpot.WithLabelValues(o, model, backend),
			maxGap:    m.maxGap.WithLabelValues(o, model, backend),
			tokensIn:  m.tokens.WithLabelValues("input", model, backend),
			tokensOut: m.tokens.WithLabelValues("output", model, backend),
		}
	})
}

func (m *metrics) requestsFor(backend, model string, status int, class exchange.ErrorClass) prometheus.Counter {
	return m.requestsC.get(requestsKey{backend, model, status, class}, func() prometheus.Counter {
		return m.requests.WithLabelValues(backend, model, strconv.Itoa(status), string(class))
	})
}

func (m *metrics) usageFor(k usageLabels) prometheus.Counter {
	return m.usageC.get(k, func() prometheus.Counter {
		return m.usage.WithLabelValues(k.tenant, k.model, k.backend, k.tokenType, string(k.source))
	})
}

// maxCachedSeries bounds each of the metrics' lookup maps.
const maxCachedSeries = 4096

// cowMap is a small map read without locks: readers load an immutable
// snapshot, and the rare writer (a key's first use) copies it under a
// mutex. It holds at most maxCachedSeries keys; get still answers for
// others, without keeping them. It is safe for concurrent use.
type cowMap[K comparable, V any] struct {
	m  atomic.Pointer[map[K]V]
	mu sync.Mutex
}

// get returns the value of k, made by mk on first use.
func (c *cowMap[K, V]) get(k K, mk func() V) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil {
		if v, ok := (*old)[k]; ok {
			return v
		}
		if len(*old) >= maxCachedSeries {
			return mk()
		}
	}
	v := mk()
	n := make(map[K]V, 1+len(ptrMap(old)))
	for k, v := range ptrMap(old) {
		n[k] = v
	}
	n[k] = v
	c.m.Store(&n)
	return v
}

func ptrMap[K comparable, V any](m *map[K]V) map[K]V {
	if m == nil {
		return nil
	}
	return *m
}

// modelLabels admits the first maxModelLabels distinct model names as label
// values; any later one becomes "other". It is safe for concurrent use.
type modelLabels struct {
	seen sync.Map // string → struct{}
	n    atomic.Int64
}

func (l *modelLabels) label(model string) string {
	if model == "" {
		return ""
	}
	if _, ok := l.seen.Load(model); ok {
		return model
	}
	if l.admit(model) {
		return model
	}
	return "other"
}

func (l *modelLabels) admit(model string) bool {
	if l.n.Add(1) > maxModelLabels {
		l.n.Add(-1)
		return false
	}
	if _, loaded := l.seen.LoadOrStore(model, struct{}{}); loaded {
		l.n.Add(-1)
	}
	return true
}

// collectorFunc adapts a function to prometheus.Collector.
type collectorFunc struct {
	descs   []*prometheus.Desc
	collect func(chan<- prometheus.Metric)
}

func (c collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c collectorFunc) Collect(ch chan<- prometheus.Metric) { c.collect(ch) }
