package accesslog

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"testing"
	"time"
)

// TestAccessLogEncoder: the package's encoder writes the bytes slog's
// JSON handler writes for the same line, odd strings and floats included.
func TestAccessLogEncoder(t *testing.T) {
	base := Line{
		RequestID: "3f2a9c1e5b7d4f608a1b2c3d4e5f6a7b", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
		Route: "/v1/chat/completions", Path: "/v1/chat/completions", Model: "llama-3-8b", Backend: "a", Status: 200, Stream: true,
		Latency: 912.4, TTFT: 81.2, PromptTokens: 42, CompletionTokens: 128, UsageSource: "reported", Tenant: "team-a", Quota: "admitted", QuotaTokens: 170,
		ITLP50: 11.9, ITLP95: 14.2, MaxGap: 31.5, TPS: 82.4, Attempts: 1,
		RouteStrategy: "prefix", RouteBlocks: 12, RouteMatched: 9, RouteReason: "match",
	}
	lines := []func(l *Line){
		func(l *Line) {},
		func(l *Line) { *l = Line{} },
		func(l *Line) { l.RequestID = `a"b\c` + "\x00\x1f\t\n\r\x7f<>&" },
		func(l *Line) { l.Route, l.Path = "/v1/*", "/v1/files/a\"b c/\xff\u2028" },
		func(l *Line) { l.Model = "modèle-\u2028-\u2029-\xff-\xe2\x82-日本" },
		func(l *Line) { l.Tenant = "sha256:0123456789ab"; l.ErrorClass = "upstream_5xx"; l.Status = 502 },
		func(l *Line) { l.Latency, l.TTFT, l.TPS = 1e21, 1e-7, 123456789.123 },
		func(l *Line) { l.Latency, l.TTFT, l.ITLP50, l.ITLP95 = 0.001, -0.5, 1e20, 9.999999e-7 },
		func(l *Line) { l.MaxGap, l.TPS = math.SmallestNonzeroFloat64, math.MaxFloat64 },
		func(l *Line) { l.PromptTokens, l.CompletionTokens, l.Attempts = -1, math.MaxInt, 3 },
		func(l *Line) { l.RouteReason, l.RouteGuard, l.RouteMatched = "load", true, 0 },
		func(l *Line) { l.RouteHot = true },
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
	l := Line{TPS: math.NaN()}
	if l.finite() {
		t.Error("a NaN line is finite")
	}
	var buf bytes.Buffer
	New(slog.New(NewHandler(&buf))).Log(context.Background(), &l)
	if !bytes.Contains(buf.Bytes(), []byte(`"msg":"request"`)) || !bytes.Contains(buf.Bytes(), []byte(`"tokens_per_second":"!ERROR`)) ||
		bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("access line %q", buf.Bytes())
	}
}

// TestAccessLogEncoderUsed: a Logger over NewHandler writes with the
// package's encoder, over another handler through slog.
func TestAccessLogEncoderUsed(t *testing.T) {
	var own, other bytes.Buffer
	if New(slog.New(NewHandler(&own))).w == nil {
		t.Error("a Logger over NewHandler does not use the package's encoder")
	}
	if New(slog.New(slog.NewJSONHandler(&other, nil))).w != nil {
		t.Error("a Logger over another handler uses the package's encoder")
	}
	if New(nil) != nil {
		t.Error("New(nil) is not nil")
	}
}
