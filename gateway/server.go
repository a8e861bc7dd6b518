// Package gateway is Vigil's data plane: the HTTP server, the streaming
// reverse proxy with its tap for the analyzers, routing, error mapping,
// metrics, and the wiring of the access log (gateway/accesslog), the admin
// API (gateway/admin), the retrieval hook (gateway/retrieval) and the
// shadow comparisons (gateway/shadow).
package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/gateway/admin"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/cache"
	"github.com/vigil-gw/vigil/gateway/inject"
	"github.com/vigil-gw/vigil/gateway/quota"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/retrieval"
	"github.com/vigil-gw/vigil/gateway/shadow"
	"github.com/vigil-gw/vigil/gateway/upstream"
	"github.com/vigil-gw/vigil/state"
)

// Options configure a Server. Only Config is required.
type Options struct {
	// Config must be validated (config.Config.ValidateServe).
	Config config.Config
	// Log receives the process's own messages. Nil: slog.Default().
	Log *slog.Logger
	// AccessLog receives one JSON line per request. Nil: no access log.
	// Built on accesslog.NewHandler, the lines are written by the
	// gateway's own encoder, the same bytes at a fraction of the cost.
	AccessLog *slog.Logger
	// Registry receives the gateway's metrics and is served on /metrics.
	// Nil: a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// Observer receives requests, SSE events and responses off the request
	// path. Nil: nothing observes.
	Observer Observer
	// Signals, Alerts, Notifications, History, Usage, Baseline and Feedback
	// back the admin and feedback routes. Nil: /admin/signals,
	// /admin/history, /admin/usage, /admin/baseline and /v1/feedback answer
	// 501, the lists are empty.
	Signals       admin.SignalsSource
	Alerts        admin.AlertsSource
	Notifications admin.NotificationsSource
	History       admin.HistorySource
	Usage         admin.UsageSource
	Baseline      admin.Baseliner
	Feedback      FeedbackSink
	// Tracer makes the request's spans and Propagator carries the trace
	// context in and out. Nil: spans with real ids that are never recorded,
	// and W3C tracecontext + baggage.
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	// Transport carries requests to backends. Nil: a tuned clone of
	// http.DefaultTransport with limits.upstream_timeout as the response
	// header timeout.
	Transport http.RoundTripper
	// SharedStore holds what replicas share; the response cache uses it
	// (with Replica naming this process). Nil: an in-process cache.
	SharedStore state.Store
	Replica     string
	// WeightStore shares balancing weights among gateway replicas
	// (state.Weights over Redis). Nil: each replica balances on its own weights.
	WeightStore balance.Store
	// Shadow receives the shadow comparisons of backends against their
	// references (analyzers.precision). Nil: none are made.
	Shadow shadow.Sink
}

// A Server is the gateway. Build it with New, serve Handler() with an
// http.Server and run Run for its background work. It is safe for concurrent use.
type Server struct {
	cfg      config.Config
	log      *slog.Logger
	access   *accesslog.Logger
	reg      *prometheus.Registry
	pool     *upstream.Pool
	balancer *balance.Balancer
	checker  *upstream.Checker
	scraper  *upstream.Scraper
	// attemptLists holds the attempts in flight by backend (cancel.go).
	attemptLists map[*upstream.Backend]*attemptList
	// transport carries the attempts (proxy.go); buffers and proxyLog
	// are what each call's ReverseProxy copies with and logs to.
	transport http.RoundTripper
	buffers   *bufferPool
	proxyLog  *log.Logger
	client    *http.Client
	disp      *dispatcher
	metrics   *metrics
	engine    *gin.Engine
	inject    inject.Injector
	tenants   *request.Tenants
	quota     *quota.Limiter // tenant limits (quotas.go)
	// tenantLabels bounds the tenant labels; quotas' tenants are
	// always among them.
	tenantLabels *modelLabels
	// sessionHeader is balancer.prefix.session_header, canonical ("":
	// none).
	sessionHeader string

	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	retrieval *retrieval.Hook // nil when no retrieval hook is configured
	cache     *cache.Cache    // nil when cache.enabled is false

	shadow *shadow.Shadower // nil when no backend is shadow-compared
	owners *owners          // which backend holds each stored response (apis.go)

	admin    *admin.API
	feedback FeedbackSink

	certs    *certReloader  // listen_tls; nil: plain HTTP
	draining atomic.Bool    // shutting down: /readyz answers 503 (Drain)
	inflight sync.WaitGroup // proxied requests being served (Wait)
}

