package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"testing"
	"time"
)

// TestAccessLogEncoder: the gateway's encoder writes the bytes slog's
// JSON handler writes for the same line, odd strings and floats included.
func TestAccessLogEncoder(t *testing.T) {
	base := accessLine{
		requestID: "3f2a9c1e5b7d4f608a1b2c3d4e5f6a7b", traceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		route: "/v1/chat/completions", model: "llama-3-8b", backend: "a", status: 200, stream: true,
		latency: 912.4, ttft: 81.2, promptTokens: 42, completionTokens: 128, usageSource: "reported", tenant: "team-a",
		itlP50: 11.9, itlP95: 14.2, maxGap: 31.5, tps: 82.4, attempts: 1,
	}
	lines := []func(l *accessLine){
		func(l *accessLine) {},
		func(l *accessLine) { *l = accessLine{} },
		func(l *accessLine) { l.requestID = `a"b\c` + "\x00\x1f\t\n\r\x7f<>&" },
		func(l *accessLine) { l.model = "modèle-\u2028-\u2029-\xff-\xe2\x82-日本" },
		func(l *accessLine) { l.tenant = "sha256:0123456789ab"; l.errorClass = "upstream_5xx"; l.status = 502 },
		func(l *accessLine) { l.latency, l.ttft, l.tps = 1e21, 1e-7, 123456789.123 },
		func(l *accessLine) { l.latency, l.ttft, l.itlP50, l.itlP95 = 0.001, -0.5, 1e20, 9.999999e-7 },
		func(l *accessLine) { l.maxGap, l.tps = math.SmallestNonzeroFloat64, math.MaxFloat64 },
		func(l *accessLine) { l.promptTokens, l.completionTokens, l.attempts = -1, math.MaxInt, 3 },
	}
	for _, tz := range []*time.Location{time.UTC, time.FixedZone("X", -(3*3600 + 1800))} {
		at := time.Date(2026, 11, 29, 10, 0, 0, 123456000, tz)
		for i, mutate := range lines {
			l := base
			mutate(&l)
			var want bytes.Buffer
			r := slog.NewRecord(at, slog.LevelInfo, "request", 0)
			r.AddAttrs(l.attrs()...)
			if err := slog.NewJSONHandler(&want, nil).Handle(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got := l.appendJSON(nil, at); string(got) != want.String() {
				t.Errorf("line %d:\n got %s\nwant %s", i, got, want.String())
			}
		}
	}
}

// TestAccessLogFallback: a line with a float slog cannot encode goes
// through slog, error marker and all.
func TestAccessLogFallback(t *testing.T) {
	l := accessLine{tps: math.NaN()}
	if l.finite() {
		t.Error("a NaN line is finite")
	}
	var buf bytes.Buffer
	s := &Server{access: slog.New(NewAccessLogHandler(&buf))}
	s.accessW = s.access.Handler().(*accessHandler).w
	x := benchCall()
	x.latency = time.Duration(math.MaxInt64)
	s.logAccess(context.Background(), x, 200, "")
	if !bytes.Contains(buf.Bytes(), []byte(`"msg":"request"`)) || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("access line %q", buf.Bytes())
	}
}
