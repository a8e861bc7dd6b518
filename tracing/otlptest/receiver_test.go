package otlptest_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/tracing"
	"github.com/vigil-gw/vigil/tracing/otlptest"
)

func TestReceiver(t *testing.T) {
	t.Parallel()
	r := otlptest.NewReceiver(t)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + r.Endpoint(),
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_RESOURCE_ATTRIBUTES":    "deployment.environment.name=test",
	}
	p, err := tracing.New(t.Context(), tracing.Options{
		Config:  config.Tracing{SampleRatio: 1, Exporter: "otlp"},
		Version: "v0.0.1",
		Getenv:  func(k string) string { return env[k] },
	})
	if err != nil {
		t.Fatal(err)
	}

	ctx, server := p.Tracer().Start(t.Context(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.Int(tracing.AttrHTTPResponseStatusCode, 502)))
	_, client := p.Tracer().Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(tracing.AttrGenAIRequestModel, "m"),
			attribute.Float64(tracing.AttrGenAIRequestTemperature, 0.5),
			attribute.Bool("retried", true),
			attribute.StringSlice(tracing.AttrGenAIResponseFinishReasons, []string{"stop"}),
		))
	client.AddEvent(tracing.EventGenAIInferenceDetails, trace.WithAttributes(attribute.String(tracing.AttrGenAIInputMessages, `[]`)))
	client.SetStatus(codes.Error, "upstream reset")
	client.End()
	server.End()
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}

	spans := r.WaitFor(t, 2, 5*time.Second)
	sc, cc := server.SpanContext(), client.SpanContext()
	res := map[string]any{
		"service.name":                "vigil",
		"service.version":             "v0.0.1",
		"deployment.environment.name": "test",
	}
	want := []otlptest.Span{
		{
			Name: "chat m", Kind: "client",
			TraceID: cc.TraceID().String(), SpanID: cc.SpanID().String(), ParentSpanID: sc.SpanID().String(),
			Attributes: map[string]any{
				tracing.AttrGenAIRequestModel:          "m",
				tracing.AttrGenAIRequestTemperature:    0.5,
				"retried":                              true,
				tracing.AttrGenAIResponseFinishReasons: []any{"stop"},
			},
			Events:     []otlptest.Event{{Name: tracing.EventGenAIInferenceDetails, Attributes: map[string]any{tracing.AttrGenAIInputMessages: "[]"}}},
			StatusCode: "error", StatusMessage: "upstream reset",
			Resource: res, Scope: tracing.ScopeName,
		},
		{
			Name: "POST /v1/chat/completions", Kind: "server",
			TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(),
			Attributes: map[string]any{tracing.AttrHTTPResponseStatusCode: int64(502)},
			StatusCode: "unset",
			Resource:   res, Scope: tracing.ScopeName,
		},
	}
	// Compare only the resource keys named in want: host.name and
	// telemetry.sdk.* vary by machine and SDK version.
	for i := range spans {
		for k := range spans[i].Resource {
			if _, ok := res[k]; !ok {
				delete(spans[i].Resource, k)
			}
		}
		if spans[i].Start.IsZero() || spans[i].End.Before(spans[i].Start) {
			t.Errorf("span %q: start %v, end %v", spans[i].Name, spans[i].Start, spans[i].End)
		}
	}
	if diff := cmp.Diff(want, spans, cmpopts.IgnoreFields(otlptest.Span{}, "Start", "End")); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
	if got := r.Spans(); len(got) != 2 {
		t.Errorf("Spans() has %d spans, want 2", len(got))
	}
}

func TestWaitForTimesOut(t *testing.T) {
	t.Parallel()
	r := otlptest.NewReceiver(t)
	ft := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = recover() }() // our FailNow panics to stop the goroutine
		r.WaitFor(ft, 1, 50*time.Millisecond)
	}()
	<-done
	if !ft.failed {
		t.Error("WaitFor did not fail the test with no spans")
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