// New builds a gateway from opts.
func New(opts Options) (*Server, error) {
	cfg := opts.Config
	pool, err := upstream.NewPool(cfg.Backends, cfg.Health, cfg.Balancer.LatencyDecay)
	if err != nil {
		return nil, err
	}
	bal, err := balance.New(pool, balance.Options{
		Strategy: cfg.Balancer.Strategy, Prefix: cfg.Balancer.Prefix, Weights: cfg.Balancer.LoadWeights,
		QueueSaturation: cfg.Balancer.QueueSaturation, StaleAfter: cfg.Balancer.StaleAfter,
		Floor: cfg.Balancer.Floor, Store: opts.WeightStore,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, log: opts.Log, access: accesslog.New(opts.AccessLog), reg: opts.Registry, pool: pool, balancer: bal,
		feedback: opts.Feedback,
		admin: admin.New(admin.Options{
			Token: cfg.Admin.Token, Pprof: cfg.Admin.Pprof, StaleAfter: cfg.Balancer.StaleAfter, Pool: pool, Balancer: bal,
			Signals: opts.Signals, Alerts: opts.Alerts, Notifications: opts.Notifications, History: opts.History, Usage: opts.Usage, Baseline: opts.Baseline,
		}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.tracer, s.prop = opts.Tracer, opts.Propagator
	if s.tracer == nil {
		s.tracer = defaultTracer()
	}
	if s.prop == nil {
		s.prop = defaultPropagator()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
		s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	var known []string
	for _, b := range cfg.Backends {
		known = append(known, b.Models...)
	}
	s.metrics = newMetrics(s.reg, pool, bal, known)
	s.inject = inject.NewInjector(cfg.Analyzers.Confidence.Inject)
	// The tenants that quotas name keep their labels however many others
	// come: their limits must find them.
	s.tenantLabels = new(modelLabels)
	for name := range cfg.Quotas.Tenants {
		s.tenantLabels.admit(name)
	}
	s.tenants = request.NewTenants(cfg.Usage.TenantHeader, s.tenantLabels.label)
	var quotaStore state.Quotas
	if q, ok := opts.SharedStore.(state.Quotas); ok {
		quotaStore = q
	}
	s.quota = quota.New(cfg.Quotas, quotaStore, opts.Replica, s.reg, s.log)
	s.admin.SetQuotas(s.quota)
	if h := cfg.Balancer.Prefix.SessionHeader; h != "" {
		s.sessionHeader = http.CanonicalHeaderKey(h)
	}
	if opts.Observer != nil {
		s.disp = newDispatcher(opts.Observer, cfg.Analyzers.QueueSize, func(n int) { s.metrics.dropped.Add(float64(n)) })
	}
	transport := opts.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = cfg.Limits.MaxIdleConns
		t.MaxIdleConnsPerHost = cfg.Limits.MaxIdleConnsPerHost
		t.ResponseHeaderTimeout = cfg.Limits.UpstreamTimeout
		// Bodies go to the client as the backend encoded them.
		t.DisableCompression = true
		// The write buffer lives as long as the connection, idle while a
		// stream is answered on it; a request body larger than it is
		// written straight to the connection (bufio's ReadFrom) after
		// the headers, so 1 KiB costs at most one more write.
		t.WriteBufferSize = 1 << 10
		if cfg.BackendTLS.CAFile != "" {
			roots, err := rootCAs(cfg.BackendTLS.CAFile)
			if err != nil {
				return nil, err
			}
			t.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		}
		transport = t
	}
	if cfg.ListenTLS.CertFile != "" {
		var err error
		if s.certs, err = newCertReloader(cfg.ListenTLS.CertFile, cfg.ListenTLS.KeyFile, s.log); err != nil {
			return nil, err
		}
	}
	s.client = &http.Client{Transport: transport, Timeout: cfg.Limits.SideTimeout}
	if cfg.Cache.Enabled {
		s.cache = cache.New(cfg.Cache, opts.SharedStore, opts.Replica)
	}
	// Shadow requests are greedy generations of max_tokens tokens: give
	// them the whole precision.timeout rather than limits.side_timeout.
	s.shadow = shadow.New(cfg.Analyzers.Precision, cfg.Backends, pool, opts.Shadow,
		&http.Client{Transport: transport}, s.log, s.reg)
	if cfg.Retrieval.URL != "" {
		s.retrieval = retrieval.New(cfg.Retrieval, &http.Client{Transport: transport})
	}
	s.owners = newOwners(cfg.Responses, opts.SharedStore, s.log)
	s.attemptLists = newAttemptLists(pool)
	s.checker = &upstream.Checker{
		Pool: pool, Client: s.client, Path: cfg.Health.Path,
		Interval: cfg.Health.Interval, Timeout: cfg.Health.Timeout, Log: s.log,
		OnChange: func(b *upstream.Backend, healthy bool) {
			if !healthy {
				s.backendDown(b)
			}
		},
		OnProbeFailed: func(b *upstream.Backend, _ int64, _ time.Time) {
			s.metrics.failedProbes.WithLabelValues(b.Name).Inc()
		},
	}
	s.scraper = &upstream.Scraper{
		Pool: pool, Client: s.client, Timeout: cfg.Balancer.ScrapeInterval,
		StaleAfter: cfg.Balancer.StaleAfter, ModelsEvery: modelsEvery,
		OnError: func(b *upstream.Backend, source string, err error) {
			s.metrics.scrapeErrors.WithLabelValues(b.Name, source).Inc()
			s.log.Debug("load scrape failed", "backend", b.Name, "source", source, "err", err)
		},
	}
	s.transport, s.buffers = transport, newBufferPool(copyBufferSize)
	s.proxyLog = slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.engine = s.routes()
	return s, nil
}

// Handler returns the gateway's HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Pool returns the gateway's backends.
func (s *Server) Pool() *upstream.Pool { return s.pool }

// Balancer returns the gateway's balancer.
func (s *Server) Balancer() *balance.Balancer { return s.balancer }

// BackendStates returns the backends as the gateway sees them now, for the
// analyzers' history. Safe for concurrent use.
func (s *Server) BackendStates() []exchange.BackendState { return s.admin.BackendStates() }

// Run runs the gateway's background work (health checks, load scraping and
// weights, delivery to the Observer) until ctx is done, then drains queued
// events.
func (s *Server) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.checker.Run(ctx) })
	g.Go(func() error { return s.runBalancer(ctx) })
	if idle := s.cfg.Limits.StreamIdleTimeout; idle > 0 {
		g.Go(func() error { return s.sweepIdle(ctx, idle) })
	}
	if s.disp != nil {
		g.Go(func() error { return s.disp.Run(ctx) })
	}
	// The limiter runs while quotas are off too: a reload may turn them on.
	g.Go(func() error { s.quota.Run(ctx); return nil })
	if s.shadow != nil {
		g.Go(func() error {
			<-ctx.Done()
			s.shadow.Close()
			return nil
		})
	}
	return g.Wait()
}

