// Package analyzers turns what the gateway observes into Vigil's signals.
// A Pipeline receives requests, stream events and responses from the
// gateway's dispatcher goroutine (never from a client's request path),
// feeds the signal monitors and evaluates them on an interval.
package analyzers

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/drift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// Options configure a Pipeline. Config is required.
type Options struct {
	Config config.Analyzers
	// Registry receives the signal metrics. Nil: they are not exported.
	Registry prometheus.Registerer
	// Log receives warnings. Nil: slog.Default().
	Log *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Seed seeds the samplers' random keys. Zero: a fixed default.
	Seed uint64
	// Tracer makes the postprocess span of each sampled request, a child of
	// its server span carrying the analysis results. Nil: no spans.
	Tracer trace.Tracer
	// Sharing shares the windows with other replicas. Nil: this process's
	// own windows only.
	Sharing *Sharing
	// Alerts configures alerting on the signals, every Alerts.Period;
	// Notifier delivers (nil: alerts are computed and listed, not sent).
	// With Sharing, one replica at a time sends (a lease in the store).
	Alerts   config.Alerts
	Notifier alert.Notifier
	// Backends are the gateway's backends: those with a reference are
	// shadow-compared (signal 5), and per-backend alerts carry their name,
	// their model (when they serve exactly one) and their tier's severity.
	Backends []config.Backend
}

// maxOpen bounds the responses being parsed at once. The gateway calls
// OnResponse for every OnRequest unless the queue dropped it; beyond the
// bound the oldest parse is abandoned, so memory stays bounded either way.
const maxOpen = 8192

// A Pipeline is the analyzers behind one gateway. Its On* methods are called
// by one goroutine (the gateway's dispatcher); Run, Evaluate, Signals,
// PinBaseline and Feedback may be called concurrently with them.
type Pipeline struct {
	cfg         config.Analyzers
	log         *slog.Logger
	now         func() time.Time
	drift       *drift.Monitor      // nil when disabled
	conf        *confidence.Monitor // nil when both confidence and output are disabled
	lat         *latency.Monitor    // nil when disabled
	prec        *precision.Monitor  // nil when disabled or no backend has a reference
	calib       *calibrate.Store    // nil when confidence is disabled
	tracer      trace.Tracer        // nil: no postprocess spans
	share       *sharer             // nil without Sharing
	alerts      *alert.Engine
	alertPeriod time.Duration
	m           *metrics

	// Requests and failures by backend ("": requests no backend
	// answered), for the error rates.
	errs *errorRates
	// backendLabels are the alert labels of each backend's series;
	// gatewayLabels those of the gateway-wide ones.
	backendLabels map[string]map[string]string
	gatewayLabels map[string]string

	// With Sharing: responses remembered for calibration since the last
	// flush, written to the store so that feedback reaching another
	// replica finds them; the other replicas' labels.
	pendMu       sync.Mutex
	pending      map[string]float64
	labelVersion atomic.Int64
	remoteLabels atomic.Pointer[[]calibrate.Pair]

	// Owned by the dispatcher goroutine.
	open  map[*Request]*logprob.Accumulator
	order []*Request // FIFO of open, for eviction
	pool  []*logprob.Accumulator

	last atomic.Pointer[Signals]
}

