package tracing

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// errQueueFull is what the warning about spans dropped at the queue says.
var errQueueFull = errors.New("span queue full")

// queueGate sits in front of the batch span processor and lets a sampled
// span in only while fewer than max spans are queued or being exported,
// max being the processor's queue size, so that the processor never finds
// its queue full. The SDK's processor drops a span that finds it full
// without a word (its count is internal): with the collector blackholed,
// exports hang for their timeout, the queue fills in seconds and every
// span after that vanished uncounted. The gate drops those
// spans itself and counts them in vigil_tracing_spans_dropped_total. It
// takes no lock: one atomic add per span. It is safe for concurrent use.
type queueGate struct {
	next sdktrace.SpanProcessor
	max  int64
	m    *metrics
	warn *limiter
	// outstanding are the spans let in and not yet through ExportSpans
	// (queued, batched or being exported).
	outstanding atomic.Int64
}

var _ sdktrace.SpanProcessor = (*queueGate)(nil)

// OnStart implements sdktrace.SpanProcessor.
func (g *queueGate) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) { g.next.OnStart(ctx, s) }

// OnEnd hands s to the batch processor, or drops and counts it when the
// processor holds max spans already. Spans not sampled go through: the
// processor ignores them.
func (g *queueGate) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() && g.outstanding.Add(1) > g.max {
		g.outstanding.Add(-1)
		g.m.dropped.Inc()
		g.warn.warn("tracing: span queue full, spans dropped", errQueueFull)
		return
	}
	g.next.OnEnd(s)
}

// Shutdown implements sdktrace.SpanProcessor.
func (g *queueGate) Shutdown(ctx context.Context) error { return g.next.Shutdown(ctx) }

// ForceFlush implements sdktrace.SpanProcessor.
func (g *queueGate) ForceFlush(ctx context.Context) error { return g.next.ForceFlush(ctx) }

// release records n spans that left the processor through ExportSpans,
// delivered or not. Safe on a nil gate.
func (g *queueGate) release(n int) {
	if g != nil {
		g.outstanding.Add(-int64(n))
	}
}

// queueSize is the batch processor's queue size: OTEL_BSP_MAX_QUEUE_SIZE
// when it is a positive integer, else the SDK's default, as the SDK reads
// it. It is passed to the processor explicitly, so that the gate and the
// queue agree whatever the environment says.
func queueSize(getenv func(string) string) int {
	if n, err := strconv.Atoi(strings.TrimSpace(getenv("OTEL_BSP_MAX_QUEUE_SIZE"))); err == nil && n > 0 {
		return n
	}
	return sdktrace.DefaultMaxQueueSize
}