func (s *Server) routes() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.Use(recovery(s.log))
	e.POST("/v1/chat/completions", s.proxyRoute(http.MethodPost, "/v1/chat/completions", exchange.OpChat))
	e.POST("/v1/completions", s.proxyRoute(http.MethodPost, "/v1/completions", exchange.OpCompletion))
	e.POST("/v1/embeddings", s.proxyRoute(http.MethodPost, "/v1/embeddings", exchange.OpEmbeddings))
	e.POST("/v1/responses", s.apiRoute(http.MethodPost, "/v1/responses", exchange.OpResponses, routeSpec{owner: ownerFromBody}))
	e.GET("/v1/responses/:id", s.apiRoute(http.MethodGet, "/v1/responses/:id", exchange.OpOther, routeSpec{owner: ownerFromParam}))
	e.DELETE("/v1/responses/:id", s.apiRoute(http.MethodDelete, "/v1/responses/:id", exchange.OpOther, routeSpec{owner: ownerFromParam}))
	e.POST("/v1/responses/:id/cancel", s.apiRoute(http.MethodPost, "/v1/responses/:id/cancel", exchange.OpOther, routeSpec{owner: ownerFromParam}))
	e.GET("/v1/responses/:id/input_items", s.apiRoute(http.MethodGet, "/v1/responses/:id/input_items", exchange.OpOther, routeSpec{owner: ownerFromParam}))
	e.POST("/v1/messages", s.apiRoute(http.MethodPost, "/v1/messages", exchange.OpMessages, routeSpec{shape: apierror.ShapeAnthropic}))
	// count_tokens is checked as a Messages body, proxied, not analyzed.
	e.POST("/v1/messages/count_tokens", s.apiRoute(http.MethodPost, "/v1/messages/count_tokens", exchange.OpOther,
		routeSpec{shape: apierror.ShapeAnthropic, parse: exchange.OpMessages}))
	e.GET("/v1/models", s.listModels)
	e.POST("/v1/feedback", s.postFeedback)
	e.POST("/generate", s.proxyRoute(http.MethodPost, "/generate", exchange.OpGenerate, upstream.KindTGI))
	e.POST("/generate_stream", s.proxyRoute(http.MethodPost, "/generate_stream", exchange.OpGenerate, upstream.KindTGI))
	e.GET("/info", s.proxyRoute(http.MethodGet, "/info", exchange.OpOther, upstream.KindTGI))
	e.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", gin.WrapH(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg})))
	s.admin.Register(e) // /dashboard, /admin/*, /debug/pprof
	// Everything else goes to a backend as it is (passthrough.go). gin's
	// HandleMethodNotAllowed stays off, so that a method a route does not
	// have reaches NoRoute too, rather than gin's text 405.
	e.NoRoute(s.passThrough())
	return e
}

