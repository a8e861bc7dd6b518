package tracing

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/vigil-gw/vigil/config"
)

// stuckExporter holds its first export until release is closed, as an
// export to a blackholed collector hangs until its timeout; it counts the
// spans it was handed.
type stuckExporter struct {
	release chan struct{}
	once    sync.Once
	spans   atomic.Int64
}

func (e *stuckExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.once.Do(func() { <-e.release })
	e.spans.Add(int64(len(spans)))
	return nil
}

func (e *stuckExporter) Shutdown(context.Context) error { return nil }

// TestQueueFullCounted: while an export hangs, spans overflow
// the queue; every span ended is then either exported or counted as
// dropped. The SDK's processor alone drops the overflow uncounted.
func TestQueueFullCounted(t *testing.T) {
	// The SDK reads the batch size and delay from the process environment.
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	exp := &stuckExporter{release: make(chan struct{})}
	rec := &recorder{}
	p := newProvider(t, Options{
		Config:   config.Tracing{SampleRatio: 1, Exporter: "otlp"},
		Exporter: exp,
		Log:      slog.New(rec),
		Getenv:   env("OTEL_BSP_MAX_QUEUE_SIZE", "16", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
	})
	const n = 100
	for range n {
		_, s := p.Tracer().Start(t.Context(), "span")
		s.End()
	}
	close(exp.release)
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	exported, dropped := exp.spans.Load(), int64(testutil.ToFloat64(p.m.dropped))
	if exported+dropped != n || exported > 16 || exported < 4 {
		t.Errorf("%d spans ended: %d exported, %d counted as dropped; want all accounted for, at most the queue's 16 exported",
			n, exported, dropped)
	}
	if got := testutil.ToFloat64(p.m.exported); int64(got) != exported {
		t.Errorf("vigil_tracing_spans_exported_total = %v, the exporter got %d", got, exported)
	}
	if diff := cmp.Diff([]string{"tracing: span queue full, spans dropped"}, rec.warnings()); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestQueueSize(t *testing.T) {
	for v, want := range map[string]int{"": sdktrace.DefaultMaxQueueSize, "100": 100, " 7 ": 7, "0": sdktrace.DefaultMaxQueueSize,
		"-3": sdktrace.DefaultMaxQueueSize, "many": sdktrace.DefaultMaxQueueSize} {
		if got := queueSize(env("OTEL_BSP_MAX_QUEUE_SIZE", v)); got != want {
			t.Errorf("OTEL_BSP_MAX_QUEUE_SIZE=%q: %d, want %d", v, got, want)
		}
	}
}
