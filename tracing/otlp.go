package tracing

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// otlpExporter is the OTLP exporter with its own encoding. The SDK's
// exporter (otlptrace.Exporter) turns every span into a tree of protobuf
// structs (a struct per attribute and per value) and then marshals them:
// at 100 % sampling that was the largest allocator of the gateway and a
// tenth of its CPU at full load. This one appends the spans' protobuf
// encoding to a reused buffer and hands it to the same OTLP/gRPC client as
// the raw fields of a ResourceSpans message, which protobuf marshals as
// they are. The client keeps its connection, configuration (the
// OTEL_EXPORTER_OTLP_* variables), retries and partial-success handling;
// the collector decodes what the SDK's exporter would have sent
// (TestOTLPEncodingMatchesSDK). One difference: the client's experimental
// self-observability counts no spans in such a message; Vigil counts them
// itself (vigil_tracing_spans_exported_total).
type otlpExporter struct {
	client   otlptrace.Client
	bufs     sync.Pool // *[]byte
	stopOnce sync.Once
}

var _ sdktrace.SpanExporter = (*otlpExporter)(nil)

// maxKeptBuffer bounds the encoding buffer kept for the next batch: a
// shutdown's flush can make one far larger than a usual batch.
const maxKeptBuffer = 1 << 20

// newOTLPExporter starts client and returns the exporter over it.
func newOTLPExporter(ctx context.Context, client otlptrace.Client) (*otlpExporter, error) {
	if err := client.Start(ctx); err != nil {
		return nil, err
	}
	return &otlpExporter{client: client}, nil
}

// ExportSpans encodes spans, one ResourceSpans message per resource, and
// uploads them in one request.
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	bp, _ := e.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	msgs, buf := encodeResourceSpans((*bp)[:0], spans)
	var err error
	if len(msgs) > 0 {
		err = e.client.UploadTraces(ctx, msgs)
	}
	// The client marshals the messages before UploadTraces returns, the
	// retries included: the bytes are free again.
	if cap(buf) <= maxKeptBuffer {
		*bp = buf
		e.bufs.Put(bp)
	}
	if err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	return nil
}

// Shutdown stops the client once.
func (e *otlpExporter) Shutdown(ctx context.Context) error {
	var err error
	e.stopOnce.Do(func() { err = e.client.Stop(ctx) })
	return err
}

// encodeResourceSpans appends the encoding of spans to buf, grouped as the
// SDK's exporter groups them (by resource, then by instrumentation scope in
// the order first seen), and returns a ResourceSpans message per resource
// whose raw fields are that encoding. The messages share buf's bytes.
func encodeResourceSpans(buf []byte, spans []sdktrace.ReadOnlySpan) ([]*tracepb.ResourceSpans, []byte) {
	type group struct {
		res        *resource.Resource
		key        attribute.Distinct
		start, end int
	}
	// A provider has one resource: almost always one group.
	var groups []group
	for _, s := range spans {
		if s == nil {
			continue
		}
		k := s.Resource().Equivalent()
		if !slices.ContainsFunc(groups, func(g group) bool { return g.key == k }) {
			groups = append(groups, group{res: s.Resource(), key: k})
		}
	}
	for i := range groups {
		g := &groups[i]
		g.start = len(buf)
		buf = appendResourceSpans(buf, g.res, g.key, spans)
		g.end = len(buf)
	}
	msgs := make([]*tracepb.ResourceSpans, len(groups))
	for i, g := range groups {
		m := new(tracepb.ResourceSpans)
		m.ProtoReflect().SetUnknown(protoreflect.RawFields(buf[g.start:g.end:g.end]))
		msgs[i] = m
	}
	return msgs, buf
}