// recovery turns a panic into a 500, except http.ErrAbortHandler: the proxy
// panics with it to abort a response whose stream broke after the headers
// went out, and net/http must see it so that the client sees the break
// rather than a clean end (gin's own Recovery swallows it).
func recovery(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if err, ok := p.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(p)
			}
			log.Error("panic serving request", "path", c.Request.URL.Path, "panic", fmt.Sprint(p))
			if !c.Writer.Written() {
				apierror.WriteShape(c.Writer, apierror.New(http.StatusInternalServerError, "server_error", "internal_error", "internal error", exchange.ClassUpstream5xx),
					shapeOf(c.Request.URL.Path))
			}
			c.Abort()
		}()
		c.Next()
	}
}

// call is the request path's own state for one proxied request. It is
// touched only by the request's goroutine (its proxy calls the call's
// RoundTrip, its ErrorHandler and the body tap on it). Its state is
// grouped by concern; the groups are held by value, since a call is one
// allocation per request.
type call struct {
	srv     *Server
	ctx     context.Context // the server span's: the attempts' parent
	in      *http.Request   // the client's request
	req     *exchange.Request
	spec    *routeSpec        // the Responses and Messages routes; nil for others
	kinds   []string          // the route's backend kinds (none: any)
	backend *upstream.Backend // of the current attempt
	disp    *dispatcher
	pending batch // what the observer gets next (observer.go)

	retry  attemptState    // the attempts and their retries (proxy.go)
	answer answerState     // the status passed on, or the gateway's own error (proxy.go)
	resp   responseStats   // what the response turns into for finish (tap.go)
	shadow shadowState     // the shadow comparison's inputs
	span   spanState       // the spans and what they record (spans.go)
	client clientDeadlines // the client connection's deadlines (listen.go)

	// Storage for what a request would otherwise allocate piece by piece,
	// since every allocation per request is garbage-collector work that
	// adds to the proxy's overhead: the parsed fields, the header values
	// the gateway sets (hdrID...hdrBackend; each slice of it has its
	// capacity cut to 1, so that an append elsewhere copies) and the body
	// tap.
	fields request.Fields
	// body is what the attempts send (forward: the client's, or with
	// what the gateway injected); rp the proxy that copies the answer.
	body   []byte
	rp     httputil.ReverseProxy
	hdr    [hdrCount]string
	tap    tap
	tapped bool
	// forwardedFor: X-Forwarded-For is set (the client's address is known).
	forwardedFor bool
	// usageInjected: the gateway asked for the stream's usage
	// (usage.inject); accept strips it again.
	usageInjected bool
	// parsed: fields holds the request's fields (its route is one the
	// gateway reads; a passed-through request's are not read).
	parsed bool
	// pinned: only x.backend can answer (it holds the response a
	// follow-up names), so a failed attempt is not retried elsewhere.
	pinned bool
	// closeConn: the gateway's answer closes the client's connection (a
	// failed upload left its body unread).
	closeConn bool
	// cached: the response cache answered (the access log and metrics
	// name "cache" as the backend; the Observer sees none).
	cached bool
	// quotaDecision is what the tenant's limits decided (quotas.go).
	quotaDecision quotaDecision
	// quota is the request's reservation under its tenant's limits
	// (quotas.go); nil when none holds it.
	quota *quota.Ticket
	// findOwner: the tap looks for the id of the response being made,
	// to record its owner (a Responses answer: apis.go).
	findOwner bool
	// newConversation: no backend held fields.Conversation yet; the one
	// that answers becomes its owner.
	newConversation bool
	// route is how the balancer chose the backend, for the access log.
	route routeNote
	// (The bools sit together: padding between them would push call, a
	// per-request allocation, into the next size class.)
	// stream is the body of a passed-through request that goes to the
	// backend unread (passthrough.go); nil when the body was read.
	stream *streamBody
	// path is the request's path, for the access log.
	path string
}

