package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/vigil-gw/vigil/config"
)

// ScopeName is the instrumentation scope of Vigil's spans.
const ScopeName = "github.com/vigil-gw/vigil"

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME or
// OTEL_RESOURCE_ATTRIBUTES set one.
const DefaultServiceName = "vigil"

// exportRetry bounds how long the OTLP exporter retries one batch. The
// exporter's default (1 minute, first retry after 5 s) keeps a batch, and
// behind it a full queue, in memory for a minute whenever the collector is
// down; a few seconds ride out a collector restart.
var exportRetry = otlptracegrpc.RetryConfig{
	Enabled:         true,
	InitialInterval: 250 * time.Millisecond,
	MaxInterval:     time.Second,
	MaxElapsedTime:  3 * time.Second,
}

// Options configure New. The zero value of each field is usable and its
// meaning is stated on the field.
type Options struct {
	// Config is the tracing section of the Vigil config. Exporter "" means
	// "otlp"; SampleRatio is used as is (0 samples no new trace).
	Config config.Tracing
	// Version is service.version and the instrumentation scope version.
	// Empty: not set.
	Version string
	// Log receives the rate-limited warnings. Nil: slog.Default().
	Log *slog.Logger
	// Registry receives vigil_tracing_spans_exported_total and
	// vigil_tracing_spans_dropped_total. Nil: the counters are kept but
	// not exported.
	Registry prometheus.Registerer
	// Exporter, when set, replaces the exporter built from
	// Config.Exporter and the OTEL_* environment; it is wrapped for
	// counting and batched like the built one. Tests use it.
	Exporter sdktrace.SpanExporter
	// Getenv reads the environment. Nil: os.Getenv, and the SDK and OTLP
	// exporter read their own variables (see env.go for the difference).
	Getenv func(string) string
}

// Provider owns the tracer provider, its exporter and its background
// batch goroutine. Its methods are safe for concurrent use. A nil or zero
// Provider is usable: Tracer returns a no-op tracer, Propagator the W3C
// propagator, and Shutdown returns nil.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	warn   *limiter
	m      *metrics
	abort  context.CancelFunc // cancels exports still running after Shutdown

	shutdownOnce sync.Once
	shutdownErr  error
}

// propagator is stateless and shared.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// New builds a Provider. It does not connect to the collector: the OTLP
// exporter dials lazily and an unreachable collector only costs dropped
// spans and a warning a minute. It fails on a bad Config.Exporter, on an
// exporter that cannot be built, and on metrics that cannot be registered.
//
// The sampler is ParentBased(TraceIDRatioBased(Config.SampleRatio)) unless
// OTEL_TRACES_SAMPLER is set: then, with Options.Getenv nil, New passes no
// sampler and the SDK applies the variable itself (WithSampler would
// override it); with Getenv set, New reads the variable through Getenv with
// the SDK's rules and passes the result.
//
// Spans go through a batch span processor with the SDK's bounded queue
// (2048 spans, OTEL_BSP_MAX_QUEUE_SIZE) that never blocks: when the queue
// is full a finished span is dropped, and counted.
//
// New installs, once per process, an otel global error handler that routes
// SDK errors to the newest live Provider's rate-limited logger.
func New(ctx context.Context, o Options) (*Provider, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	p := &Provider{warn: newLimiter(log, warnEvery)}
	var err error
	if p.m, err = newMetrics(o.Registry); err != nil {
		return nil, err
	}

	res, err := newResource(ctx, o.Version, getenv)
	if err != nil {
		// Partial: keep what was detected (e.g. no host name) and say so.
		log.Warn("tracing: resource incomplete", "error", err)
	}

	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if s, err := sampler(o, getenv); err != nil {
		log.Warn("tracing: bad sampler environment, using the SDK's fallback", "error", err)
		if s != nil {
			opts = append(opts, sdktrace.WithSampler(s))
		}
	} else if s != nil {
		opts = append(opts, sdktrace.WithSampler(s))
	}

	exp := o.Exporter
	if exp == nil {
		if exp, err = newExporter(ctx, o, log); err != nil {
			return nil, err
		}
	}
	abortCtx, abort := context.WithCancel(context.Background())
	p.abort = abort
	if exp != nil {
		// Not WithBlocking: a full queue drops spans rather than stall a
		// request; the gate counts them (queue.go).
		size := queueSize(getenv)
		gate := &queueGate{max: int64(size), m: p.m, warn: p.warn}
		ce := &countingExporter{next: exp, m: p.m, warn: p.warn, abort: abortCtx, gate: gate}
		gate.next = sdktrace.NewBatchSpanProcessor(ce, append(batchOptions(getenv), sdktrace.WithMaxQueueSize(size))...)
		opts = append(opts, sdktrace.WithSpanProcessor(gate))
	}

	p.tp = sdktrace.NewTracerProvider(opts...)
	var tracerOpts []trace.TracerOption
	if o.Version != "" {
		tracerOpts = append(tracerOpts, trace.WithInstrumentationVersion(o.Version))
	}
	p.tracer = p.tp.Tracer(ScopeName, tracerOpts...)
	addErrorRoute(p.warn)
	return p, nil
}