// New builds a pipeline from validated options.
func New(o Options) (*Pipeline, error) {
	c := o.Config
	p := &Pipeline{cfg: c, log: o.Log, now: o.Now, tracer: o.Tracer, open: map[*Request]*logprob.Accumulator{}, alertPeriod: o.Alerts.Period}
	if p.alertPeriod <= 0 {
		p.alertPeriod = 5 * time.Minute
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.now == nil {
		p.now = time.Now
	}
	if c.Drift.Enabled {
		seed := o.Seed
		if seed == 0 {
			seed = 0x5eed
		}
		d, err := drift.New(c, seed)
		if err != nil {
			return nil, err
		}
		p.drift = d
	}
	if c.Confidence.Enabled || c.Output.Enabled {
		p.conf = confidence.New(c)
	}
	if c.Confidence.Enabled {
		cal := c.Calibration
		p.calib = calibrate.NewStore(cal.MaxPending, cal.TTL, cal.MaxLabels)
	}
	if c.Latency.Enabled {
		p.lat = latency.New(c)
	}
	p.errs = newErrorRates(c.Bucket, p.alertPeriod)
	p.backendLabels = backendLabels(o.Backends, o.Alerts)
	p.gatewayLabels = gatewayLabels(o.Backends, o.Alerts)
	if c.Precision.Enabled {
		var pairs []precision.Pair
		for _, b := range o.Backends {
			if b.Reference != "" {
				pairs = append(pairs, precision.Pair{Backend: b.Name, Reference: b.Reference})
			}
		}
		if len(pairs) > 0 {
			p.prec = precision.New(c, pairs)
		}
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	p.m = newMetrics(reg)
	if sh := o.Sharing; sh != nil && sh.Store != nil {
		cfg := *sh
		if cfg.Replica == "" {
			cfg.Replica = ReplicaID()
		}
		if cfg.Interval <= 0 {
			cfg.Interval = time.Second
		}
		p.share = &sharer{cfg: cfg, log: p.log, now: p.now, m: newShareMetrics(reg), dropped: map[string]int64{},
			// Long enough for the reference span and the perplexity baseline.
			ttl: c.Window + c.Reference + 10*time.Minute}
		if p.drift != nil {
			p.share.monitors = append(p.share.monitors, p.drift)
		}
		if p.conf != nil {
			p.share.monitors = append(p.share.monitors, p.conf)
		}
		if p.lat != nil {
			p.share.monitors = append(p.share.monitors, p.lat)
		}
		if p.prec != nil {
			p.share.monitors = append(p.share.monitors, p.prec)
		}
		p.share.monitors = append(p.share.monitors, p.errs)
		p.share.onPin = func(at time.Time) { p.pinAt(at) }
		p.pending = map[string]float64{}
		if p.calib != nil {
			p.share.calib = p
		}
	}
	p.alerts = p.newAlerts(o, reg)
	return p, nil
}

// newAlerts builds the alert engine: adaptive thresholds kept in the shared
// store (or in memory), and the lease that makes one replica the sender.
func (p *Pipeline) newAlerts(o Options, reg prometheus.Registerer) *alert.Engine {
	a := o.Alerts
	cfg := alert.Config{Period: a.Period, Percentile: a.Percentile, Factor: a.Factor,
		Consecutive: a.Consecutive, Silence: a.Silence, Severity: a.Severity, DashboardURL: a.DashboardURL}
	if len(a.Fixed) > 0 {
		cfg.Fixed = maps.Clone(alert.DefaultFixed)
		maps.Copy(cfg.Fixed, a.Fixed)
	}
	var store alert.Store = state.NewMemory()
	opts := []alert.Option{alert.WithLogger(p.log)}
	if p.share != nil {
		store = p.share.cfg.Store
		opts = append(opts, alert.WithLeader(alert.Leader{Store: p.share.cfg.Store, Owner: p.share.cfg.Replica}))
	}
	e := alert.NewEngine(cfg, store, p.now, o.Notifier, opts...)
	reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		st := e.Stats()
		firing := 0
		for _, al := range e.Alerts() {
			if al.State == "firing" {
				firing++
			}
		}
		ch <- prometheus.MustNewConstMetric(alertsFiringDesc, prometheus.GaugeValue, float64(firing))
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Sent), "sent")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Failed), "failed")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Dropped), "dropped")
	}))
	return e
}

// backendLabels returns, per backend name, the labels of its alert
// series: backend; model when it serves exactly one; tier and the tier's
// severity when it has a tier.
func backendLabels(bs []config.Backend, a config.Alerts) map[string]map[string]string {
	out := make(map[string]map[string]string, len(bs))
	for _, b := range bs {
		l := map[string]string{"backend": b.Name}
		if len(b.Models) == 1 {
			l["model"] = b.Models[0]
		}
		if sev, ok := a.Tiers[b.Tier]; ok && b.Tier != "" {
			l["tier"], l["severity"] = b.Tier, sev
		}
		out[b.Name] = l
	}
	return out
}

