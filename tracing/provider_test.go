package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/config"
	vtest "github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/tracing/otlptest"
)

// The tests here do not run in parallel: the otel error handler is
// process-wide and routes to the newest live Provider, and some tests
// count the warnings their Provider logs.

// env returns a Getenv over a fixed map.
func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// recorder is a slog.Handler that keeps records; safe for concurrent use.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}

func (r *recorder) warnings() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.recs {
		if rec.Level == slog.LevelWarn {
			out = append(out, rec.Message)
		}
	}
	return out
}

func newProvider(t *testing.T, o Options) *Provider {
	t.Helper()
	if o.Getenv == nil {
		o.Getenv = env()
	}
	p, err := New(t.Context(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return p
}

// flush exports what is queued. Tests read in-memory exporters after a
// flush, not after Shutdown: InMemoryExporter.Shutdown forgets its spans.
func flush(t *testing.T, p *Provider) {
	t.Helper()
	if err := p.tp.ForceFlush(t.Context()); err != nil {
		t.Fatalf("ForceFlush: %v", err)
	}
}

func resourceMap(s sdktrace.ReadOnlySpan) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Resource().Attributes() {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func TestNewExporterNone(t *testing.T) {
	p := newProvider(t, Options{Config: config.Tracing{SampleRatio: 1, Exporter: "none"}})
	_, span := p.Tracer().Start(t.Context(), "op")
	sc := span.SpanContext()
	span.End()
	if !sc.HasTraceID() || !sc.HasSpanID() || !sc.IsSampled() {
		t.Errorf("span context = %+v, want valid sampled ids", sc)
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
}

func TestNilAndZeroProvider(t *testing.T) {
	for _, p := range []*Provider{nil, {}} {
		if err := p.Shutdown(t.Context()); err != nil {
			t.Errorf("Shutdown(%v) = %v", p, err)
		}
		_, span := p.Tracer().Start(t.Context(), "op")
		if span.IsRecording() {
			t.Errorf("Tracer of %v records spans", p)
		}
		span.End()
		if p.Propagator() == nil {
			t.Errorf("Propagator of %v is nil", p)
		}
	}
}

func TestUnknownExporter(t *testing.T) {
	_, err := New(t.Context(), Options{Config: config.Tracing{Exporter: "zipkin"}, Getenv: env()})
	if err == nil {
		t.Fatal("New with exporter zipkin succeeded")
	}
}

func TestSpansCarryResource(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	reg := prometheus.NewRegistry()
	p := newProvider(t, Options{
		Config:   config.Tracing{SampleRatio: 1, Exporter: "otlp"},
		Version:  "1.2.3",
		Exporter: exp,
		Registry: reg,
	})
	_, span := p.Tracer().Start(t.Context(), "op")
	span.End()
	flush(t, p)
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 {
		t.Fatalf("exported %d spans, want 1", len(spans))
	}
	res := resourceMap(spans[0])
	for k, want := range map[string]string{
		"service.name":           "vigil",
		"service.version":        "1.2.3",
		"telemetry.sdk.language": "go",
		"telemetry.sdk.name":     "opentelemetry",
	} {
		if res[k] != want {
			t.Errorf("resource %s = %q, want %q", k, res[k], want)
		}
	}
	for _, k := range []string{"host.name", "telemetry.sdk.version"} {
		if res[k] == "" {
			t.Errorf("resource %s missing (resource %v)", k, res)
		}
	}
	scope := spans[0].InstrumentationScope()
	if scope.Name != ScopeName || scope.Version != "1.2.3" {
		t.Errorf("scope = %+v, want %s 1.2.3", scope, ScopeName)
	}
	if got := testutil.ToFloat64(p.m.exported); got != 1 {
		t.Errorf("spans exported = %v, want 1", got)
	}
	n, err := testutil.GatherAndCount(reg, "vigil_tracing_spans_exported_total", "vigil_tracing_spans_dropped_total")
	if err != nil || n != 2 {
		t.Errorf("registry has %d tracing series (err %v), want 2", n, err)
	}
}

func TestSampleRatioZero(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p := newProvider(t, Options{Config: config.Tracing{SampleRatio: 0}, Exporter: exp})
	ctx, root := p.Tracer().Start(t.Context(), "root")
	_, child := p.Tracer().Start(ctx, "child")
	child.End()
	root.End()
	for _, s := range []trace.Span{root, child} {
		sc := s.SpanContext()
		if !sc.IsValid() || sc.IsSampled() {
			t.Errorf("span context %+v: want valid ids, not sampled", sc)
		}
	}
	if root.SpanContext().TraceID() != child.SpanContext().TraceID() {
		t.Error("child has another trace id than its parent")
	}

	// Parent-based: a sampled remote parent is followed despite ratio 0.
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1},
		SpanID:     trace.SpanID{2},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	_, s := p.Tracer().Start(trace.ContextWithRemoteSpanContext(t.Context(), remote), "continued")
	s.End()
	flush(t, p)
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if diff := cmp.Diff([]string{"continued"}, names); diff != "" {
		t.Errorf("exported spans (-want +got):\n%s", diff)
	}
}

func TestResourceFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want map[string]string
	}{
		{"defaults", nil, map[string]string{"service.name": "vigil", "service.version": "v1"}},
		{"OTEL_SERVICE_NAME", []string{"OTEL_SERVICE_NAME", "gw-eu"},
			map[string]string{"service.name": "gw-eu", "service.version": "v1"}},
		{"OTEL_RESOURCE_ATTRIBUTES", []string{"OTEL_RESOURCE_ATTRIBUTES", "service.name=ra,service.version=v9,deployment.environment.name=prod%20eu"},
			map[string]string{"service.name": "ra", "service.version": "v9", "deployment.environment.name": "prod eu"}},
		{"OTEL_SERVICE_NAME beats OTEL_RESOURCE_ATTRIBUTES", []string{"OTEL_SERVICE_NAME", "sn", "OTEL_RESOURCE_ATTRIBUTES", "service.name=ra"},
			map[string]string{"service.name": "sn", "service.version": "v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			p := newProvider(t, Options{Config: config.Tracing{SampleRatio: 1}, Version: "v1", Exporter: exp, Getenv: env(tt.env...)})
			_, span := p.Tracer().Start(t.Context(), "op")
			span.End()
			flush(t, p)
			got := resourceMap(exp.GetSpans().Snapshots()[0])
			for k, want := range tt.want {
				if got[k] != want {
					t.Errorf("resource %s = %q, want %q", k, got[k], want)
				}
			}
		})
	}
}

func TestSamplerFromEnv(t *testing.T) {
	tests := []struct {
		env         []string
		ratio       float64
		wantSampled bool
	}{
		{nil, 1, true},
		{nil, 0, false},
		{[]string{"OTEL_TRACES_SAMPLER", "always_off"}, 1, false},
		{[]string{"OTEL_TRACES_SAMPLER", "always_on"}, 0, true},
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "0"}, 1, false},
		{[]string{"OTEL_TRACES_SAMPLER", "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG", "1"}, 0, true},
		// Like the SDK: a bad argument means ratio 1, an unknown sampler the default.
		{[]string{"OTEL_TRACES_SAMPLER", "traceidratio", "OTEL_TRACES_SAMPLER_ARG", "lots"}, 0, true},
		{[]string{"OTEL_TRACES_SAMPLER", "jaeger_remote"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s ratio %v", strings.Join(tt.env, "="), tt.ratio), func(t *testing.T) {
			p := newProvider(t, Options{Config: config.Tracing{SampleRatio: tt.ratio, Exporter: "none"}, Getenv: env(tt.env...)})
			_, span := p.Tracer().Start(t.Context(), "op")
			span.End()
			if got := span.SpanContext().IsSampled(); got != tt.wantSampled {
				t.Errorf("sampled = %v, want %v", got, tt.wantSampled)
			}
		})
	}
}