// shadowState is what a shadow comparison (package shadow) needs of the
// request. forward sets it; finish reads it, to start the comparison.
type shadowState struct {
	// body is the body sent upstream and auth the client's
	// Authorization, kept (not copied) while a backend is
	// shadow-compared; finish decides whether this request is.
	body []byte
	auth string
	// picked: the request was sampled for a shadow comparison.
	picked bool
	// idsBody is the body that asks idsBackend for logprobs by token id
	// (forward).
	idsBody    []byte
	idsBackend *upstream.Backend
}

// modelsEvery is how many balancer rounds (balancer.scrape_interval each)
// pass between reads of the backends' model lists (upstream's models.go):
// adapters are loaded and unloaded rarely, and each read is a request to
// every backend without a configured list.
const modelsEvery = 5

// The header values kept in call.hdr.
const (
	hdrID = iota
	hdrTraceID
	hdrForwardedFor
	hdrForwardedHost
	hdrForwardedProto
	hdrBackend
	hdrCount
)

// backendName is the backend the access log and the metrics name: the
// one that answered, "cache", or "" when the gateway answered itself.
func (x *call) backendName() string {
	if x.cached {
		return "cache"
	}
	return x.req.Backend
}

// header returns the value at x.hdr[i] as a header's value list.
func (x *call) header(i int) []string { return x.hdr[i : i+1 : i+1] }

// proxyRoute serves route, registered for method ("": any, the
// pass-through), by proxying it as operation op to backends of kinds (none:
// any kind).
func (s *Server) proxyRoute(method, route string, op exchange.Operation, kinds ...string) gin.HandlerFunc {
	var ss *serverSpan
	if method != "" {
		ss = newServerSpan(method, route)
	}
	return func(c *gin.Context) {
		s.serveProxy(c.Writer, c.Request, route, ss, op, kinds, nil, "")
	}
}

// apiRoute serves a route of the Responses or Messages API: proxyRoute
// with the route's error shape, body checks and owner routing.
func (s *Server) apiRoute(method, route string, op exchange.Operation, spec routeSpec) gin.HandlerFunc {
	ss := newServerSpan(method, route)
	spec.owners = s.owners
	sp := &spec
	return func(c *gin.Context) {
		s.serveProxy(c.Writer, c.Request, route, ss, op, nil, sp, c.Param("id"))
	}
}

func (s *Server) serveProxy(w http.ResponseWriter, r *http.Request, route string, ss *serverSpan, op exchange.Operation, kinds []string, spec *routeSpec, id string) {
	s.inflight.Add(1)
	defer s.inflight.Done()
	x := &call{disp: s.disp, spec: spec, client: clientDeadlines{dl: deadlinesOf(w, r), writeTimeout: s.cfg.Limits.WriteTimeout}}
	x.req = &exchange.Request{Route: route, Operation: op, Start: time.Now(), Tenant: s.tenants.Of(r)}
	x.path = r.URL.Path
	req := x.req
	ctx := s.startServer(r, route, ss, x)
	req.Span = x.span.server.SpanContext()
	req.ID, req.TraceID = ids(r, req.Span.TraceID())
	x.hdr[hdrID], x.hdr[hdrTraceID] = req.ID, req.TraceID
	h := w.Header()
	h["X-Request-Id"] = x.header(hdrID)
	h["X-Vigil-Trace-Id"] = x.header(hdrTraceID)
	defer s.finish(r.Context(), x)

	// preprocess: read and check the request, choose the backend. Its
	// span is made only under a recording server span: Vigil's samplers
	// (tracing.New) would not record it otherwise, and it has no children.
	var pre trace.Span
	if x.span.server.IsRecording() {
		_, pre = s.tracer.Start(ctx, "preprocess")
	}
	f, body, aerr := s.preprocess(ctx, w, r, x, kinds, id)
	if pre != nil {
		pre.End()
	}
	if aerr != nil {
		s.fail(w, x, aerr)
		return
	}
	x.kinds = kinds
	if !s.admitQuota(ctx, w, x, f, body) {
		return
	}
	if x.disp != nil && op.HasPrompt() {
		x.disp.prompt(req)
	}

	if s.cache != nil && f != nil {
		if key, ok := s.cache.Key(op, f, body); ok {
			if s.cached(ctx, w, r, x, f, body, key) {
				return
			}
		}
	}
	s.forward(ctx, w, r, x, f, body)
}

