package tracing

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// captureClient is an otlptrace.Client that keeps, as a collector would
// receive it, the request of each upload.
type captureClient struct {
	mu       sync.Mutex
	requests [][]byte
	err      error
	stopped  int
}

func (c *captureClient) Start(context.Context) error { return nil }
func (c *captureClient) Stop(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped++
	return nil
}

func (c *captureClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, b)
	return c.err
}

// received decodes the one request the client got.
func (c *captureClient) received(t *testing.T) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.requests) != 1 {
		t.Fatalf("%d uploads, want 1", len(c.requests))
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(c.requests[0], &req); err != nil {
		t.Fatal(err)
	}
	// The SDK's exporter orders resources by map iteration.
	slices.SortFunc(req.ResourceSpans, func(a, b *tracepb.ResourceSpans) int {
		return strings.Compare(a.GetResource().String(), b.GetResource().String())
	})
	return &req
}

// everySpan makes spans that use every field the exporters encode: two
// resources, scopes with and without version, schema and attributes, every
// attribute type, remote and local parents, trace state, events, links,
// the three status codes, the five kinds, and counts of what limits
// dropped.
func everySpan(t *testing.T) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	resA := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "a"), attribute.Int("replica", 2), attribute.StringSlice("zones", []string{"x", "y"}))
	resB := resource.NewSchemaless(attribute.String("service.name", "b"))
	tpA := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(resA))
	limits := sdktrace.NewSpanLimits()
	limits.AttributeCountLimit, limits.EventCountLimit, limits.LinkCountLimit = 2, 1, 1
	limits.AttributePerEventCountLimit, limits.AttributePerLinkCountLimit = 1, 1
	tpB := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(resB), sdktrace.WithRawSpanLimits(limits))

	plain := tpA.Tracer("plain")
	full := tpA.Tracer("full", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL("https://example.com/schema"),
		trace.WithInstrumentationAttributes(attribute.Bool("scoped", true)))
	limited := tpB.Tracer("")

	ts, err := trace.ParseTraceState("vendor=value,other=1")
	if err != nil {
		t.Fatal(err)
	}
	remote := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled,
		TraceState: ts, Remote: true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	every := []attribute.KeyValue{
		attribute.Bool("b", true), attribute.Bool("b0", false),
		attribute.Int64("i", -42), attribute.Int64("i0", 0), attribute.Int64("imax", math.MaxInt64),
		attribute.Float64("f", 0.7), attribute.Float64("f0", 0), attribute.Float64("nan", math.NaN()),
		attribute.String("s", "héllo"), attribute.String("s0", ""),
		attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -1, 0}),
		attribute.Float64Slice("fs", []float64{1.5, 0}), attribute.StringSlice("ss", []string{"a", ""}),
		attribute.StringSlice("empty", nil), attribute.ByteSlice("bytes", []byte{0, 1, 255}),
		attribute.Slice("mixed", attribute.StringValue("x"), attribute.IntValue(3), attribute.BoolSliceValue([]bool{true})),
		attribute.Map("map", attribute.String("k", "v"), attribute.Int("n", 1)),
		{Key: "none"}, {Key: ""},
	}
	sctx, server := full.Start(ctx, "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(every...),
		trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("why", "retry")}}))
	server.AddEvent("first token", trace.WithAttributes(attribute.Int("tokens", 1)))
	server.AddEvent("")
	_, infer := plain.Start(sctx, "chat model", trace.WithSpanKind(trace.SpanKindClient))
	infer.SetStatus(codes.Ok, "")
	infer.End()
	_, pre := full.Start(sctx, "preprocess")
	pre.End()
	_, prod := plain.Start(sctx, "produce", trace.WithSpanKind(trace.SpanKindProducer))
	prod.End()
	_, cons := plain.Start(sctx, "consume", trace.WithSpanKind(trace.SpanKindConsumer))
	cons.End()
	server.SetStatus(codes.Error, "upstream_5xx")
	server.End()

	_, lim := limited.Start(context.Background(), "limited",
		trace.WithAttributes(attribute.Int("a", 1), attribute.Int("b", 2), attribute.Int("c", 3)),
		trace.WithLinks(trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.Int("x", 1), attribute.Int("y", 2)}},
			trace.Link{SpanContext: remote}))
	lim.AddEvent("e1", trace.WithAttributes(attribute.Int("x", 1), attribute.Int("y", 2)))
	lim.AddEvent("e2")
	lim.End()
	_, local := limited.Start(trace.ContextWithSpanContext(context.Background(), remote.WithRemote(false)), "local parent")
	local.End()
	return rec.Ended()
}

