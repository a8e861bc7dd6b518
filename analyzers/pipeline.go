// Package analyzers turns what the gateway observes into Vigil's signals.
// A Pipeline receives requests, stream events and responses from the
// gateway's dispatcher goroutine (never from a client's request path),
// feeds the signal monitors and evaluates them on an interval.
package analyzers

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/embed"
	"github.com/vigil-gw/vigil/analyzers/errrate"
	"github.com/vigil-gw/vigil/analyzers/history"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/analyzers/usage"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
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
	// Tracer makes the postprocess span of each sampled request, a child of
	// its server span carrying the analysis results. Nil: no spans.
	Tracer trace.Tracer
	// Sharing shares the windows with other replicas. Nil: this process's
	// own windows only.
	Sharing *share.Config
	// Alerts configures alerting on the signals, every Alerts.Period (zero
	// values: config.DefaultAlerts()'s);
	// Notifier delivers (nil: alerts are computed and listed, not sent).
	// With Sharing, one replica at a time sends (a lease in the store).
	Alerts   config.Alerts
	Notifier alert.Notifier
	// BackendStates, when set, tells the backends' state as the gateway
	// sees it, for the history (internal/app wires the gateway's). Nil:
	// the history has no backends.
	BackendStates func() []exchange.BackendState
	// BaseModel returns the base model of a LoRA adapter (vLLM's
	// /v1/models "parent"), empty for any other name; the segment of an
	// adapter records it and its alerts carry it as base_model. Nil: no
	// adapter is known. It must be cheap and safe for concurrent use.
	BaseModel func(model string) string
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
// PinBaseline, Feedback and Usage may be called concurrently with them.
type Pipeline struct {
	cfg config.Analyzers
	log *slog.Logger
	now func() time.Time
	// fleet are the monitors of the whole traffic, every model's; segs
	// those of each model.
	fleet  []monitor
	prec   *precision.Monitor // nil when disabled or no backend has a reference
	calib  *feedback          // nil when confidence is disabled
	segs   *segments          // every signal but precision per model
	tracer trace.Tracer       // nil: no postprocess spans
	share  *share.Sharer      // nil without Sharing
	alerts *alert.Engine
	hist   *history.Ring
	// backendStates is Options.BackendStates.
	backendStates func() []exchange.BackendState
	alertPeriod   time.Duration
	alertPeriods  atomic.Int64 // ObserveAlerts calls, for AlertPeriods
	// outMu guards outSince: when ObserveAlerts first saw each backend
	// out of service (unhealthy or ejected), while it stays out.
	outMu    sync.Mutex
	outSince map[string]time.Time
	m        *metrics

	// Requests and failures by backend (or by model, for requests the
	// gateway answered itself), for the error rates and the SLO.
	errs   *errrate.Rates
	speeds *speeds // each backend's latest good answers, for its slowness
	slo    config.SLO
	models map[string]bool // the configured models: bounded error-rate keys
	usage  *usage.Ledger   // token usage by tenant, model and backend
	// backendLabels are the alert labels of each backend's series;
	// gatewayLabels those of the gateway-wide ones.
	backendLabels map[string]map[string]string
	gatewayLabels map[string]string

	// Owned by the dispatcher goroutine.
	// scratch holds the observation being handed to the monitors: on
	// the heap once, not at every request (a value passed to an
	// interface method escapes).
	scratch struct {
		obs      observation
		features inputdrift.Features
		reader   content.Reader
		doc      content.Doc
		summary  logprob.Summary
		sample   latency.Sample
	}
	open  map[*exchange.Request]*logprob.Accumulator
	order []*exchange.Request // FIFO of open, for eviction
	pool  []*logprob.Accumulator

	// embed embeds a sample of prompts for the embedding test (nil:
	// off); embedPick, the dispatcher's, draws that sample.
	embed     *embed.Client
	embedPick *rand.Rand

	last atomic.Pointer[Signals]
	// unscored counts the responses served through an API without
	// logprobs (the Messages API), which the confidence and output
	// signals cannot see; their Sources say so once there was one.
	unscored atomic.Int64
}

