package state

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testRedisLogger returns a RedisLogger over a JSON handler, its output and
// a clock the test moves by hand.
func testRedisLogger(t *testing.T, every time.Duration) (*RedisLogger, *bytes.Buffer, *atomic.Int64) {
	t.Helper()
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	l := NewRedisLogger(slog.New(h), every)
	l.now = func() time.Time { return time.Unix(0, clock.Load()) }
	return l, &buf, &clock
}

// records decodes the JSON lines in buf.
func records(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(buf)
	for dec.More() {
		var r map[string]any
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("decoding %q: %v", buf, err)
		}
		out = append(out, r)
	}
	return out
}

// dialFormat is the line go-redis's pool prints on every failed dial
// (internal/pool/pool.go).
const dialFormat = "redis: connection pool: failed to dial after %d attempts: %v"

func TestRedisLoggerRateLimits(t *testing.T) {
	l, buf, clock := testRedisLogger(t, 10*time.Second)
	ctx := context.Background()
	for range 100 {
		l.Printf(ctx, dialFormat, 5, "dial tcp 127.0.0.1:6379: connect: connection refused")
		clock.Add(int64(50 * time.Millisecond)) // 20 a second, for 5 s
	}
	want := []map[string]any{{
		"level":  "WARN",
		"msg":    "redis client",
		"detail": "redis: connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:6379: connect: connection refused",
	}}
	if diff := cmp.Diff(want, records(t, buf)); diff != "" {
		t.Fatalf("first interval (-want +got):\n%s", diff)
	}

	// The first line after the interval carries the count of dropped ones.
	clock.Add(int64(5 * time.Second))
	l.Printf(ctx, "redis: %s\n", "sentinel: new master") // the newline goes
	l.Printf(ctx, "redis: dropped")
	want = []map[string]any{{
		"level":      "WARN",
		"msg":        "redis client",
		"detail":     "redis: sentinel: new master",
		"suppressed": float64(99),
	}}
	if diff := cmp.Diff(want, records(t, buf)); diff != "" {
		t.Fatalf("second interval (-want +got):\n%s", diff)
	}

	// Nothing dropped since: no count.
	clock.Add(int64(10 * time.Second))
	l.Printf(ctx, "redis: quiet")
	clock.Add(int64(10 * time.Second))
	l.Printf(ctx, "redis: again")
	got := records(t, buf)
	want = []map[string]any{
		{"level": "WARN", "msg": "redis client", "detail": "redis: quiet", "suppressed": float64(1)},
		{"level": "WARN", "msg": "redis client", "detail": "redis: again"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("later intervals (-want +got):\n%s", diff)
	}
}

// TestRedisLoggerConcurrent has many goroutines log in one instant: exactly
// one line gets out, and every other is counted once, by it (lines dropped
// while it was written) or by the next one.
func TestRedisLoggerConcurrent(t *testing.T) {
	l, buf, clock := testRedisLogger(t, time.Second)
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				l.Printf(context.Background(), "redis: refused")
			}
		})
	}
	wg.Wait()
	first := records(t, buf)
	if len(first) != 1 {
		t.Fatalf("%d lines in one interval, want 1: %v", len(first), first)
	}
	clock.Add(int64(time.Second))
	l.Printf(context.Background(), "redis: refused")
	got := records(t, buf)
	counted := func(r map[string]any) float64 { n, _ := r["suppressed"].(float64); return n }
	if len(got) != 1 || counted(first[0])+counted(got[0]) != goroutines*each-1 {
		t.Errorf("lines %v then %v: want one more line, and %d suppressed between the two", first, got, goroutines*each-1)
	}
}

func TestRedisLoggerDefaults(t *testing.T) {
	l := NewRedisLogger(nil, 0)
	if l.log != slog.Default() || l.every != DefaultRedisLogInterval {
		t.Errorf("NewRedisLogger(nil, 0): log %p, every %v; want slog.Default(), %v", l.log, l.every, DefaultRedisLogInterval)
	}
}