// gatewayLabels returns the labels of the gateway-wide alert series: model
// when every backend serves that one model only; tier and its severity
// when every backend has that tier. Nil when neither holds.
func gatewayLabels(bs []config.Backend, a config.Alerts) map[string]string {
	if len(bs) == 0 {
		return nil
	}
	l := map[string]string{}
	model, tier := "", bs[0].Tier
	if len(bs[0].Models) == 1 {
		model = bs[0].Models[0]
	}
	for _, b := range bs[1:] {
		if len(b.Models) != 1 || b.Models[0] != model {
			model = ""
		}
		if b.Tier != tier {
			tier = ""
		}
	}
	if model != "" {
		l["model"] = model
	}
	if sev, ok := a.Tiers[tier]; ok && tier != "" {
		l["tier"], l["severity"] = tier, sev
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

// labelsOf returns backend's alert labels; an unknown name (a backend
// the options did not list) gets only its name.
func (p *Pipeline) labelsOf(backend string) map[string]string {
	if l, ok := p.backendLabels[backend]; ok {
		return l
	}
	return map[string]string{"backend": backend}
}

// ObserveAlerts feeds the latest signals, the period's error rates and
// the precision pairs to the alert engine; Run calls it every
// alerts.period. The gateway-wide signals make one series per rule; the
// error rate makes one per backend (and one, without a backend label, for
// requests that no backend answered), precision one per compared backend.
func (p *Pipeline) ObserveAlerts(ctx context.Context) {
	s := p.last.Load()
	if s == nil {
		s = p.Evaluate()
	}
	var values []alert.Value
	for rule, v := range gatewayValues(s) {
		v.Rule, v.Labels = rule, p.gatewayLabels
		values = append(values, v)
	}
	now := p.now()
	for backend, c := range p.errs.since(now.Add(-p.alertPeriod), now) {
		if c[0] == 0 {
			continue
		}
		v := alert.Value{Rule: alert.RuleErrorRate, V: float64(c[1]) / float64(c[0]), N: c[0]}
		v.Labels = p.gatewayLabels
		if backend != "" {
			v.Labels = p.labelsOf(backend)
		}
		values = append(values, v)
	}
	if pr, ok := s.Precision.(precision.Result); ok {
		for _, pair := range pr.Pairs {
			if pair.State != precision.StateUnknown {
				values = append(values, alert.Value{Rule: alert.RulePrecision, V: float64(pair.KL), Labels: p.labelsOf(pair.Backend)})
			}
		}
	}
	p.alerts.ObserveValues(ctx, values)
}

// gatewayValues are the rule values of the gateway-wide signals in s.
func gatewayValues(s *Signals) map[string]alert.Value {
	in := alert.Signals{}
	if d, ok := s.Drift.(drift.Result); ok {
		in.Drift = &d
	}
	if c, ok := s.Confidence.(Confidence); ok {
		in.Confidence = &c.Decay
	}
	if o, ok := s.Output.(confidence.Output); ok {
		in.Output = &o
	}
	if l, ok := s.Latency.(latency.Result); ok {
		in.Latency = &l
	}
	return alert.Values(in)
}

// failed reports whether an error class is a failure of the backends (or
// the gateway), as error rates count them: 5xx, timeouts, no backend; not
// clients' bad requests or cancellations.
func failed(class string) bool {
	switch class {
	case "upstream_5xx", "timeout", "no_backend":
		return true
	}
	return false
}

// OnShadow records one shadow comparison (signal 5). It is safe for
// concurrent use; the gateway calls it from its shadow workers.
func (p *Pipeline) OnShadow(sh *Shadow) {
	if p.prec == nil {
		return
	}
	parse := precision.ParseChat
	if sh.Operation == "text_completion" {
		parse = precision.ParseCompletion
	}
	b, errB := parse(sh.BackendBody)
	r, errR := parse(sh.ReferenceBody)
	if errB != nil || errR != nil {
		p.m.precisionResults.WithLabelValues("unreadable").Inc()
		p.log.Debug("shadow comparison unreadable", "backend", sh.Backend, "reference", sh.Reference, "err", errors.Join(errB, errR))
		return
	}
	c := precision.Compare(b, r)
	if p.prec.Add(sh.Time, precision.Pair{Backend: sh.Backend, Reference: sh.Reference}, &c) {
		p.m.precisionResults.WithLabelValues("compared").Inc()
	}
}

// Alerts lists the alerts for /admin/alerts.
func (p *Pipeline) Alerts(context.Context) (any, error) { return p.alerts.Alerts(), nil }

// formatOf maps an operation to the logprob format of its response; ok is
// false for operations without generated tokens.
func formatOf(r *Request) (logprob.Format, bool) {
	switch r.Operation {
	case "chat":
		return logprob.OpenAIChat, true
	case "text_completion":
		return logprob.OpenAICompletion, true
	case "generate":
		if r.Stream {
			return logprob.TGIStream, true
		}
		return logprob.TGIGenerate, true
	}
	return 0, false
}

// OnRequest starts parsing the response of a generation request.
func (p *Pipeline) OnRequest(r *Request) {
	f, ok := formatOf(r)
	if !ok || p.conf == nil && p.lat == nil {
		return
	}
	if len(p.order) >= maxOpen {
		p.close(p.order[0])
		p.m.abandoned.Inc()
	}
	var a *logprob.Accumulator
	if n := len(p.pool); n > 0 {
		a, p.pool = p.pool[n-1], p.pool[:n-1]
	} else {
		a = new(logprob.Accumulator)
	}
	a.Reset(f, logprob.Options{LowProb: p.cfg.Confidence.LowProb})
	p.open[r] = a
	p.order = append(p.order, r)
}

// close forgets r's accumulator and returns it to the pool.
func (p *Pipeline) close(r *Request) {
	a, ok := p.open[r]
	if !ok {
		return
	}
	delete(p.open, r)
	for i, q := range p.order {
		if q == r {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	p.pool = append(p.pool, a)
}

// OnEvent parses one SSE event of a streamed response.
func (p *Pipeline) OnEvent(r *Request, data []byte) {
	if a := p.open[r]; a != nil {
		if err := a.AddEvent(data); err != nil {
			p.m.parseErrors.Inc()
		}
	}
}

// OnResponse finishes a response: the prompt's features go to the drift
// windows, its confidence and timings to theirs.
func (p *Pipeline) OnResponse(r *Request, resp *Response) {
	t := r.Start.Add(resp.Latency)
	p.errs.add(t, r.Backend, failed(resp.ErrorClass))
	var attrs []attribute.KeyValue
	if p.tracer != nil && r.Span.IsSampled() {
		defer func() { p.postprocessSpan(r, attrs) }()
	}
	if p.drift != nil && promptOperation(r.Operation) {
		if f, err := drift.Extract(r.Body); err != nil {
			p.m.featureErrors.Inc()
		} else {
			if resp.PromptTokens > 0 {
				f.Vector[drift.FeatTokens] = float64(resp.PromptTokens)
			}
			p.drift.Add(r.Start, &f)
		}
	}
	a := p.open[r]
	if a == nil {
		return
	}
	defer p.close(r)
	if !r.Stream && len(resp.Body) > 0 {
		if err := a.AddBody(resp.Body); err != nil && !resp.Truncated {
			p.m.parseErrors.Inc()
		}
	}
	if resp.Status != 200 || resp.ErrorClass != "" {
		return
	}
	s := a.Summary()
	if s.Tokens > 0 {
		attrs = append(attrs,
			attribute.Int("vigil.logprob.tokens", s.Tokens),
			attribute.Float64("vigil.logprob.mean", s.MeanLogprob),
			attribute.Float64("vigil.perplexity", s.Perplexity),
			attribute.Float64("vigil.logprob.entropy", s.MeanEntropy),
			attribute.Float64("vigil.logprob.low_share", s.LowShare))
	}
	if p.conf != nil {
		p.conf.Add(t, &s)
		p.m.observeResponse(&s)
	}
	if p.calib != nil && s.ID != "" && s.Tokens > 0 {
		conf := math.Exp(s.MeanLogprob)
		p.calib.Remember(s.ID, conf, t)
		if p.share != nil {
			p.pendMu.Lock()
			if len(p.pending) < maxPendingShare {
				p.pending[s.ID] = conf
			} else {
				p.m.calibDropped.Inc()
			}
			p.pendMu.Unlock()
		}
	}
	if p.lat != nil {
		smp := sample(r, resp, &s)
		var anomalous []string
		for i, bad := range p.lat.Add(t, &smp) {
			if bad {
				p.m.latencyAnomalies.WithLabelValues(latency.Names[i]).Inc()
				anomalous = append(anomalous, latency.Names[i])
			}
		}
		if len(anomalous) > 0 {
			attrs = append(attrs, attribute.StringSlice("vigil.latency.anomalous", anomalous))
		}
	}
}

// postprocessSpan records the analysis of one response as a child of its
// server span. It runs after the response ended, off the request path, so
// its start is the time of analysis.
func (p *Pipeline) postprocessSpan(r *Request, attrs []attribute.KeyValue) {
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), r.Span)
	_, sp := p.tracer.Start(ctx, "postprocess", trace.WithAttributes(attrs...))
	sp.End()
}

// sample derives a response's timings.
func sample(r *Request, resp *Response, s *logprob.Summary) latency.Sample {
	nan := math.NaN()
	smp := latency.Sample{Values: [latency.NumMetrics]float64{nan, nan, nan, nan}, MeanLogprob: nan}
	total := resp.Latency.Seconds()
	smp.Values[latency.E2E] = total
	tokens := max(resp.CompletionTokens, s.OutputTokens)
	gen := total
	if r.Stream && resp.TTFT > 0 {
		ttft := resp.TTFT.Seconds()
		smp.Values[latency.TTFT] = ttft
		gen = total - ttft
		if tokens > 1 {
			smp.Values[latency.ITL] = gen / float64(tokens-1)
		}
	}
	if tokens > 0 && gen > 0 {
		smp.Values[latency.TPS] = float64(tokens) / gen
	}
	if s.Tokens > 0 {
		smp.MeanLogprob = s.MeanLogprob
	}
	return smp
}

func promptOperation(op string) bool {
	switch op {
	case "chat", "text_completion", "generate", "embeddings":
		return true
	}
	return false
}

// Run evaluates the signals every interval, and flushes the windows to the
// shared store when there is one, until ctx is done.
func (p *Pipeline) Run(ctx context.Context) error {
	var wg sync.WaitGroup // the flusher and the alert sender: both end with ctx
	defer wg.Wait()
	if p.share != nil {
		wg.Go(func() { p.share.Run(ctx) })
	}
	wg.Go(func() { p.alerts.Run(ctx) })
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	at := time.NewTicker(p.alertPeriod)
	defer at.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Evaluate()
		case <-at.C:
			p.ObserveAlerts(ctx)
		}
	}
}