// Field numbers of the OTLP messages (opentelemetry/proto, trace/v1,
// common/v1 and resource/v1).
const (
	rsResource   = 1 // ResourceSpans.resource
	rsScopeSpans = 2 // ResourceSpans.scope_spans
	rsSchemaURL  = 3 // ResourceSpans.schema_url

	resAttributes = 1 // Resource.attributes

	ssScope     = 1 // ScopeSpans.scope
	ssSpans     = 2 // ScopeSpans.spans
	ssSchemaURL = 3 // ScopeSpans.schema_url

	scopeName       = 1 // InstrumentationScope.name
	scopeVersion    = 2
	scopeAttributes = 3

	spanTraceID         = 1
	spanSpanID          = 2
	spanTraceState      = 3
	spanParentSpanID    = 4
	spanName            = 5
	spanKind            = 6
	spanStart           = 7
	spanEnd             = 8
	spanAttributes      = 9
	spanDroppedAttrs    = 10
	spanEvents          = 11
	spanDroppedEvents   = 12
	spanLinks           = 13
	spanDroppedLinks    = 14
	spanStatus          = 15
	spanFlags           = 16
	eventTime           = 1
	eventName           = 2
	eventAttributes     = 3
	eventDroppedAttrs   = 4
	linkTraceID         = 1
	linkSpanID          = 2
	linkAttributes      = 4
	linkDroppedAttrs    = 5
	linkFlags           = 6
	statusMessage       = 2
	statusCode          = 3
	kvKey               = 1
	kvValue             = 2
	anyString           = 1
	anyBool             = 2
	anyInt              = 3
	anyDouble           = 4
	anyArray            = 5
	anyKvlist           = 6
	anyBytes            = 7
	listValues          = 1 // ArrayValue.values and KeyValueList.values
	flagHasIsRemote     = 0x100
	flagIsRemote        = 0x200
	statusCodeOK        = 1
	statusCodeError     = 2
	invalidAttrValueStr = "INVALID"
)

// appendResourceSpans appends the fields of the ResourceSpans of resource
// res (key: its Equivalent) holding those of spans that belong to it.
func appendResourceSpans(b []byte, res *resource.Resource, key attribute.Distinct, spans []sdktrace.ReadOnlySpan) []byte {
	if res != nil {
		at := 0
		b, at = beginMessage(b, rsResource)
		for it := res.Iter(); it.Next(); {
			b = appendKeyValue(b, resAttributes, it.Attribute())
		}
		b = endMessage(b, at)
	}
	// Scopes in the order first seen; each pass encodes one scope's spans.
	var done [4]instrumentation.Scope
	seen := done[:0]
	for i, s := range spans {
		if s == nil || s.Resource().Equivalent() != key {
			continue
		}
		sc := s.InstrumentationScope()
		if slices.Contains(seen, sc) {
			continue
		}
		seen = append(seen, sc)
		at := 0
		b, at = beginMessage(b, rsScopeSpans)
		if sc != (instrumentation.Scope{}) {
			sat := 0
			b, sat = beginMessage(b, ssScope)
			b = appendString(b, scopeName, sc.Name)
			b = appendString(b, scopeVersion, sc.Version)
			for it := sc.Attributes.Iter(); it.Next(); {
				b = appendKeyValue(b, scopeAttributes, it.Attribute())
			}
			b = endMessage(b, sat)
		}
		for _, t := range spans[i:] {
			if t != nil && t.InstrumentationScope() == sc && t.Resource().Equivalent() == key {
				b = appendSpan(b, t)
			}
		}
		b = appendString(b, ssSchemaURL, sc.SchemaURL)
		b = endMessage(b, at)
	}
	if res != nil {
		b = appendString(b, rsSchemaURL, res.SchemaURL())
	}
	return b
}