// TestSamplerFromProcessEnv checks the production path: with Getenv nil
// the SDK reads OTEL_TRACES_SAMPLER itself and New must not override it.
func TestSamplerFromProcessEnv(t *testing.T) {
	t.Setenv("OTEL_TRACES_SAMPLER", "always_off")
	p, err := New(t.Context(), Options{Config: config.Tracing{SampleRatio: 1, Exporter: "none"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(t.Context())
	_, span := p.Tracer().Start(t.Context(), "op")
	span.End()
	if span.SpanContext().IsSampled() {
		t.Error("OTEL_TRACES_SAMPLER=always_off ignored")
	}
}

func TestPropagator(t *testing.T) {
	p := newProvider(t, Options{Config: config.Tracing{SampleRatio: 1, Exporter: "none"}})
	ctx, span := p.Tracer().Start(t.Context(), "op")
	defer span.End()
	m, _ := baggage.NewMember("tenant", "a")
	b, _ := baggage.New(m)
	ctx = baggage.ContextWithBaggage(ctx, b)
	carrier := propagation.MapCarrier{}
	p.Propagator().Inject(ctx, carrier)
	if carrier["traceparent"] == "" || carrier["baggage"] != "tenant=a" {
		t.Fatalf("injected %v, want traceparent and baggage", carrier)
	}
	got := trace.SpanContextFromContext(p.Propagator().Extract(t.Context(), carrier))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("extracted %v, want %v", got, span.SpanContext())
	}
}

// TestOTLPFromProcessEnv exports through the production path (Getenv nil:
// the OTLP exporter reads OTEL_EXPORTER_OTLP_* itself) to a receiver.
func TestOTLPFromProcessEnv(t *testing.T) {
	r := otlptest.NewReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+r.Endpoint())
	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	p, err := New(t.Context(), Options{Config: config.Tracing{SampleRatio: 1, Exporter: "otlp"}})
	if err != nil {
		t.Fatal(err)
	}
	_, span := p.Tracer().Start(t.Context(), "op", trace.WithAttributes(attribute.String(AttrGenAIRequestModel, "m")))
	span.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	got := r.WaitFor(t, 1, 5*time.Second)[0]
	if got.Name != "op" || got.Resource["service.name"] != "from-env" || got.Attributes[AttrGenAIRequestModel] != "m" {
		t.Errorf("received %+v", got)
	}
}

func TestUnreachableCollector(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	rec := &recorder{}
	reg := prometheus.NewRegistry()
	p := newProvider(t, Options{
		Config:   config.Tracing{SampleRatio: 1, Exporter: "otlp"},
		Log:      slog.New(rec),
		Registry: reg,
		Getenv:   env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr),
	})

	start := time.Now()
	for range 100 {
		ctx, s := p.Tracer().Start(t.Context(), "server")
		_, c := p.Tracer().Start(ctx, "child")
		c.End()
		s.End()
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("200 spans took %v with a dead collector", d)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start = time.Now()
	_ = p.Shutdown(ctx) // a deadline error is expected: the spans cannot go anywhere
	if d := time.Since(start); d > 2500*time.Millisecond {
		t.Errorf("Shutdown took %v, want at most its 2 s deadline", d)
	}

	// The aborted export is counted right after Shutdown gives up.
	vtest.WaitFor(t, "200 spans counted as dropped", func() bool { return testutil.ToFloat64(p.m.dropped) >= 200 })
	if got := testutil.ToFloat64(p.m.dropped); got != 200 {
		t.Errorf("spans dropped = %v, want 200", got)
	}
	if got := testutil.ToFloat64(p.m.exported); got != 0 {
		t.Errorf("spans exported = %v, want 0", got)
	}
	if diff := cmp.Diff([]string{"tracing: span export failed, spans dropped"}, rec.warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestLimiter(t *testing.T) {
	rec := &recorder{}
	l := newLimiter(slog.New(rec), time.Minute)
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	l.warn("a", nil)
	l.warn("b", nil)
	now = now.Add(59 * time.Second)
	l.warn("c", nil)
	now = now.Add(2 * time.Second)
	l.warn("d", nil)
	if diff := cmp.Diff([]string{"a", "d"}, rec.warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	var suppressed int64
	rec.recs[1].Attrs(func(a slog.Attr) bool {
		if a.Key == "suppressed" {
			suppressed = a.Value.Int64()
		}
		return true
	})
	if suppressed != 2 {
		t.Errorf("second warning reports %d suppressed, want 2", suppressed)
	}
}

func TestOTLPOptionsFromEnvErrors(t *testing.T) {
	opts, err := otlpOptionsFromEnv(env(
		"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317",
		"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "maybe",
		"OTEL_EXPORTER_OTLP_HEADERS", "a=b,novalue",
		"OTEL_EXPORTER_OTLP_TIMEOUT", "5s",
	))
	if err == nil {
		t.Fatal("no error for bad INSECURE, HEADERS and TIMEOUT")
	}
	for _, name := range []string{"INSECURE", "HEADERS", "TIMEOUT"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if len(opts) != 2 { // endpoint and the valid header
		t.Errorf("got %d options, want 2", len(opts))
	}
}

// failing is an exporter whose every export fails.
type failing struct{}

func (failing) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errors.New("collector says no")
}
func (failing) Shutdown(context.Context) error { return nil }

func TestExportErrorsCountedAndLoggedOnce(t *testing.T) {
	rec := &recorder{}
	p := newProvider(t, Options{Config: config.Tracing{SampleRatio: 1}, Exporter: failing{}, Log: slog.New(rec)})
	for range 3 {
		_, s := p.Tracer().Start(t.Context(), "op")
		s.End()
		_ = p.tp.ForceFlush(t.Context()) // the error reaches the caller too
	}
	if got := testutil.ToFloat64(p.m.dropped); got != 3 {
		t.Errorf("spans dropped = %v, want 3", got)
	}
	if diff := cmp.Diff([]string{"tracing: span export failed, spans dropped"}, rec.warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestErrorHandlerRoutesToNewestProvider(t *testing.T) {
	older, newer := &recorder{}, &recorder{}
	newProvider(t, Options{Config: config.Tracing{Exporter: "none"}, Log: slog.New(older)})
	p := newProvider(t, Options{Config: config.Tracing{Exporter: "none"}, Log: slog.New(newer)})

	otel.Handle(&loggedError{errors.New("already reported")})
	otel.Handle(errors.New("sdk trouble"))
	otel.Handle(errors.New("more sdk trouble")) // within the minute: suppressed
	if diff := cmp.Diff([]string{"tracing: opentelemetry error"}, newer.warnings()); diff != "" {
		t.Errorf("newest Provider's warnings (-want +got):\n%s", diff)
	}
	if got := older.warnings(); len(got) != 0 {
		t.Errorf("older Provider got %v", got)
	}

	// Once the newest is shut down, errors go to the one before it.
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	otel.Handle(errors.New("later trouble"))
	if diff := cmp.Diff([]string{"tracing: opentelemetry error"}, older.warnings()); diff != "" {
		t.Errorf("older Provider's warnings (-want +got):\n%s", diff)
	}
}

// TestBatchOptions: exports carry exportBatch spans unless the environment
// sets the batch size, which the SDK then reads.
func TestBatchOptions(t *testing.T) {
	if got := batchOptions(func(string) string { return "" }); len(got) != 1 {
		t.Errorf("no environment: %d options, want the batch size", len(got))
	}
	env := func(k string) string {
		if k == "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" {
			return "256"
		}
		return ""
	}
	if got := batchOptions(env); len(got) != 0 {
		t.Errorf("OTEL_BSP_MAX_EXPORT_BATCH_SIZE set: %d options, want none (the SDK reads it)", len(got))
	}
}