// forward runs the retrieval hook and logprob injection, then the attempts.
func (s *Server) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, x *call, f *request.Fields, body []byte) {
	req, op := x.req, x.req.Operation
	if s.retrieval != nil && op == exchange.OpChat {
		var aerr *apierror.Error
		if body, aerr = s.retrieve(ctx, x, body); aerr != nil {
			s.fail(w, x, aerr)
			return
		}
	}
	// A shadow comparison is decided now, so that the client's answer can
	// serve as the backend's side of it (teacher forcing).
	x.shadow.picked = f != nil && s.shadow.Sample(op, x.backend)
	if s.shadow != nil {
		x.shadow.body, x.shadow.auth = body, r.Header.Get("Authorization")
	}
	switch {
	case x.shadow.picked && !req.Stream && inject.Eligible(op, f) && s.shadow.NamesIDs(x.backend):
		// The backend named token ids in a comparison before: ask for
		// this answer's logprobs by id, stripped from the client's bytes
		// as injected logprobs are. Another backend, on a retry, gets
		// the logprobs without the ids member it may not know.
		plain, ids := s.shadow.Injection(op)
		body, x.shadow.idsBody, x.shadow.idsBackend = inject.AppendMembers(body, plain), inject.AppendMembers(body, ids), x.backend
		req.Injected = true
		s.metrics.injections.Inc()
	case f != nil && s.inject.Sample(op, f):
		// req.Body stays the client's body; Injected tells the analyzers.
		body = s.inject.Rewrite(op, body)
		req.Injected = true
		s.metrics.injections.Inc()
	}
	if f != nil && s.cfg.Usage.Inject {
		if b, ok := inject.InjectUsage(op, f, body); ok {
			body, x.usageInjected = b, true
			s.metrics.usageInjections.Inc()
		}
	}
	s.proxy(ctx, w, r, x, body)
}

// cached serves a cacheable request from the cache, or fetches it once for
// all identical requests in flight (here, and across replicas with a shared
// store), and reports whether it answered. On false the caller forwards
// the request as usual.
func (s *Server) cached(ctx context.Context, w http.ResponseWriter, r *http.Request, x *call, f *request.Fields, body []byte, key string) bool {
	serve := func(cr *cache.Response) bool {
		x.servedFromCache(cr.Status)
		s.metrics.cacheHits.Inc()
		w.Header().Set("X-Vigil-Backend", "cache")
		cache.Serve(w, cr)
		return true
	}
	if cr := s.cache.Get(ctx, key); cr != nil {
		return serve(cr)
	}
	leader := false
	v, _, _ := s.cache.Do(key, func() (any, error) {
		leader = true
		if cr := s.cache.AwaitOther(ctx, key); cr != nil {
			return cr, nil
		}
		s.metrics.cacheMiss.Inc()
		cw := s.cache.Capture(w)
		w.Header().Set("X-Vigil-Cache", "miss")
		s.forward(ctx, cw, r, x, f, body)
		cr := cw.Result(x.answer.apiErr == nil && x.resp.readErr == nil && x.answer.status == http.StatusOK)
		if cr != nil {
			s.cache.Put(ctx, key, cr)
		}
		return servedHere{cr}, nil
	})
	switch res := v.(type) {
	case servedHere:
		if leader {
			return true // this request was the one forwarded
		}
		if res.cr != nil {
			return serve(res.cr)
		}
		return false // not cacheable after all: forward this one too
	case *cache.Response:
		return serve(res) // another replica fetched it
	}
	return false
}

// servedHere is the singleflight result of a fetch forwarded by this
// process: the cached response, or nil when it was not cacheable.
type servedHere struct{ cr *cache.Response }

