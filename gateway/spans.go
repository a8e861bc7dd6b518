package gateway

import (
	"context"
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/tracing"
)

// defaultTracer makes spans that are never recorded or exported but carry
// real trace and span ids, so that X-Vigil-Trace-Id and the upstream
// traceparent work without a tracing backend.
func defaultTracer() trace.Tracer {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("github.com/vigil-gw/vigil")
}

func defaultPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// startServer starts the request's server span, continuing the caller's
// trace (traceparent, tracestate, baggage).
func (s *Server) startServer(r *http.Request, route string) (context.Context, trace.Span) {
	ctx := s.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	return s.tracer.Start(ctx, r.Method+" "+route, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String(tracing.AttrHTTPRequestMethod, r.Method),
			attribute.String(tracing.AttrURLPath, r.URL.Path),
		))
}

// startInference starts the CLIENT span of one attempt at the backend,
// named "{gen_ai.operation.name} {gen_ai.request.model}".
func (s *Server) startInference(ctx context.Context, x *call, f *requestFields) (context.Context, trace.Span) {
	b := x.backend
	name := string(x.req.Operation)
	if x.req.Model != "" {
		name += " " + x.req.Model
	}
	attrs := []attribute.KeyValue{
		attribute.String(tracing.AttrGenAIOperationName, string(x.req.Operation)),
		attribute.String(tracing.AttrGenAIProviderName, b.Kind),
		attribute.String(tracing.AttrServerAddress, b.URL.Hostname()),
		attribute.String("vigil.backend", b.Name),
	}
	if port, err := strconv.Atoi(b.URL.Port()); err == nil {
		attrs = append(attrs, attribute.Int(tracing.AttrServerPort, port))
	}
	if x.req.Model != "" {
		attrs = append(attrs, attribute.String(tracing.AttrGenAIRequestModel, x.req.Model))
	}
	if f != nil {
		p := &f.Parameters
		for _, a := range []struct {
			key string
			v   []*float64
		}{
			{tracing.AttrGenAIRequestMaxTokens, []*float64{f.MaxTokens, f.MaxCompletionTokens, p.MaxNewTokens}},
			{tracing.AttrGenAIRequestTemperature, []*float64{f.Temperature, p.Temperature}},
			{tracing.AttrGenAIRequestTopP, []*float64{f.TopP, p.TopP}},
		} {
			for _, v := range a.v {
				if v != nil {
					if a.key == tracing.AttrGenAIRequestMaxTokens {
						attrs = append(attrs, attribute.Int(a.key, int(*v)))
					} else {
						attrs = append(attrs, attribute.Float64(a.key, *v))
					}
					break
				}
			}
		}
	}
	if x.req.Injected {
		attrs = append(attrs, attribute.Bool("vigil.logprobs_injected", true))
	}
	if x.attempts > 1 {
		attrs = append(attrs, attribute.Int("vigil.attempt", x.attempts))
	}
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endAttempt ends the inference span of an attempt that failed and is
// retried on another backend: status is the backend's 5xx, or 0 when no
// response came.
func (s *Server) endAttempt(x *call, status int, class exchange.ErrorClass) {
	sp := x.infer
	x.infer = nil
	if sp == nil {
		return
	}
	if status > 0 {
		sp.SetAttributes(attribute.Int(tracing.AttrHTTPResponseStatusCode, status))
	}
	sp.SetAttributes(attribute.String(tracing.AttrErrorType, string(class)), attribute.Bool("vigil.retried", true))
	sp.SetStatus(codes.Error, string(class))
	sp.End()
}

// endSpans ends the inference and server spans of a finished request.
func (s *Server) endSpans(x *call, status int, class exchange.ErrorClass) {
	if sp := x.infer; sp != nil {
		if sp.IsRecording() {
			attrs := []attribute.KeyValue{attribute.Int(tracing.AttrHTTPResponseStatusCode, status)}
			if x.respModel != "" {
				attrs = append(attrs, attribute.String(tracing.AttrGenAIResponseModel, x.respModel))
			}
			if x.respID != "" {
				attrs = append(attrs, attribute.String(tracing.AttrGenAIResponseID, x.respID))
			}
			if x.finish != "" {
				attrs = append(attrs, attribute.StringSlice(tracing.AttrGenAIResponseFinishReasons, []string{x.finish}))
			}
			if x.promptTokens > 0 {
				attrs = append(attrs, attribute.Int(tracing.AttrGenAIUsageInputTokens, x.promptTokens))
			}
			if x.completionTokens > 0 {
				attrs = append(attrs, attribute.Int(tracing.AttrGenAIUsageOutputTokens, x.completionTokens))
			}
			sp.SetAttributes(attrs...)
			if s.cfg.Tracing.CaptureContent {
				s.captureContent(x, sp)
			}
		}
		if class != exchange.ClassNone {
			sp.SetAttributes(attribute.String(tracing.AttrErrorType, string(class)))
			sp.SetStatus(codes.Error, string(class))
		}
		sp.End()
	}
	if sp := x.server; sp != nil {
		sp.SetAttributes(attribute.Int(tracing.AttrHTTPResponseStatusCode, status))
		if status >= 500 || class == exchange.ClassTimeout {
			sp.SetStatus(codes.Error, string(class))
		}
		if class != exchange.ClassNone {
			sp.SetAttributes(attribute.String(tracing.AttrErrorType, string(class)))
		}
		sp.End()
	}
}

// captureContent records the prompt and the completion, truncated, as an
// event of the inference span. Off unless tracing.capture_content: they may
// hold personal data.
func (s *Server) captureContent(x *call, sp trace.Span) {
	max := s.cfg.Tracing.MaxContentBytes
	cut := func(b []byte) string {
		if len(b) > max {
			b = b[:max]
		}
		return string(b)
	}
	completion := x.captured
	if x.req.Stream {
		completion = x.streamed // the SSE data payloads, concatenated
	}
	// The raw request and response JSON, truncated, rather than the
	// conventions' parsed message lists: Vigil never re-encodes bodies.
	sp.AddEvent(tracing.EventGenAIInferenceDetails, trace.WithAttributes(
		attribute.String(tracing.AttrGenAIInputMessages, cut(x.req.Body)),
		attribute.String(tracing.AttrGenAIOutputMessages, cut(completion)),
	))
}
