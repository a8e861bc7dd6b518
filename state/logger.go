package state

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisLogInterval is the RedisLogger interval when none is given.
const DefaultRedisLogInterval = 10 * time.Second

// RedisLogger routes go-redis's own log lines (dial failures, pool and
// Sentinel messages), which it otherwise prints unstructured to stderr
// dozens of times a second while Redis is down, through a *slog.Logger as
// Warn records with the message "redis client" and the line in "detail". It
// writes at most one record per interval; the next one carries the number of
// lines dropped since the previous one in "suppressed".
//
// A RedisLogger is safe for concurrent use and takes no lock: a
// compare-and-swap on the next allowed time picks the one caller that logs.
type RedisLogger struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time // time.Now; tests replace it

	next       atomic.Int64 // unix nanoseconds before which lines are dropped
	suppressed atomic.Int64 // lines dropped since the last record
}

// NewRedisLogger returns a RedisLogger writing to log (slog.Default() when
// nil) at most once per every (DefaultRedisLogInterval when every <= 0).
func NewRedisLogger(log *slog.Logger, every time.Duration) *RedisLogger {
	if log == nil {
		log = slog.Default()
	}
	if every <= 0 {
		every = DefaultRedisLogInterval
	}
	return &RedisLogger{log: log, every: every, now: time.Now}
}

// SetRedisLogger installs NewRedisLogger(log, every) as go-redis's
// process-wide logger, in place of its stderr one.
func SetRedisLogger(log *slog.Logger, every time.Duration) {
	redis.SetLogger(NewRedisLogger(log, every))
}

// Printf implements go-redis's internal.Logging.
func (l *RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	now := l.now().UnixNano()
	next := l.next.Load()
	// Losers of the swap drop their line: another caller logs this interval.
	if now < next || !l.next.CompareAndSwap(next, now+int64(l.every)) {
		l.suppressed.Add(1)
		return
	}
	// Formatting waits until a line is known to be written: a flood of
	// dropped lines costs a clock read and two atomics each.
	attrs := []slog.Attr{slog.String("detail", strings.TrimSpace(fmt.Sprintf(format, v...)))}
	if n := l.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, slog.Int64("suppressed", n))
	}
	l.log.LogAttrs(ctx, slog.LevelWarn, "redis client", attrs...)
}