// preprocess reads the body, checks the fields the route needs and picks
// the backend. f is nil for passed-through routes.
func (s *Server) preprocess(ctx context.Context, w http.ResponseWriter, r *http.Request, x *call, kinds []string, id string) (*request.Fields, []byte, *apierror.Error) {
	req := x.req
	var body []byte
	var aerr *apierror.Error
	if req.Operation == exchange.OpOther {
		if aerr := s.refuseAdmin(r); aerr != nil {
			return nil, nil, aerr
		}
	}
	if req.Operation == exchange.OpOther && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 && !bufferedBody(r) {
		// An upload: it streams to the backend as it arrives, bounded
		// by passthrough.max_upload_bytes and limits.read_timeout,
		// routed by the model a multipart form gives ahead of its file.
		limit := s.cfg.Passthrough.MaxUploadBytes
		if r.ContentLength > limit {
			return nil, nil, streamError(w, &http.MaxBytesError{Limit: limit}, limit)
		}
		if dl := x.client.dl; dl != nil && s.cfg.Limits.ReadTimeout > 0 {
			_ = dl.SetReadDeadline(time.Now().Add(s.cfg.Limits.ReadTimeout))
		}
		br := bufio.NewReaderSize(http.MaxBytesReader(w, r.Body, limit), multipartPeek)
		var err error
		if req.Model, err = multipartModel(r.Header.Get("Content-Type"), br); err != nil {
			return nil, nil, streamError(w, err, limit)
		}
		x.stream = &streamBody{r: br}
	} else if body, aerr = request.ReadBody(r, w, x.client.dl, s.cfg.Limits.MaxBodyBytes, s.cfg.Limits.ReadTimeout); aerr != nil {
		return nil, nil, aerr
	}
	req.Body = body
	var f *request.Fields
	parseAs := req.Operation
	if x.spec != nil && x.spec.parse != "" {
		parseAs = x.spec.parse
	}
	if r.Method == http.MethodPost && parseAs != exchange.OpOther {
		fields, aerr := request.Parse(parseAs, body)
		if aerr != nil {
			return nil, nil, aerr
		}
		x.fields, x.parsed = fields, true
		f = &x.fields
		req.Model, req.Stream = f.Model, f.Stream
	} else if len(body) > 0 && body[0] == '{' {
		req.Model = request.SniffModel(body)
	}
	if req.Route == "/generate_stream" {
		req.Stream = true
	}
	if x.spec != nil && x.spec.owner != ownerNone {
		b, aerr := s.ownerBackend(ctx, x, f, id)
		if aerr != nil {
			return nil, nil, aerr
		}
		if b != nil {
			x.backend, x.pinned = b, true
			return f, body, nil
		}
	}
	b, err := s.pick(r, x, parseAs, kinds, body)
	if err != nil {
		return nil, nil, pickError(err, req.Model, kinds)
	}
	x.backend = b // req.Backend is set once an attempt settles (proxy.go)
	return f, body, nil
}

func pickError(err error, model string, kinds []string) *apierror.Error {
	if errors.Is(err, upstream.ErrUnknownModel) {
		msg := fmt.Sprintf("The model `%s` does not exist or is not served by this gateway.", model)
		if len(kinds) > 0 && model != "" {
			msg = fmt.Sprintf("The model `%s` is not served by any %s backend of this gateway.", model, strings.Join(kinds, "/"))
		} else if len(kinds) > 0 {
			msg = fmt.Sprintf("no %s backend is configured for this route", strings.Join(kinds, "/"))
		}
		return apierror.New(http.StatusNotFound, "invalid_request_error", "model_not_found", msg, exchange.ClassUnknownModel)
	}
	return apierror.New(http.StatusServiceUnavailable, "server_error", "no_healthy_backend", "no healthy backend is available for this request", exchange.ClassNoBackend)
}

// captureBytes is the bound on the copy of a non-streaming body: what the
// analyzers need, or what content capture needs if that is more.
func (s *Server) captureBytes() int {
	n := s.cfg.Analyzers.MaxCaptureBytes
	if s.cfg.Tracing.CaptureContent {
		n = max(n, s.cfg.Tracing.MaxContentBytes)
	}
	return n
}

