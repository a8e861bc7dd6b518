package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// warnEvery is the least time between two warnings of one Provider: an
// unreachable collector fails every batch, and one line a minute says so.
const warnEvery = time.Minute

// limiter logs warnings at most once per interval and counts the ones it
// suppressed, which the next warning reports. It is safe for concurrent
// use and takes no lock.
type limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	next       atomic.Int64 // unix nanos before which warnings are suppressed
	suppressed atomic.Int64
}

func newLimiter(log *slog.Logger, every time.Duration) *limiter {
	return &limiter{log: log, every: every, now: time.Now}
}

// warn logs msg with err and attrs unless a warning was logged less than
// l.every ago.
func (l *limiter) warn(msg string, err error, attrs ...any) {
	now := l.now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(l.every)) {
		l.suppressed.Add(1)
		return
	}
	attrs = append(attrs, slog.Any("error", err))
	if n := l.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.log.Warn(msg, attrs...)
}

// loggedError marks an export error that the exporter already counted and
// logged, so that the otel error handler, which the batch span processor
// hands the same error to, does not report it a second time.
type loggedError struct{ err error }

func (e *loggedError) Error() string { return e.err.Error() }
func (e *loggedError) Unwrap() error { return e.err }

// countingExporter wraps the real exporter: it counts spans exported and
// spans lost to export errors, logs failures through the limiter, and
// aborts exports still running once the Provider gives up on shutdown. It
// is safe for concurrent use, as SpanExporter requires.
type countingExporter struct {
	next  sdktrace.SpanExporter
	m     *metrics
	warn  *limiter
	abort context.Context // canceled when Shutdown's deadline passed
	gate  *queueGate      // told of every span that leaves; nil: none
}

var _ sdktrace.SpanExporter = (*countingExporter)(nil)

// errAborted is the cause of exports canceled by Provider.Shutdown.
var errAborted = errors.New("tracing: export aborted by shutdown")

// ExportSpans exports spans through the wrapped exporter. On error the
// spans are gone (the batch processor does not retry; the OTLP exporter
// already did within its short retry budget).
func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	defer e.gate.release(len(spans))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(e.abort, func() { cancel(errAborted) })
	defer stop()

	err := e.next.ExportSpans(ctx, spans)
	if err != nil {
		if c := context.Cause(ctx); c != nil && !errors.Is(err, c) {
			err = errors.Join(err, c)
		}
		e.m.dropped.Add(float64(len(spans)))
		e.warn.warn("tracing: span export failed, spans dropped", err, slog.Int("spans", len(spans)))
		return &loggedError{err}
	}
	e.m.exported.Add(float64(len(spans)))
	return nil
}

// Shutdown shuts the wrapped exporter down.
func (e *countingExporter) Shutdown(ctx context.Context) error {
	return e.next.Shutdown(ctx)
}