// Flush shares the windows now (a no-op without Sharing).
func (p *Pipeline) Flush(ctx context.Context) {
	if p.share != nil {
		p.share.flush(ctx)
	}
}

// Evaluate runs one evaluation of every signal now, publishes it and
// returns it.
func (p *Pipeline) Evaluate() *Signals {
	now := p.now()
	s := &Signals{Evaluated: now.UTC()}
	unknown := struct {
		State string `json:"state"`
	}{"unknown"}
	s.Drift, s.Confidence, s.Latency, s.Output, s.Precision = unknown, unknown, unknown, unknown, unknown
	s.Window = Window{Start: now.UTC(), End: now.UTC()}
	if p.drift != nil {
		res := p.drift.Evaluate(now)
		s.Drift = res
		s.Window = Window{Start: res.CurrentStart, End: res.Evaluated, Requests: res.Current}
		p.m.publishDrift(&res)
	}
	if p.conf != nil {
		d, o := p.conf.Evaluate(now)
		if p.cfg.Confidence.Enabled {
			rep := calibrate.Compute(p.pairs(), p.cfg.Calibration.Bins)
			s.Confidence = Confidence{Decay: d, Calibration: rep}
			p.m.publishConfidence(&d, &rep)
		}
		if p.cfg.Output.Enabled {
			s.Output = o
			p.m.publishOutput(&o)
		}
	}
	if p.lat != nil {
		l := p.lat.Evaluate(now)
		s.Latency = l
		p.m.publishLatency(&l)
	}
	if p.prec != nil {
		r := p.prec.Evaluate(now)
		s.Precision = r
		p.m.publishPrecision(&r)
	}
	p.last.Store(s)
	return s
}