// finish ends a request: it derives the outcome, writes the access log and
// metrics and hands the response to the observer. A panic passing through
// (the proxy's http.ErrAbortHandler on a broken stream) is recorded, then
// re-raised.
func (s *Server) finish(ctx context.Context, x *call) {
	p := recover()
	now := time.Now()
	x.ended(now)
	status, class := x.outcome(ctx, p != nil)
	s.settleQuota(x, status, class)
	s.observeBackend(ctx, x, now)
	s.metrics.observe(x, status, class)
	s.endSpans(x, status, class)
	if s.access != nil {
		s.logAccess(ctx, x, status, class)
	}
	if s.disp != nil {
		// Requests the gateway answered itself (no backend chosen: bad
		// request, no healthy backend, a cache hit) reach the observer
		// too, without OnRequest, for the error rates.
		resp := &exchange.Response{
			Status: status, Latency: x.resp.latency, PromptTokens: x.resp.prompt(),
			CompletionTokens: x.resp.completionTokens, UsageSource: x.resp.usageSource, Events: x.resp.events,
			ErrorClass: class, Body: x.resp.captured, Truncated: x.resp.truncated, Gaps: x.resp.gaps,
			FirstToken: x.resp.chunks.first,
		}
		if !x.resp.firstByte.IsZero() {
			resp.TTFT = x.resp.firstByte.Sub(x.req.Start)
		}
		s.disp.response(x.req, &x.pending, resp)
	}
	if x.shadow.body != nil && x.backend != nil && class == exchange.ClassNone && status == http.StatusOK && x.shadow.picked && s.shadow.Paired(x.backend) {
		var answer []byte
		if !x.req.Stream && !x.resp.truncated && shadow.HasTokenIDs(x.resp.captured) {
			answer = x.resp.captured // its logprobs name token ids: the backend's side (teacher forcing)
		}
		s.shadow.Start(x.backend, x.req.Operation, x.shadow.body, answer, x.shadow.auth)
	}
	if p != nil {
		panic(p)
	}
}

// outcome gives the status to record and the error class of a finished request.
func (x *call) outcome(ctx context.Context, aborted bool) (int, exchange.ErrorClass) {
	if x.answer.apiErr != nil {
		return x.answer.apiErr.Status, x.answer.apiErr.Class
	}
	if (aborted || x.resp.readErr != nil) && !x.resp.complete {
		if ctx.Err() != nil {
			return apierror.StatusClientClosed, exchange.ClassClientCancel
		}
		return x.answer.status, exchange.ClassUpstream5xx
	}
	switch {
	case x.answer.status >= 500:
		return x.answer.status, exchange.ClassUpstream5xx
	case x.answer.status >= 400:
		if isPromptTooLong(x.resp.captured) {
			return x.answer.status, exchange.ClassPromptTooLong
		}
		return x.answer.status, exchange.ClassUpstream4xx
	}
	return x.answer.status, exchange.ClassNone
}

// isPromptTooLong recognises vLLM's and TGI's context-length errors.
func isPromptTooLong(body []byte) bool {
	return bytes.Contains(body, []byte("maximum context length")) ||
		bytes.Contains(body, []byte("must be <=")) ||
		bytes.Contains(body, []byte("context_length_exceeded"))
}

func (s *Server) readyz(c *gin.Context) {
	if s.draining.Load() {
		c.String(http.StatusServiceUnavailable, "shutting down\n")
		return
	}
	if s.pool.Ready() {
		c.String(http.StatusOK, "ready\n")
		return
	}
	c.String(http.StatusServiceUnavailable, "no healthy backend\n")
}

// copyBufferSize is the size of the buffer that carries a response body
// from the backend to the client. A stream holds its buffer for its whole
// life, blocked in a read between events of a few hundred bytes, so the
// buffer is most of what a long stream costs: 4 KiB, as nginx's
// proxy_buffer_size, where net/http's ReverseProxy would take 32 KiB (a
// large non-streamed body takes eight reads where it took one).
const copyBufferSize = 4 << 10

// bufferPool implements httputil.BufferPool over sync.Pool.
type bufferPool struct{ p sync.Pool }

func newBufferPool(size int) *bufferPool {
	bp := &bufferPool{}
	bp.p.New = func() any { return make([]byte, size) }
	return bp
}

func (bp *bufferPool) Get() []byte { return bp.p.Get().([]byte) }

// Put returns b to the pool. httputil.BufferPool's signature takes the
// slice itself: its header is boxed on the way in, one small allocation
// per proxied response against a pooled buffer kept.
//
//lint:ignore SA6002 the interface hands out slices, not pointers
func (bp *bufferPool) Put(b []byte) { bp.p.Put(b) }