// newResource builds the resource: telemetry.sdk.*, host.name, then
// service.name and service.version, then the environment, later sources
// winning.
func newResource(ctx context.Context, version string, getenv func(string) string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", DefaultServiceName)}
	if version != "" {
		attrs = append(attrs, attribute.String("service.version", version))
	}
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithAttributes(attrs...),
		resource.WithDetectors(envResource{getenv}),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		// Only conflicting schema URLs get here; fall back to the basics.
		return resource.NewSchemaless(attrs...), err
	}
	return res, err
}

// sampler returns the sampler to pass to the SDK, or nil to let the SDK
// choose (see New).
func sampler(o Options, getenv func(string) string) (sdktrace.Sampler, error) {
	if strings.TrimSpace(getenv(envTracesSampler)) == "" {
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.Config.SampleRatio)), nil
	}
	if o.Getenv == nil {
		return nil, nil // the SDK reads OTEL_TRACES_SAMPLER itself
	}
	return samplerFromEnv(getenv)
}

// newExporter builds the exporter Config.Exporter names; nil for "none".
func newExporter(ctx context.Context, o Options, log *slog.Logger) (sdktrace.SpanExporter, error) {
	switch o.Config.Exporter {
	case "none":
		return nil, nil
	case "otlp", "":
	default:
		return nil, fmt.Errorf("tracing: unknown exporter %q (want \"otlp\" or \"none\")", o.Config.Exporter)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithRetry(exportRetry)}
	if o.Getenv != nil {
		envOpts, err := otlpOptionsFromEnv(o.Getenv)
		if err != nil {
			log.Warn("tracing: bad OTLP exporter environment, ignoring those variables", "error", err)
		}
		opts = append(opts, envOpts...)
	}
	exp, err := newOTLPExporter(ctx, otlptracegrpc.NewClient(opts...))
	if err != nil {
		return nil, fmt.Errorf("tracing: otlp exporter: %w", err)
	}
	return exp, nil
}

// Tracer returns the tracer for Vigil's spans (scope ScopeName).
func (p *Provider) Tracer() trace.Tracer {
	if p == nil || p.tracer == nil {
		return noop.NewTracerProvider().Tracer(ScopeName)
	}
	return p.tracer
}

// Propagator returns the W3C trace-context and baggage propagator.
func (p *Provider) Propagator() propagation.TextMapPropagator {
	return propagator
}

// Shutdown ends new spans, exports the ones queued and stops the batch
// goroutine, waiting at most until ctx is done; exports still running then
// are aborted and their spans counted as dropped. Later calls return the
// first call's result.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	p.shutdownOnce.Do(func() {
		err := p.tp.Shutdown(ctx)
		// After a timely flush nothing is running; after a deadline this
		// frees the batch goroutine instead of leaving it in the retry loop.
		p.abort()
		removeErrorRoute(p.warn)
		if err != nil {
			p.shutdownErr = fmt.Errorf("tracing: shutdown: %w", err)
		}
	})
	return p.shutdownErr
}

// exportBatch is the most spans one export carries unless
// OTEL_BSP_MAX_EXPORT_BATCH_SIZE says otherwise. The SDK's default, 512,
// makes each export a burst of several milliseconds of encoding here and of
// ingestion in the collector; on a 2-core machine at 1000 req/s (three
// spans each) those bursts stalled requests behind them, and 64 took
// 1–2 ms off the p99 in the proxy benchmark. But the processor exports one batch at a
// time, so the batch bounds the spans exported per round trip to the
// collector: with 64, the CI soak (2,600–3,500 req/s, about 4 spans each,
// Jaeger on the same 2 cores) exported about 5,000 spans a second and
// dropped half (69,730 and 70,656 of about 144,000, two runs); with 256
// and 512 it dropped none (the CI soak).
const exportBatch = 256

// batchOptions are the span batcher's options: exportBatch unless the
// environment sets the batch size (the SDK reads it).
func batchOptions(getenv func(string) string) []sdktrace.BatchSpanProcessorOption {
	if getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") != "" {
		return nil
	}
	return []sdktrace.BatchSpanProcessorOption{sdktrace.WithMaxExportBatchSize(exportBatch)}
}
