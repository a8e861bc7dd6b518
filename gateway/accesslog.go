package gateway

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/vigil-gw/vigil/exchange"
)

// NewAccessLogHandler returns a slog.Handler that writes to w exactly what
// slog.NewJSONHandler(w, nil) writes, one line per Write. A gateway whose
// Options.AccessLog is slog.New(NewAccessLogHandler(w)) writes its access
// log lines with its own encoder: the same bytes without slog's cost per
// attribute (issue 15: a third of them were floats, which slog encodes
// through encoding/json). It is safe for concurrent use.
func NewAccessLogHandler(w io.Writer) slog.Handler {
	lw := &lineWriter{w: w}
	return &accessHandler{JSONHandler: slog.NewJSONHandler(lw, nil), w: lw}
}

// accessHandler is slog's JSON handler, with its writer at hand for the
// gateway's encoder.
type accessHandler struct {
	*slog.JSONHandler
	w *lineWriter
}

// lineWriter serializes the writes of both encoders, as slog's handler
// serializes its own.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// accessLine is the access log line of one request, in the order of its
// fields.
type accessLine struct {
	requestID, traceID, route, model, backend string
	status                                    int
	stream                                    bool
	latency, ttft                             float64
	promptTokens, completionTokens            int
	usageSource, tenant                       string
	itlP50, itlP95, maxGap, tps               float64
	errorClass                                string
	attempts                                  int
}

func (s *Server) logAccess(ctx context.Context, x *call, status int, class exchange.ErrorClass) {
	var ttft, tps float64
	if !x.firstByte.IsZero() {
		d := x.firstByte.Sub(x.req.Start)
		ttft = ms(d)
		if gen := x.latency - d; x.req.Stream && x.completionTokens > 0 && gen > 0 {
			tps = float64(x.completionTokens) / gen.Seconds()
		}
	}
	l := accessLine{
		requestID: x.req.ID, traceID: x.req.TraceID, route: x.req.Route, model: x.req.Model, backend: x.req.Backend,
		status: status, stream: x.req.Stream, latency: ms(x.latency), ttft: ttft,
		promptTokens: x.promptTokens, completionTokens: x.completionTokens,
		usageSource: string(x.usageSource), tenant: x.req.Tenant,
		itlP50: ms(x.gaps.P50), itlP95: ms(x.gaps.P95), maxGap: ms(x.gaps.Max), tps: math.Round(tps*10) / 10,
		errorClass: string(class), attempts: x.attempts,
	}
	if s.accessW != nil && l.finite() {
		bp := accessBufs.Get().(*[]byte)
		b := l.appendJSON((*bp)[:0], time.Now())
		s.accessW.Write(b) // as with slog's handler, a failed write loses the line
		*bp = b
		accessBufs.Put(bp)
		return
	}
	s.access.LogAttrs(ctx, slog.LevelInfo, "request", l.attrs()...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// attrs returns l as slog attributes.
func (l *accessLine) attrs() []slog.Attr {
	return []slog.Attr{
		slog.String("request_id", l.requestID),
		slog.String("trace_id", l.traceID),
		slog.String("route", l.route),
		slog.String("model", l.model),
		slog.String("backend", l.backend),
		slog.Int("status", l.status),
		slog.Bool("stream", l.stream),
		slog.Float64("latency_ms", l.latency),
		slog.Float64("ttft_ms", l.ttft),
		slog.Int("prompt_tokens", l.promptTokens),
		slog.Int("completion_tokens", l.completionTokens),
		slog.String("usage_source", l.usageSource),
		slog.String("tenant", l.tenant),
		slog.Float64("itl_p50_ms", l.itlP50),
		slog.Float64("itl_p95_ms", l.itlP95),
		slog.Float64("max_gap_ms", l.maxGap),
		slog.Float64("tokens_per_second", l.tps),
		slog.String("error_class", l.errorClass),
		slog.Int("attempts", l.attempts),
	}
}

// finite reports whether the floats of l are finite: slog writes an
// error in place of the others, which appendJSON leaves to slog.
func (l *accessLine) finite() bool {
	for _, f := range [...]float64{l.latency, l.ttft, l.itlP50, l.itlP95, l.maxGap, l.tps} {
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return false
		}
	}
	return true
}

// accessBufs pools the access log's line buffers.
var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendJSON appends l as slog.NewJSONHandler(w, nil) writes it for a
// record at time t, level INFO, message "request", newline included.
func (l *accessLine) appendJSON(b []byte, t time.Time) []byte {
	b = append(b, `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","request_id":`...)
	b = appendJSONString(b, l.requestID)
	b = append(b, `,"trace_id":`...)
	b = appendJSONString(b, l.traceID)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, l.route)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, l.model)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, l.backend)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.status), 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, l.stream)
	b = append(b, `,"latency_ms":`...)
	b = appendJSONFloat(b, l.latency)
	b = append(b, `,"ttft_ms":`...)
	b = appendJSONFloat(b, l.ttft)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(l.promptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(l.completionTokens), 10)
	b = append(b, `,"usage_source":`...)
	b = appendJSONString(b, l.usageSource)
	b = append(b, `,"tenant":`...)
	b = appendJSONString(b, l.tenant)
	b = append(b, `,"itl_p50_ms":`...)
	b = appendJSONFloat(b, l.itlP50)
	b = append(b, `,"itl_p95_ms":`...)
	b = appendJSONFloat(b, l.itlP95)
	b = append(b, `,"max_gap_ms":`...)
	b = appendJSONFloat(b, l.maxGap)
	b = append(b, `,"tokens_per_second":`...)
	b = appendJSONFloat(b, l.tps)
	b = append(b, `,"error_class":`...)
	b = appendJSONString(b, l.errorClass)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(l.attempts), 10)
	return append(b, "}\n"...)
}

// appendJSONFloat appends a finite f as encoding/json (and so slog) does.
func appendJSONFloat(b []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' { // e-09 → e-9
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONString appends s quoted as slog's JSON handler quotes it (its
// appendEscapedJSONString: encoding/json's escaping without the HTML
// escapes).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