// New builds a pipeline from validated options.
func New(o Options) (*Pipeline, error) {
	c := o.Config
	p := &Pipeline{cfg: c, log: o.Log, now: o.Now, tracer: o.Tracer, open: map[*exchange.Request]*logprob.Accumulator{}, alertPeriod: o.Alerts.Period}
	if p.alertPeriod <= 0 {
		p.alertPeriod = config.DefaultAlerts().Period
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.now == nil {
		p.now = time.Now
	}
	var err error
	if p.fleet, err = newMonitors(c, uint64(c.Seed), false, nil); err != nil {
		return nil, err
	}
	span := p.alertPeriod
	if o.Alerts.SLO.ErrorRate > 0 {
		for _, w := range o.Alerts.SLO.Windows {
			span = max(span, w.Long)
		}
	}
	p.errs = errrate.New(c.Bucket, span)
	p.speeds = newSpeeds()
	p.slo = o.Alerts.SLO
	p.models = map[string]bool{}
	for _, b := range o.Backends {
		for _, m := range b.Models {
			p.models[m] = true
		}
	}
	var backends []string
	for _, b := range o.Backends {
		backends = append(backends, b.Name)
	}
	// A segment reports its requests and error rate over analyzers.window
	// (/admin/signals), which may be longer than any alert's span.
	p.segs = newSegments(c, max(span, c.Window), o.BaseModel, slices.Collect(maps.Keys(p.models)), backends)
	p.usage = usage.New(p.models, o.Backends)
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
	reg.MustRegister(collectorFunc(p.collectSegments))
	shared := o.Sharing != nil && o.Sharing.Store != nil
	if c.Confidence.Enabled {
		cal := c.Calibration
		p.calib = newFeedback(calibrate.NewStore(cal.MaxPending, cal.TTL, cal.MaxLabels), cal.TTL, shared, p.m.calibDropped)
	}
	p.hist = history.NewRing(c.Interval)
	if shared {
		// Long enough for the reference span and the perplexity baseline;
		// the usage series set their own (share.Policy).
		ttl := c.Window + c.Reference + 10*time.Minute
		p.share = share.New(*o.Sharing, ttl, p.log, p.now, reg, func(at time.Time) { p.pinAt(at) })
		for _, m := range p.fleet {
			p.share.Add(m)
		}
		if p.prec != nil {
			p.share.Add(p.prec)
		}
		p.share.Add(p.errs, p.usage, p.segs)
		st, replica := p.share.Config().Store, p.share.Config().Replica
		if calib := p.calib; calib != nil {
			p.share.AddSync(func(ctx context.Context, seq uint64, flush int) error {
				// The other replicas' labels change slowly: read them every tenth flush.
				return calib.sync(ctx, st, replica, seq, flush%10 == 1)
			})
		}
		p.share.AddSync(func(ctx context.Context, seq uint64, _ int) error {
			return p.hist.Share(ctx, st, replica, seq)
		})
	}
	if e := c.Drift.Text.Embeddings; c.Drift.Enabled && c.Drift.Text.Enabled && e.On() {
		i := slices.IndexFunc(o.Backends, func(b config.Backend) bool { return b.Name == e.Backend })
		if i < 0 {
			return nil, fmt.Errorf("analyzers.drift.text.embeddings.backend: no backend named %q", e.Backend)
		}
		p.embed = embed.New(e, o.Backends[i].URL, reg, p.log)
		p.embedPick = rand.New(rand.NewPCG(uint64(c.Seed), 0xe3b))
	}
	p.alerts = p.newAlerts(o, reg)
	p.backendStates = o.BackendStates
	return p, nil
}

// newAlerts builds the alert engine: adaptive thresholds kept in the shared
// store (or in memory), and the lease that makes one replica the sender.
