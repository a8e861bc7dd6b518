// Package otlptest is a test helper: an in-process OTLP/gRPC trace
// receiver that keeps every span it is sent, flattened into plain Go
// values that tests can compare with cmp.Diff.
//
//	r := otlptest.NewReceiver(t)
//	// point an exporter at r.Endpoint() (plaintext gRPC)
//	spans := r.WaitFor(t, 2, 5*time.Second)
package otlptest

import (
	"context"
	"encoding/hex"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is one received span.
type Span struct {
	Name string
	// Kind is trace.SpanKind's String(): "server", "client", "internal",
	// "producer", "consumer" or "unspecified".
	Kind string
	// TraceID, SpanID and ParentSpanID are lower-case hex; ParentSpanID
	// is "" for a root span.
	TraceID, SpanID, ParentSpanID string
	// Attributes maps keys to string, bool, int64, float64, []byte, []any
	// or map[string]any values.
	Attributes map[string]any
	Events     []Event
	// StatusCode is "unset", "ok" or "error".
	StatusCode    string
	StatusMessage string
	// Resource holds the resource attributes of the span's exporter.
	Resource map[string]any
	// Scope is the instrumentation scope name.
	Scope      string
	Start, End time.Time
}

// Event is one span event.
type Event struct {
	Name       string
	Attributes map[string]any
}

// Receiver is an OTLP/gRPC trace service on 127.0.0.1. Its methods are safe
// for concurrent use.
type Receiver struct {
	coltracepb.UnimplementedTraceServiceServer

	addr string
	srv  *grpc.Server

	mu      sync.Mutex
	spans   []Span
	changed chan struct{} // closed and replaced whenever spans grows
}

// NewReceiver starts a receiver on a free port of 127.0.0.1; it stops when
// the test ends.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlptest: listen: %v", err)
	}
	r := &Receiver{addr: lis.Addr().String(), srv: grpc.NewServer(), changed: make(chan struct{})}
	coltracepb.RegisterTraceServiceServer(r.srv, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.srv.Serve(lis) // returns when Stop closes the listener
	}()
	t.Cleanup(func() {
		r.srv.Stop()
		<-done
	})
	return r
}

// Endpoint returns the receiver's host:port. It speaks plaintext gRPC:
// give exporters "http://"+Endpoint() or an insecure option.
func (r *Receiver) Endpoint() string { return r.addr }

// Export implements the OTLP TraceService.
func (r *Receiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, convert(s, res, ss.GetScope().GetName()))
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans returns a copy of the spans received so far, in arrival order.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// WaitFor waits until at least n spans have arrived and returns them all;
// it fails the test after timeout.
func (r *Receiver) WaitFor(t testing.TB, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		have, changed := len(r.spans), r.changed
		r.mu.Unlock()
		if have >= n {
			return r.Spans()
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("otlptest: %d spans after %v, want %d", have, timeout, n)
			return nil
		}
	}
}

func convert(s *tracepb.Span, res map[string]any, scope string) Span {
	out := Span{
		Name:          s.GetName(),
		Kind:          trace.SpanKind(s.GetKind()).String(), // same numbering in OTLP and the API
		TraceID:       hex.EncodeToString(s.GetTraceId()),
		SpanID:        hex.EncodeToString(s.GetSpanId()),
		ParentSpanID:  hex.EncodeToString(s.GetParentSpanId()),
		Attributes:    attrs(s.GetAttributes()),
		StatusMessage: s.GetStatus().GetMessage(),
		Resource:      maps.Clone(res), // each span owns its maps
		Scope:         scope,
		Start:         time.Unix(0, int64(s.GetStartTimeUnixNano())),
		End:           time.Unix(0, int64(s.GetEndTimeUnixNano())),
	}
	switch s.GetStatus().GetCode() {
	case tracepb.Status_STATUS_CODE_OK:
		out.StatusCode = "ok"
	case tracepb.Status_STATUS_CODE_ERROR:
		out.StatusCode = "error"
	default:
		out.StatusCode = "unset"
	}
	for _, e := range s.GetEvents() {
		out.Events = append(out.Events, Event{Name: e.GetName(), Attributes: attrs(e.GetAttributes())})
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		return attrs(x.KvlistValue.GetValues())
	default:
		return nil
	}
}