// PinBaseline pins the current windows as every signal's reference, here
// and, through the shared store, on every replica.
func (p *Pipeline) PinBaseline(ctx context.Context) error {
	now := p.now()
	err := p.pinAt(now) // an error may concern one signal: the others are pinned
	if p.share != nil {
		if serr := p.share.pin(ctx, now); serr != nil {
			p.log.Warn("baseline pinned here but not shared with other replicas", "err", serr)
		}
	}
	p.Evaluate()
	return err
}

// pinAt pins the windows as of at.
func (p *Pipeline) pinAt(at time.Time) error {
	var err error
	if p.drift != nil {
		err = p.drift.Pin(at)
	}
	if p.conf != nil {
		p.conf.Pin(at)
	}
	if p.lat != nil {
		p.lat.Pin(at)
	}
	if p.drift == nil && p.conf == nil && p.lat == nil {
		err = errors.New("every signal is disabled")
	}
	return err
}

// ErrUnknownResponse is returned by Feedback for a response id that is not
// (or no longer) remembered.
var ErrUnknownResponse = errors.New("unknown response id")

// Feedback joins a user's label to a remembered response, for calibration.
// Responses are remembered when they carried logprobs and an id (OpenAI
// APIs), for analyzers.calibration.ttl.
func (p *Pipeline) Feedback(ctx context.Context, id string, correct bool) error {
	if p.calib == nil {
		return errors.New("calibration needs analyzers.confidence.enabled")
	}
	err := p.calib.Label(id, correct, p.now())
	if errors.Is(err, calibrate.ErrUnknown) && p.share != nil {
		// Served by another replica? It wrote the response's confidence
		// to the store.
		if conf, ok := p.share.remembered(ctx, id); ok {
			p.calib.Remember(id, conf, p.now())
			err = p.calib.Label(id, correct, p.now())
		}
	}
	if errors.Is(err, calibrate.ErrUnknown) {
		return ErrUnknownResponse
	}
	if err == nil {
		p.labelVersion.Add(1)
	}
	return err
}

