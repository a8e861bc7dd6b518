package gateway

import (
	"context"
	"net/http"
	"slices"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/upstream"
	"github.com/vigil-gw/vigil/tracing"
)

// spanState is a call's spans and what they record from the response.
// Only this file writes it: startServer and startInference set the spans,
// accept (proxy.go) marks the answering one through answering, and the
// response's readers (tap.go, apis.go) hand what it says of itself to
// found and its content to keep; endSpans reads it.
type spanState struct {
	server trace.Span // the request's SERVER span
	infer  trace.Span // the CLIENT span of the current attempt; nil between attempts
	// recording: the answering attempt's inference span records
	// (accept). The response's id, model and finish reason are
	// kept only then.
	recording                 bool
	respID, respModel, finish string
	streamed                  []byte // SSE payloads kept when capture_content is on
	// attrs holds the span attributes being set, so that setting them
	// does not allocate per request.
	attrs [12]attribute.KeyValue
}

// defaultTracer makes spans that are never recorded or exported but carry
// real trace and span ids, so that X-Vigil-Trace-Id and the upstream
// traceparent work without a tracing backend.
func defaultTracer() trace.Tracer {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("github.com/vigil-gw/vigil")
}

func defaultPropagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// serverStart and clientStart are the spans' start options, made once:
// an option made per request is an allocation on the request path, whose
// cost is the gateway's overhead over a plain proxy. The spans'
// attributes are set after the start, only on recording spans: Vigil's
// samplers (tracing.New) do not read them.
var (
	serverStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}
	clientStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)

// serverSpan is the name and attributes of the SERVER span of a route
// served with one method, made once for the route.
type serverSpan struct {
	method, route, name string
	attrs               []attribute.KeyValue
}

func newServerSpan(method, route string) *serverSpan {
	return &serverSpan{method: method, route: route, name: method + " " + route, attrs: []attribute.KeyValue{
		attribute.String(tracing.AttrHTTPRequestMethod, method),
		attribute.String(tracing.AttrURLPath, route),
	}}
}

// startServer starts the request's server span, x.span.server,
// continuing the caller's trace (traceparent, tracestate, baggage), and
// returns its context. ss, when its method and path are the request's,
// spares making the name and attributes.
func (s *Server) startServer(r *http.Request, route string, ss *serverSpan, x *call) context.Context {
	ctx := s.prop.Extract(r.Context(), headerCarrier(r.Header))
	if ss != nil && r.Method == ss.method && r.URL.Path == ss.route {
		ctx, x.span.server = s.tracer.Start(ctx, ss.name, serverStart...)
		if sp := x.span.server; sp.IsRecording() {
			sp.SetAttributes(ss.attrs...)
		}
		return ctx
	}
	ctx, x.span.server = s.tracer.Start(ctx, r.Method+" "+route, serverStart...)
	if sp := x.span.server; sp.IsRecording() {
		sp.SetAttributes(append(x.span.attrs[:0],
			attribute.String(tracing.AttrHTTPRequestMethod, r.Method),
			attribute.String(tracing.AttrURLPath, r.URL.Path),
		)...)
	}
	return ctx
}

// headerCarrier is propagation.HeaderCarrier with the W3C headers'
// canonical names written out: http.Header canonicalizes "traceparent"
// into a new string on every lookup.
type headerCarrier http.Header

var (
	_ propagation.TextMapCarrier = headerCarrier(nil)
	_ propagation.ValuesGetter   = headerCarrier(nil)
)

func traceHeaderKey(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	case "baggage":
		return "Baggage"
	}
	return http.CanonicalHeaderKey(key)
}

