package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
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
	log.Info("vigil serving", "listen", ln.Addr().String(), "tls", cfg.ListenTLS.CertFile != "",
		"backends", len(cfg.Backends), "version", buildVersion(), "gogc", gc)
	return a.Serve(ctx, ln)
}

// defaultGOGC is the collector's target when GOGC is not set. Vigil's heap
// is small (tens of MB), so at Go's default of 100 the collector runs every
// few hundred requests and takes a large share of the CPU per request; 200
// cut the gateway's own CPU per request by a third to two fifths (README,
// "GC settings") for a few MB more heap. GOMEMLIMIT, when set, still bounds
// the heap: the collector works harder as it nears the limit.
const defaultGOGC = 200

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
