package jaegertest_test

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/test/jaegertest"
	"github.com/vigil-gw/vigil/tracing"
)

// TestNestedSpansReachJaeger exports a server span and its client child
// with package tracing over OTLP/gRPC and reads them back from Jaeger.
func TestNestedSpansReachJaeger(t *testing.T) {
	t.Parallel()
	j := jaegertest.Start(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + j.OTLPEndpoint()}
	p, err := tracing.New(t.Context(), tracing.Options{
		Config:  config.Tracing{SampleRatio: 1, Exporter: "otlp"},
		Version: "test",
		Getenv:  func(k string) string { return env[k] },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, server := p.Tracer().Start(t.Context(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer))
	_, client := p.Tracer().Start(ctx, "chat llama", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(tracing.AttrGenAIRequestModel, "llama"),
			attribute.Int(tracing.AttrGenAIUsageOutputTokens, 7),
		))
	client.AddEvent(tracing.EventGenAIInferenceDetails)
	client.End()
	server.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}

	traceID := server.SpanContext().TraceID().String()
	spans := j.TraceWithSpans(t, traceID, 2, 15*time.Second)
	if len(spans) != 2 {
		t.Fatalf("got %d spans, want 2: %+v", len(spans), spans)
	}
	parent, child := spans[0], spans[1]
	if parent.OperationName != "POST /v1/chat/completions" || child.OperationName != "chat llama" {
		t.Fatalf("operations = %q, %q", parent.OperationName, child.OperationName)
	}
	if parent.SpanID != server.SpanContext().SpanID().String() || parent.ParentSpanID != "" {
		t.Errorf("parent span %s (parent %q), want %s as a root", parent.SpanID, parent.ParentSpanID, server.SpanContext().SpanID())
	}
	if child.ParentSpanID != parent.SpanID || len(child.References) != 1 || child.References[0].RefType != "CHILD_OF" {
		t.Errorf("child references %+v, want CHILD_OF %s", child.References, parent.SpanID)
	}
	for _, s := range spans {
		if s.ServiceName != "vigil" || s.TraceID != traceID {
			t.Errorf("span %q: service %q trace %s, want vigil %s", s.OperationName, s.ServiceName, s.TraceID, traceID)
		}
	}
	if got := child.Tags[tracing.AttrGenAIRequestModel]; got != "llama" {
		t.Errorf("child tag %s = %v", tracing.AttrGenAIRequestModel, got)
	}
	if got := child.Tags[tracing.AttrGenAIUsageOutputTokens]; got != int64(7) {
		t.Errorf("child tag %s = %#v, want int64 7", tracing.AttrGenAIUsageOutputTokens, got)
	}
	if got := child.Tags["span.kind"]; got != "client" {
		t.Errorf("child span.kind = %v, want client", got)
	}
	if got := parent.ProcessTags["service.version"]; got != "test" {
		t.Errorf("process service.version = %v, want test", got)
	}
	if len(child.Logs) != 1 || child.Logs[0].Fields["event"] != tracing.EventGenAIInferenceDetails {
		t.Errorf("child logs = %+v, want the %s event", child.Logs, tracing.EventGenAIInferenceDetails)
	}

	// Trace (no span count) returns the same once the trace has settled.
	if got := j.Trace(t, traceID, 5*time.Second); len(got) != 2 {
		t.Errorf("Trace returned %d spans, want 2", len(got))
	}
}

func TestStartSkipsWithoutBinary(t *testing.T) {
	t.Setenv(jaegertest.EnvBin, "")
	ok := t.Run("start", func(t *testing.T) {
		jaegertest.Start(t)
		t.Error("Start returned without VIGIL_JAEGER_BIN")
	})
	if !ok {
		t.Error("subtest failed instead of skipping")
	}
}

func TestStartFailsOnMissingBinary(t *testing.T) {
	t.Setenv(jaegertest.EnvBin, t.TempDir()+"/no-such-jaeger")
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }() // fatalRecorder.Fatalf panics to stop Start
		jaegertest.Start(ft)
	}()
	if !ft.failed {
		t.Error("Start did not fail the test for a missing binary")
	}
}

// fatalRecorder records Fatalf instead of ending the test.
type fatalRecorder struct {
	testing.TB
	failed bool
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(string, ...any) {
	f.failed = true
	panic("fatal")
}