func (h headerCarrier) Get(key string) string {
	if v := h[traceHeaderKey(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h headerCarrier) Values(key string) []string { return h[traceHeaderKey(key)] }
func (h headerCarrier) Set(key, value string)      { h[traceHeaderKey(key)] = []string{value} }
func (h headerCarrier) Keys() []string             { return propagation.HeaderCarrier(h).Keys() }

// startInference starts the CLIENT span of one attempt at the backend,
// x.span.infer, named "{gen_ai.operation.name} {gen_ai.request.model}",
// and returns its context. The name and the attributes of the operation,
// model and backend are made once per model label (see series); the
// attributes are set after the start, from x.span.attrs, and only on a
// recording span.
func (s *Server) startInference(ctx context.Context, x *call, f *request.Fields) context.Context {
	b := x.backend
	label := s.metrics.models.label(x.req.Model)
	se := s.metrics.seriesFor(x.req.Operation, label, b.Name)
	ss := se.span.Load()
	if ss == nil {
		// Two requests may both make it: the same value either way.
		ss = newSeriesSpan(x.req.Operation, label, b)
		se.span.Store(ss)
	}
	if label != x.req.Model { // past the label bound: "other"
		ss = newSeriesSpan(x.req.Operation, x.req.Model, b)
	}
	ctx, sp := s.tracer.Start(ctx, ss.name, clientStart...)
	x.span.infer = sp
	if !sp.IsRecording() {
		return ctx
	}
	attrs := append(x.span.attrs[:0], ss.attrs...)
	if f != nil {
		p := &f.Parameters
		if v, ok := firstNum(f.MaxTokens, f.MaxCompletionTokens, f.MaxOutputTokens, p.MaxNewTokens); ok {
			attrs = append(attrs, attribute.Int(tracing.AttrGenAIRequestMaxTokens, int(v)))
		}
		if v, ok := firstNum(f.Temperature, p.Temperature); ok {
			attrs = append(attrs, attribute.Float64(tracing.AttrGenAIRequestTemperature, v))
		}
		if v, ok := firstNum(f.TopP, p.TopP); ok {
			attrs = append(attrs, attribute.Float64(tracing.AttrGenAIRequestTopP, v))
		}
	}
	if x.req.Injected {
		attrs = append(attrs, attribute.Bool("vigil.logprobs_injected", true))
	}
	if x.retry.attempts > 1 {
		attrs = append(attrs, attribute.Int("vigil.attempt", x.retry.attempts))
	}
	sp.SetAttributes(attrs...)
	return ctx
}

// answering notes, once an attempt's response is the client's answer,
// whether that attempt's inference span records (recording).
func (st *spanState) answering() {
	st.recording = st.infer != nil && st.infer.IsRecording()
}

// found records what the response says of itself: its id, model and
// finish reason. A reader passes "" for what a body or event leaves out,
// which keeps what an earlier event said (a stream's usage chunk may
// carry no id, and only its last events a finish reason).
func (st *spanState) found(id, model, finish string) {
	if id != "" {
		st.respID = id
	}
	if model != "" {
		st.respModel = model
	}
	if finish != "" {
		st.finish = finish
	}
}

// keep adds an SSE payload to the completion that capture_content
// records, up to limit bytes in all.
func (st *spanState) keep(payload []byte, limit int) {
	if len(st.streamed) < limit {
		st.streamed = append(st.streamed, payload[:min(len(payload), limit-len(st.streamed))]...)
	}
}

// firstNum returns the first of nums that is set.
func firstNum(nums ...request.Num) (float64, bool) {
	for _, n := range nums {
		if v, ok := n.Get(); ok {
			return v, true
		}
	}
	return 0, false
}

// seriesSpan is what the inference spans of one operation, model and
// backend share: the span name and the first attributes.
type seriesSpan struct {
	name  string
	attrs []attribute.KeyValue
}

func newSeriesSpan(op exchange.Operation, model string, b *upstream.Backend) *seriesSpan {
	name := genAIOperation(op)
	if model != "" {
		name += " " + model
	}
	attrs := []attribute.KeyValue{
		attribute.String(tracing.AttrGenAIOperationName, genAIOperation(op)),
		attribute.String(tracing.AttrGenAIProviderName, b.Kind),
		attribute.String(tracing.AttrServerAddress, b.URL.Hostname()),
		attribute.String("vigil.backend", b.Name),
	}
	if port, err := strconv.Atoi(b.URL.Port()); err == nil {
		attrs = append(attrs, attribute.Int(tracing.AttrServerPort, port))
	}
	if model != "" {
		attrs = append(attrs, attribute.String(tracing.AttrGenAIRequestModel, model))
	}
	return &seriesSpan{name: name, attrs: slices.Clip(attrs)}
}

// genAIOperation is op's gen_ai.operation.name. The semantic conventions
// name chat-like generation "chat" whatever the API (OpenAI's Responses,
// Anthropic's Messages); Vigil's own labels keep the operations apart.
func genAIOperation(op exchange.Operation) string {
	switch op {
	case exchange.OpResponses, exchange.OpMessages:
		return string(exchange.OpChat)
	}
	return string(op)
}

// endRetried ends the inference span of an attempt that failed and is
// retried on another backend: status is the backend's 5xx, or 0 when no
// response came.
func (s *Server) endRetried(x *call, status int, class exchange.ErrorClass) {
	sp := x.span.infer
	x.span.infer = nil
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
// Their last attributes are gathered in x.span.attrs.
func (s *Server) endSpans(x *call, status int, class exchange.ErrorClass) {
	if sp := x.span.infer; sp != nil {
		if sp.IsRecording() {
			attrs := append(x.span.attrs[:0], attribute.Int(tracing.AttrHTTPResponseStatusCode, status))
			if x.span.respModel != "" {
				attrs = append(attrs, attribute.String(tracing.AttrGenAIResponseModel, x.span.respModel))
			}
			if x.span.respID != "" {
				attrs = append(attrs, attribute.String(tracing.AttrGenAIResponseID, x.span.respID))
			}
			if x.span.finish != "" {
				attrs = append(attrs, attribute.StringSlice(tracing.AttrGenAIResponseFinishReasons, []string{x.span.finish}))
			}
			if p := x.resp.prompt(); p > 0 {
				attrs = append(attrs, attribute.Int(tracing.AttrGenAIUsageInputTokens, p))
			}
			if x.resp.completionTokens > 0 {
				attrs = append(attrs, attribute.Int(tracing.AttrGenAIUsageOutputTokens, x.resp.completionTokens))
			}
			if class != exchange.ClassNone {
				attrs = append(attrs, attribute.String(tracing.AttrErrorType, string(class)))
			}
			sp.SetAttributes(attrs...)
			if s.cfg.Tracing.CaptureContent {
				s.captureContent(x, sp)
			}
		}
		if class != exchange.ClassNone {
			sp.SetStatus(codes.Error, string(class))
		}
		sp.End()
	}
	if sp := x.span.server; sp != nil {
		if sp.IsRecording() {
			attrs := append(x.span.attrs[:0], attribute.Int(tracing.AttrHTTPResponseStatusCode, status))
			if class != exchange.ClassNone {
				attrs = append(attrs, attribute.String(tracing.AttrErrorType, string(class)))
			}
			sp.SetAttributes(s.appendRouteAttrs(attrs, x)...)
		}
		if status >= 500 || class == exchange.ClassTimeout {
			sp.SetStatus(codes.Error, string(class))
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
	completion := x.resp.captured
	if x.req.Stream {
		completion = x.span.streamed // the SSE data payloads, concatenated
	}
	// The raw request and response JSON, truncated, rather than the
	// conventions' parsed message lists: Vigil never re-encodes bodies.
	sp.AddEvent(tracing.EventGenAIInferenceDetails, trace.WithAttributes(
		attribute.String(tracing.AttrGenAIInputMessages, cut(x.req.Body)),
		attribute.String(tracing.AttrGenAIOutputMessages, cut(completion)),
	))
}
