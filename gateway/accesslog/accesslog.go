// Package accesslog writes the gateway's access log: one JSON line per
// request, the bytes slog.NewJSONHandler writes, from an encoder of its own.
package accesslog

import (
	"context"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// NewHandler returns a slog.Handler that writes to w exactly what
// slog.NewJSONHandler(w, nil) writes, one line per Write. A Logger over a
// slog.Logger built on it writes its lines with its own encoder: the same
// bytes without slog's cost per attribute (a third of them are floats,
// which slog encodes through encoding/json, and the access log is written
// for every request). It is safe for concurrent use.
func NewHandler(w io.Writer) slog.Handler {
	lw := &lineWriter{w: w}
	return &accessHandler{JSONHandler: slog.NewJSONHandler(lw, nil), w: lw}
}

// accessHandler is slog's JSON handler, with its writer at hand for the
// package's encoder.
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

// A Line is the access log line of one request, in the order of its
// fields; durations are in milliseconds. Route is the bounded route label
// (the same as in metrics); Path is the request's path as the client sent
// it, for the pass-through routes whose label is a pattern ("/v1/*").
type Line struct {
	RequestID, TraceID, Route, Path, Model, Backend string
	Status                                          int
	Stream                                          bool
	Latency, TTFT                                   float64
	PromptTokens, CompletionTokens                  int
	UsageSource, Tenant                             string
	// What the tenant's quota decided ("" when no limit applies; see
	// docs/operations.md) and the tokens it charged once the request
	// ended.
	Quota                       string
	QuotaTokens                 int64
	ITLP50, ITLP95, MaxGap, TPS float64
	ErrorClass                  string
	Attempts                    int
	// How the backend was chosen: the balancer's strategy ("owner" for a
	// request pinned to the backend that holds its stored response), and
	// for the prefix strategy the prompt's hashed blocks, the leading ones
	// the preferred backend held, why it was chosen (match, placement,
	// load, short; "" otherwise), whether the load guard overrode the
	// prefix and whether the prompt's anchor was hot (more than one
	// backend's even share of the requests).
	RouteStrategy             string
	RouteBlocks, RouteMatched int
	RouteReason               string
	RouteGuard, RouteHot      bool
}

// A Logger writes access log lines to a slog.Logger: with the package's
// encoder when the logger's handler came from NewHandler, else through
// slog. It is safe for concurrent use.
type Logger struct {
	log *slog.Logger
	w   *lineWriter // the handler's writer when log is on NewHandler
}

// New returns a Logger writing to log, nil when log is nil.
func New(log *slog.Logger) *Logger {
	if log == nil {
		return nil
	}
	l := &Logger{log: log}
	if h, ok := log.Handler().(*accessHandler); ok {
		l.w = h.w
	}
	return l
}

// Log writes l as message "request" at level INFO.
func (lg *Logger) Log(ctx context.Context, l *Line) {
	if lg.w != nil && l.finite() {
		bp := accessBufs.Get().(*[]byte)
		b := l.appendJSON((*bp)[:0], time.Now())
		lg.w.Write(b) // as with slog's handler, a failed write loses the line
		*bp = b
		accessBufs.Put(bp)
		return
	}
	lg.log.LogAttrs(ctx, slog.LevelInfo, "request", l.attrs()...)
}

// attrs returns l as slog attributes.
func (l *Line) attrs() []slog.Attr {
	return []slog.Attr{
		slog.String("request_id", l.RequestID),
		slog.String("trace_id", l.TraceID),
		slog.String("route", l.Route),
		slog.String("path", l.Path),
		slog.String("model", l.Model),
		slog.String("backend", l.Backend),
		slog.Int("status", l.Status),
		slog.Bool("stream", l.Stream),
		slog.Float64("latency_ms", l.Latency),
		slog.Float64("ttft_ms", l.TTFT),
		slog.Int("prompt_tokens", l.PromptTokens),
		slog.Int("completion_tokens", l.CompletionTokens),
		slog.String("usage_source", l.UsageSource),
		slog.String("tenant", l.Tenant),
		slog.String("quota", l.Quota),
		slog.Int64("quota_tokens", l.QuotaTokens),
		slog.Float64("itl_p50_ms", l.ITLP50),
		slog.Float64("itl_p95_ms", l.ITLP95),
		slog.Float64("max_gap_ms", l.MaxGap),
		slog.Float64("tokens_per_second", l.TPS),
		slog.String("error_class", l.ErrorClass),
		slog.Int("attempts", l.Attempts),
		slog.String("route_strategy", l.RouteStrategy),
		slog.Int("route_blocks", l.RouteBlocks),
		slog.Int("route_matched", l.RouteMatched),
		slog.String("route_reason", l.RouteReason),
		slog.Bool("route_guard", l.RouteGuard),
		slog.Bool("route_hot", l.RouteHot),
	}
}

// finite reports whether the floats of l are finite: slog writes an
// error in place of the others, which appendJSON leaves to slog.
func (l *Line) finite() bool {
	for _, f := range [...]float64{l.Latency, l.TTFT, l.ITLP50, l.ITLP95, l.MaxGap, l.TPS} {
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
func (l *Line) appendJSON(b []byte, t time.Time) []byte {
	b = append(b, `{"time":"`...)
	b = t.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","request_id":`...)
	b = appendJSONString(b, l.RequestID)
	b = append(b, `,"trace_id":`...)
	b = appendJSONString(b, l.TraceID)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, l.Route)
	b = append(b, `,"path":`...)
	b = appendJSONString(b, l.Path)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, l.Model)
	b = append(b, `,"backend":`...)
	b = appendJSONString(b, l.Backend)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(l.Status), 10)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, l.Stream)
	b = append(b, `,"latency_ms":`...)
	b = appendJSONFloat(b, l.Latency)
	b = append(b, `,"ttft_ms":`...)
	b = appendJSONFloat(b, l.TTFT)
	b = append(b, `,"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(l.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(l.CompletionTokens), 10)
	b = append(b, `,"usage_source":`...)
	b = appendJSONString(b, l.UsageSource)
	b = append(b, `,"tenant":`...)
	b = appendJSONString(b, l.Tenant)
	b = append(b, `,"quota":`...)
	b = appendJSONString(b, l.Quota)
	b = append(b, `,"quota_tokens":`...)
	b = strconv.AppendInt(b, l.QuotaTokens, 10)
	b = append(b, `,"itl_p50_ms":`...)
	b = appendJSONFloat(b, l.ITLP50)
	b = append(b, `,"itl_p95_ms":`...)
	b = appendJSONFloat(b, l.ITLP95)
	b = append(b, `,"max_gap_ms":`...)
	b = appendJSONFloat(b, l.MaxGap)
	b = append(b, `,"tokens_per_second":`...)
	b = appendJSONFloat(b, l.TPS)
	b = append(b, `,"error_class":`...)
	b = appendJSONString(b, l.ErrorClass)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(l.Attempts), 10)
	b = append(b, `,"route_strategy":`...)
	b = appendJSONString(b, l.RouteStrategy)
	b = append(b, `,"route_blocks":`...)
	b = strconv.AppendInt(b, int64(l.RouteBlocks), 10)
	b = append(b, `,"route_matched":`...)
	b = strconv.AppendInt(b, int64(l.RouteMatched), 10)
	b = append(b, `,"route_reason":`...)
	b = appendJSONString(b, l.RouteReason)
	b = append(b, `,"route_guard":`...)
	b = strconv.AppendBool(b, l.RouteGuard)
	b = append(b, `,"route_hot":`...)
	b = strconv.AppendBool(b, l.RouteHot)
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
