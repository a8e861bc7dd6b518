package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/config"
)

// discard is an exporter that drops every batch: the benchmark measures the
// request path (span creation, attributes, end, enqueue), not the network.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkSpan is the tracing cost of one proxied request: a server span
// with three children (preprocess, inference, postprocess) and 12
// attributes, all sampled, batched to an exporter that discards.
func BenchmarkSpan(b *testing.B) {
	p, err := New(b.Context(), Options{
		Config:   config.Tracing{SampleRatio: 1},
		Exporter: discard{},
		Getenv:   env(),
	})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	tr := p.Tracer()
	ctx := b.Context()

	b.ReportAllocs()
	for b.Loop() {
		sctx, server := tr.Start(ctx, "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(
				attribute.String(AttrHTTPRequestMethod, "POST"),
				attribute.String(AttrURLPath, "/v1/chat/completions"),
				attribute.String(AttrGenAIOperationName, OperationChat),
			))

		_, pre := tr.Start(sctx, "preprocess")
		pre.End()

		_, inf := tr.Start(sctx, "chat llama-3-8b", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(
				attribute.String(AttrGenAIRequestModel, "llama-3-8b"),
				attribute.Int(AttrGenAIRequestMaxTokens, 256),
				attribute.Float64(AttrGenAIRequestTemperature, 0.7),
				attribute.String(AttrServerAddress, "10.0.0.12"),
				attribute.Int(AttrServerPort, 8000),
			))
		inf.SetAttributes(
			attribute.String(AttrGenAIResponseID, "chatcmpl-123"),
			attribute.Int(AttrGenAIUsageInputTokens, 42),
			attribute.Int(AttrGenAIUsageOutputTokens, 128),
		)
		inf.End()

		_, post := tr.Start(sctx, "postprocess")
		post.End()

		server.SetAttributes(attribute.Int(AttrHTTPResponseStatusCode, 200))
		server.SetStatus(codes.Unset, "")
		server.End()
	}
}