// appendSpan appends s as ScopeSpans.spans, with the fields the SDK's
// exporter sets (go.opentelemetry.io/otel/exporters/otlp/otlptrace
// v1.47.0, internal/tracetransform).
func appendSpan(b []byte, s sdktrace.ReadOnlySpan) []byte {
	at := 0
	b, at = beginMessage(b, ssSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	b = appendBytes(b, spanTraceID, tid[:])
	b = appendBytes(b, spanSpanID, sid[:])
	b = appendString(b, spanTraceState, sc.TraceState().String())
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		b = appendBytes(b, spanParentSpanID, psid[:])
	}
	b = appendString(b, spanName, s.Name())
	b = appendVarint(b, spanKind, uint64(kindOf(s.SpanKind())))
	b = appendFixed64(b, spanStart, unixNano(s.StartTime().UnixNano()))
	b = appendFixed64(b, spanEnd, unixNano(s.EndTime().UnixNano()))
	for _, kv := range s.Attributes() {
		b = appendKeyValue(b, spanAttributes, kv)
	}
	b = appendVarint(b, spanDroppedAttrs, uint64(clampCount(s.DroppedAttributes())))
	for _, ev := range s.Events() {
		eat := 0
		b, eat = beginMessage(b, spanEvents)
		b = appendFixed64(b, eventTime, unixNano(ev.Time.UnixNano()))
		b = appendString(b, eventName, ev.Name)
		for _, kv := range ev.Attributes {
			b = appendKeyValue(b, eventAttributes, kv)
		}
		b = appendVarint(b, eventDroppedAttrs, uint64(clampCount(ev.DroppedAttributeCount)))
		b = endMessage(b, eat)
	}
	b = appendVarint(b, spanDroppedEvents, uint64(clampCount(s.DroppedEvents())))
	for _, l := range s.Links() {
		lat := 0
		b, lat = beginMessage(b, spanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		b = appendBytes(b, linkTraceID, ltid[:])
		b = appendBytes(b, linkSpanID, lsid[:])
		for _, kv := range l.Attributes {
			b = appendKeyValue(b, linkAttributes, kv)
		}
		b = appendVarint(b, linkDroppedAttrs, uint64(clampCount(l.DroppedAttributeCount)))
		b = appendFixed32(b, linkFlags, flagsOf(l.SpanContext.TraceFlags(), l.SpanContext))
		b = endMessage(b, lat)
	}
	b = appendVarint(b, spanDroppedLinks, uint64(clampCount(s.DroppedLinks())))
	// The SDK's exporter always sets a status, an empty one when unset.
	st := s.Status()
	sat := 0
	b, sat = beginMessage(b, spanStatus)
	b = appendString(b, statusMessage, st.Description)
	switch st.Code {
	case codes.Ok:
		b = appendVarint(b, statusCode, statusCodeOK)
	case codes.Error:
		b = appendVarint(b, statusCode, statusCodeError)
	}
	b = endMessage(b, sat)
	b = appendFixed32(b, spanFlags, flagsOf(sc.TraceFlags(), parent))
	return endMessage(b, at)
}

// flagsOf is a span's or link's flags: the W3C trace flags, and whether
// the parent (for a link, the linked context) is remote.
func flagsOf(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// kindOf is OTLP's Span.SpanKind for k: the API numbers the kinds as OTLP
// does (unspecified 0 to consumer 5), and an unknown kind is unspecified.
func kindOf(k trace.SpanKind) int {
	if k < 0 || k > trace.SpanKindConsumer {
		return 0
	}
	return int(k)
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampCount(n int) uint32 {
	if n < 0 {
		return 0
	}
	return uint32(min(int64(n), math.MaxUint32))
}

// appendKeyValue appends kv as field num (a KeyValue).
func appendKeyValue(b []byte, num protowire.Number, kv attribute.KeyValue) []byte {
	at := 0
	b, at = beginMessage(b, num)
	b = appendString(b, kvKey, string(kv.Key))
	b = appendAnyValue(b, kvValue, kv.Value)
	return endMessage(b, at)
}

// appendAnyValue appends v as field num (an AnyValue, always present). Its
// members are a oneof: a zero value is encoded too.
func appendAnyValue(b []byte, num protowire.Number, v attribute.Value) []byte {
	at := 0
	b, at = beginMessage(b, num)
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, anyBool, protowire.VarintType)
		b = protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, anyInt, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		b = protowire.AppendTag(b, anyDouble, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		b = protowire.AppendTag(b, anyString, protowire.BytesType)
		b = protowire.AppendString(b, v.AsString())
	case attribute.BYTESLICE:
		b = protowire.AppendTag(b, anyBytes, protowire.BytesType)
		b = protowire.AppendBytes(b, v.AsByteSlice())
	case attribute.BOOLSLICE:
		b = appendArray(b, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		b = appendArray(b, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		b = appendArray(b, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		b = appendArray(b, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		b = appendArray(b, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		lat := 0
		b, lat = beginMessage(b, anyKvlist)
		for _, kv := range v.AsMap() {
			b = appendKeyValue(b, listValues, kv)
		}
		b = endMessage(b, lat)
	case attribute.EMPTY:
	default:
		b = protowire.AppendTag(b, anyString, protowire.BytesType)
		b = protowire.AppendString(b, invalidAttrValueStr)
	}
	return endMessage(b, at)
}

// appendArray appends xs as AnyValue.array_value, each made a Value by value.
func appendArray[T any](b []byte, xs []T, value func(T) attribute.Value) []byte {
	at := 0
	b, at = beginMessage(b, anyArray)
	for _, x := range xs {
		b = appendAnyValue(b, listValues, value(x))
	}
	return endMessage(b, at)
}

// beginMessage appends the tag of a length-delimited field num and returns
// where its body starts; endMessage then puts the body's length in front
// of it. The length is unknown until the body is written, so the body
// moves by the length's size: a copy within the buffer, cheaper than
// sizing every message first.
func beginMessage(b []byte, num protowire.Number) ([]byte, int) {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return b, len(b)
}

func endMessage(b []byte, at int) []byte {
	n := len(b) - at
	size := protowire.SizeVarint(uint64(n))
	b = slices.Grow(b, size)[:len(b)+size]
	copy(b[at+size:], b[at:at+n])
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// appendString, appendBytes, appendVarint, appendFixed32 and appendFixed64
// append field num unless its value is proto3's default (empty, zero),
// which a decoder reads as absent anyway.
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}