// TestOTLPEncodingMatchesSDK: a collector decodes from Vigil's exporter
// exactly what the SDK's OTLP exporter sends for the same spans.
func TestOTLPEncodingMatchesSDK(t *testing.T) {
	spans := everySpan(t)
	if len(spans) != 7 {
		t.Fatalf("%d spans recorded", len(spans))
	}
	ctx := context.Background()

	var sdk captureClient
	ref, err := otlptrace.New(ctx, &sdk)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.ExportSpans(ctx, spans); err != nil {
		t.Fatal(err)
	}
	var ours captureClient
	exp, err := newOTLPExporter(ctx, &ours)
	if err != nil {
		t.Fatal(err)
	}
	// Twice: the second export reuses the first one's buffer.
	for range 2 {
		ours.requests = nil
		if err := exp.ExportSpans(ctx, spans); err != nil {
			t.Fatal(err)
		}
		want, got := sdk.received(t), ours.received(t)
		if len(got.ResourceSpans) != 2 {
			t.Fatalf("%d resources, want 2", len(got.ResourceSpans))
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded differently:\nours: %v\nSDK:  %v", got, want)
		}
	}
}

func TestOTLPExporterNothingToSend(t *testing.T) {
	var c captureClient
	exp, err := newOTLPExporter(context.Background(), &c)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.ExportSpans(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if len(c.requests) != 0 {
		t.Fatalf("%d uploads of no spans", len(c.requests))
	}
}

func TestOTLPExporterErrorsAndShutdown(t *testing.T) {
	c := captureClient{err: errors.New("collector down")}
	exp, err := newOTLPExporter(context.Background(), &c)
	if err != nil {
		t.Fatal(err)
	}
	err = exp.ExportSpans(context.Background(), everySpan(t))
	if err == nil || !strings.Contains(err.Error(), "traces export: collector down") {
		t.Fatalf("err = %v, want the client's error wrapped as the SDK's exporter does", err)
	}
	for range 2 {
		if err := exp.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if c.stopped != 1 {
		t.Fatalf("client stopped %d times, want 1", c.stopped)
	}
}

// BenchmarkOTLPEncode compares the two encodings of one batch of 64 spans
// shaped as Vigil's (a server span with the route attributes, a preprocess
// span, an inference span with the GenAI attributes and a first-token
// event), each up to the bytes a gRPC client sends.
func BenchmarkOTLPEncode(b *testing.B) {
	spans := gatewaySpans(b, 64)
	ctx := context.Background()
	sdk, err := otlptrace.New(ctx, marshalClient{})
	if err != nil {
		b.Fatal(err)
	}
	vigil, err := newOTLPExporter(ctx, marshalClient{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		exp  sdktrace.SpanExporter
	}{{"sdk", sdk}, {"vigil", vigil}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.exp.ExportSpans(ctx, spans); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// marshalClient marshals the request as the gRPC client does, and drops it.
type marshalClient struct{}

func (marshalClient) Start(context.Context) error { return nil }
func (marshalClient) Stop(context.Context) error  { return nil }
func (marshalClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	_, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: rs})
	return err
}

// gatewaySpans records about n spans shaped as the gateway's.
func gatewaySpans(b *testing.B, n int) []sdktrace.ReadOnlySpan {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "vigil"), attribute.String("host.name", "gw-1"))))
	tr := tp.Tracer(ScopeName, trace.WithInstrumentationVersion("1.0.0"))
	for len(rec.Ended()) < n {
		ctx, server := tr.Start(context.Background(), "POST /v1/chat/completions", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String(AttrHTTPRequestMethod, "POST"), attribute.String(AttrURLPath, "/v1/chat/completions"),
				attribute.String("http.route", "/v1/chat/completions"), attribute.String("vigil.request_id", "0123456789abcdef0123456789abcdef")))
		_, pre := tr.Start(ctx, "preprocess")
		pre.End()
		_, inf := tr.Start(ctx, "chat llama-3-8b", trace.WithSpanKind(trace.SpanKindClient))
		inf.SetAttributes(attribute.String(AttrGenAIOperationName, "chat"), attribute.String(AttrGenAIProviderName, "vllm"),
			attribute.String(AttrServerAddress, "10.0.0.12"), attribute.String("vigil.backend", "gpu-a"), attribute.Int(AttrServerPort, 8000),
			attribute.String(AttrGenAIRequestModel, "llama-3-8b"), attribute.Int(AttrGenAIRequestMaxTokens, 256),
			attribute.Float64(AttrGenAIRequestTemperature, 0.7))
		inf.AddEvent("gen_ai.first_token")
		inf.SetAttributes(attribute.Int(AttrHTTPResponseStatusCode, 200), attribute.String(AttrGenAIResponseID, "chatcmpl-123"),
			attribute.StringSlice(AttrGenAIResponseFinishReasons, []string{"stop"}),
			attribute.Int(AttrGenAIUsageInputTokens, 42), attribute.Int(AttrGenAIUsageOutputTokens, 128))
		inf.End()
		server.SetAttributes(attribute.Int(AttrHTTPResponseStatusCode, 200), attribute.String("vigil.route.strategy", "prefix"),
			attribute.Int("vigil.route.blocks", 4), attribute.Int("vigil.route.matched_blocks", 3))
		server.End()
	}
	return rec.Ended()[:n]
}
