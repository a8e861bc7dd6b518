package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/internal/app"
	"github.com/vigil-gw/vigil/state"
)

// multiFlag collects a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config `file` (optional)")
	listen := fs.String("listen", "", "listen `address`, overrides the config's listen")
	redis := fs.String("redis", "", "Redis `URL`, overrides state.redis.url")
	var backends multiFlag
	fs.Var(&backends, "backend", "backend as `[name=]url[#kind]`; repeatable; replaces the config's backends")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *redis != "" {
		cfg.State.Redis.URL = *redis
	}
	if len(backends) > 0 {
		cfg.Backends = nil
		for i, s := range backends {
			b, err := config.ParseBackendFlag(s, i)
			if err != nil {
				return fmt.Errorf("--backend %q: %w", s, err)
			}
			cfg.Backends = append(cfg.Backends, b)
		}
	}
	if err := cfg.ValidateServe(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	log := newLogger(stderr, cfg.Log.Level)
	// go-redis's own pool and dial lines, structured and rate-limited:
	// dozens a second while Redis is down otherwise.
	state.SetRedisLogger(log, 10*time.Second)
	var access *slog.Logger
	if cfg.Log.Access {
		// slog's JSON lines, written by the gateway's own encoder,
		// buffered (logbuf.go) and flushed after the gateway stopped.
		buf := newBufferedLog(stdout)
		flushCtx, stopFlush := context.WithCancel(context.Background())
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			buf.run(flushCtx)
		}()
		defer func() {
			stopFlush()
			<-flushed
		}()
		access = slog.New(accesslog.NewHandler(buf))
	}
	a, err := app.Build(cfg, app.Options{Log: log, AccessLog: access, Version: buildVersion()})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	gc := setDefaultGC(os.Getenv)
	memLimit := setMemoryLimit(os.Getenv, cfg.Limits, containerMemoryLimit)
	log.Info("vigil serving", "listen", ln.Addr().String(), "tls", cfg.ListenTLS.CertFile != "",
		"backends", len(cfg.Backends), "version", buildVersion(), "gogc", gc, "memory_limit", memLimit)
	if *path != "" {
		rctx, cancel := context.WithCancel(ctx)
		reloaded := make(chan struct{})
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go func() {
			defer close(reloaded)
			defer signal.Stop(hup)
			reloadQuotas(rctx, hup, *path, a.SetQuotas, log)
		}()
		defer func() {
			cancel()
			<-reloaded
		}()
	}
	return a.Serve(ctx, ln)
}

// reloadQuotas rereads the config file's quotas section on each signal
// from hup (SIGHUP) until ctx ends and puts it in force with set: limits
// change without a restart, and the tenants' counts so far stand. A file
// that does not load, or quotas that are not valid, change nothing. The
// other sections are read at start only.
func reloadQuotas(ctx context.Context, hup <-chan os.Signal, path string, set func(config.Quotas), log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		cfg, err := loadConfig(path)
		if err == nil {
			err = cfg.Quotas.Validate()
		}
		if err != nil {
			log.Error("SIGHUP: quotas unchanged: the config does not load", "path", path, "err", err)
			continue
		}
		set(cfg.Quotas)
		log.Info("SIGHUP: quotas reloaded", "path", path, "enabled", cfg.Quotas.Enabled, "tenants", len(cfg.Quotas.Tenants), "models", len(cfg.Quotas.Models))
	}
}

// defaultGOGC is the collector's target when GOGC is not set: Go's own.
// 200 was the default while the request path was judged in-process, where
// it cut the gateway's own CPU per request by a third; behind real sockets
// the two measure alike (CPU per request at 1000 req/s within one round's
// noise of each other), while a held stream's share of the peak heap is a
// sixth smaller at 100 (1,000 streams: 157 → 131 KiB each; operations.md,
// "GC settings"). GOMEMLIMIT, when set, still bounds the heap: the
// collector works harder as it nears the limit.
const defaultGOGC = 100

// setDefaultGC sets the collector's target to defaultGOGC unless GOGC is
// set in the environment, and returns the target in force, as GOGC spells
// it.
func setDefaultGC(getenv func(string) string) string {
	if v := getenv("GOGC"); v != "" {
		return v
	}
	debug.SetGCPercent(defaultGOGC)
	return strconv.Itoa(defaultGOGC)
}

// The derived memory limit (limits.memory_limit 0): a base for the
// process at rest (tens of MB with every analyzer, the windows and the
// caches full) plus a budget per allowed connection. A held stream costs
// about 90 KiB in use (Go heap and the four goroutines' stacks of net/http:
// 9,872 streams held 882 MiB of RSS in the stream suite) and GOGC lets
// the heap grow past it before a collection: at 9,872 streams the peak
// was 1,465 MiB with GOGC=200. The budget leaves the collector about
// 25 % of room above what max_connections streams hold, so that it is
// not driven to collect without end, and caps the peak near 1.2 GiB at
// the default 10,000 connections.
const (
	memoryLimitBase          = 128 << 20
	memoryLimitPerConnection = 112 << 10
	// containerShare of a container's memory limit is the most the heap
	// may aim for: the rest is what the runtime does not count (the
	// binary, C libraries, the kernel's socket buffers charged to the
	// cgroup).
	containerShare = 0.9
)

// setMemoryLimit sets the runtime's soft memory limit from lim unless
// GOMEMLIMIT is set in the environment, and returns the limit in force
// as GOMEMLIMIT spells it ("off": none). container reports the cgroup's
// memory limit, when there is one.
func setMemoryLimit(getenv func(string) string, lim config.Limits, container func() (int64, bool)) string {
	if v := getenv("GOMEMLIMIT"); v != "" {
		return v
	}
	n := lim.MemoryLimit
	if n == 0 {
		if lim.MaxConnections > 0 {
			n = memoryLimitBase + memoryLimitPerConnection*int64(lim.MaxConnections)
		}
		if c, ok := container(); ok {
			if most := int64(containerShare * float64(c)); n == 0 || most < n {
				n = most
			}
		}
	}
	if n <= 0 {
		debug.SetMemoryLimit(math.MaxInt64)
		return "off"
	}
	debug.SetMemoryLimit(n)
	return strconv.FormatInt(n>>20, 10) + "MiB"
}

// containerMemoryLimit reads the memory limit of the cgroup the process
// runs in: cgroup v2's memory.max, else v1's memory.limit_in_bytes (whose
// "no limit" is a number near 2⁶³).
func containerMemoryLimit() (int64, bool) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if n, ok := readMemoryLimit(p); ok {
			return n, true
		}
	}
	return 0, false
}

// readMemoryLimit reads one cgroup limit file: a byte count, or "max".
func readMemoryLimit(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	// v1 writes "no limit" as the largest page-aligned int64.
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// loadConfig reads the file (if any) over the defaults and applies VIGIL_*
// environment overrides.
func loadConfig(path string) (config.Config, error) {
	cfg := config.Default()
	if path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return cfg, err
		}
	}
	if err := cfg.ApplyEnv(os.Getenv); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func newLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