// maxPendingShare bounds the remembered responses waiting for a flush;
// beyond it they stay local (feedback must then reach the same replica),
// counted in vigil_calibration_unshared_total.
const maxPendingShare = 100000

// takePending returns and clears the responses remembered since the last
// flush.
func (p *Pipeline) takePending() map[string]float64 {
	p.pendMu.Lock()
	defer p.pendMu.Unlock()
	out := p.pending
	p.pending = map[string]float64{}
	return out
}

// pairs is the labelled pairs of this replica and, with Sharing, the others'.
func (p *Pipeline) pairs() []calibrate.Pair {
	local := p.calib.Pairs()
	if r := p.remoteLabels.Load(); r != nil {
		local = append(local, *r...)
	}
	return local
}

// Confidence is the confidence signal with the calibration of its
// confidences against feedback labels.
type Confidence struct {
	confidence.Decay
	Calibration calibrate.Report `json:"calibration"`
}

// Signals is the picture /admin/signals shows.
type Signals struct {
	Window     Window    `json:"window"`
	Evaluated  time.Time `json:"evaluated"`
	Drift      any       `json:"drift"`
	Confidence any       `json:"confidence"`
	Latency    any       `json:"latency"`
	Output     any       `json:"output"`
	Precision  any       `json:"precision"`
}

// Window is the span the signals describe: the drift signal's current window.
type Window struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Requests int64     `json:"requests"`
}

// Signals returns the latest evaluation (evaluating now if none ran yet).
func (p *Pipeline) Signals(context.Context) (any, error) {
	if s := p.last.Load(); s != nil {
		return s, nil
	}
	return p.Evaluate(), nil
}
