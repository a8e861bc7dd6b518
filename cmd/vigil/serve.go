package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/analyzers"
	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/tracing"
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
	app, err := build(cfg, log, access)
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
	return app.serve(ctx, ln)
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

// app is a wired gateway with the analyzers behind it.
type app struct {
	gw       *gateway.Server
	pipeline *analyzers.Pipeline
	tracing  *tracing.Provider // nil until built
	closers  []io.Closer       // closed last, after the tracer
	log      *slog.Logger
	limits   config.Limits // the shutdown's delay and grace
}

// build wires the parts of a gateway from a validated config. Whatever it
// opened before a failing step is closed again.
func build(cfg config.Config, log, access *slog.Logger) (_ *app, err error) {
	a := &app{log: log, limits: cfg.Limits}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.tracing, err = tracing.New(context.Background(), tracing.Options{Config: cfg.Tracing, Version: buildVersion(), Log: log, Registry: reg}); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	ao := analyzers.Options{Config: cfg.Analyzers, Registry: reg, Log: log, Tracer: a.tracing.Tracer(), Backends: cfg.Backends}
	var weights *state.Weights
	var shared state.Store
	var replica string
	if url := cfg.State.Redis.URL; url != "" {
		rc, err := state.OpenRedis(url)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, rc)
		// Windows and weights go to Redis off the request path; a Redis
		// outage costs only their sharing, never a request.
		store := state.NewRedis(rc, cfg.State.Redis.Prefix)
		shared, replica = store, share.ReplicaID()
		ao.Sharing = &share.Config{Store: store, Replica: replica, Interval: cfg.State.Redis.FlushInterval}
		weights = &state.Weights{Store: store, Replica: replica, MaxAge: cfg.Balancer.StaleAfter}
	}
	ao.Alerts = cfg.Alerts
	var notifiers alert.Multi
	if u := cfg.Alerts.AlertmanagerURL; u != "" {
		notifiers = append(notifiers, &alert.AlertmanagerNotifier{URL: u})
	}
	if u := cfg.Alerts.WebhookURL; u != "" {
		notifiers = append(notifiers, &alert.WebhookNotifier{URL: u})
	}
	if len(notifiers) > 0 {
		ao.Notifier = notifiers
	}
	// The history records the backends as the gateway sees them; the
	// gateway is built next, before anything runs.
	ao.BackendStates = func() []exchange.BackendState { return a.gw.BackendStates() }
	if a.pipeline, err = analyzers.New(ao); err != nil {
		return nil, err
	}
	p := a.pipeline
	gopts := gateway.Options{
		Config: cfg, Log: log, AccessLog: access, Registry: reg,
		Tracer: a.tracing.Tracer(), Propagator: a.tracing.Propagator(),
		Observer: p, Signals: p, Baseline: p, Feedback: p, Alerts: p, Notifications: p, History: p, Usage: p, Shadow: p,
	}
	if weights != nil {
		gopts.WeightStore = weights
		gopts.SharedStore, gopts.Replica = shared, replica
	}
	if a.gw, err = gateway.New(gopts); err != nil {
		return nil, err
	}
	return a, nil
}

// serve runs the app on ln until ctx is done, then shuts it down in order
// (see serveGateway) and closes it.
func (a *app) serve(ctx context.Context, ln net.Listener) error {
	defer a.close()
	return serveGateway(ctx, ln, a.gw, a.limits, a.log, a.pipeline.Run)
}

// close flushes the spans still queued, for at most five seconds, then
// closes the shared store's client. Safe on a partly built app.
func (a *app) close() {
	if a.tracing != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.tracing.Shutdown(sctx); err != nil {
			a.log.Warn("flushing spans", "err", err)
		}
		cancel()
	}
	for _, c := range a.closers {
		c.Close()
	}
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

// serveGateway serves gw on ln until ctx is done, then shuts down in order,
// as Kubernetes expects of a pod it stops (limits.*):
//
//  1. /readyz answers 503 at once and responses ask clients to close
//     their connections, while requests are still served for
//     shutdown_delay (load balancers take the replica out of rotation);
//  2. the listener closes (new connections are refused) and requests and
//     streams in flight get shutdown_grace to finish; those still running
//     then are cut;
//  3. the gateway's background work stops (its observer queue drains into
//     the analyzers, shadow comparisons stop), and only then the analyzers
//     (which evaluate and flush their windows once more).
//
// Either analysis is nil or it runs until its context is cancelled.
func serveGateway(ctx context.Context, ln net.Listener, gw *gateway.Server, lim config.Limits, log *slog.Logger, analysis func(context.Context) error) error {
	srv := gw.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelDebug))
	ln = gw.Listener(ln)
	gwCtx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
	anCtx, stopAnalysis := context.WithCancel(context.WithoutCancel(ctx))
	defer stopGateway()
	defer stopAnalysis()
	gwDone := make(chan struct{})
	var g errgroup.Group
	g.Go(func() error {
		defer close(gwDone)
		return gw.Run(gwCtx)
	})
	if analysis != nil {
		g.Go(func() error { return analysis(anCtx) })
	}
	g.Go(func() error {
		defer func() {
			stopGateway()
			<-gwDone // every queued event has reached the analyzers
			stopAnalysis()
		}()
		errc := make(chan error, 1)
		go func() { errc <- gw.Serve(srv, ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		log.Info("shutting down: /readyz answers 503 (a second signal exits at once)", "shutdown_delay", lim.ShutdownDelay.String(),
			"shutdown_grace", lim.ShutdownGrace.String())
		gw.Drain()
		srv.SetKeepAlivesEnabled(false)
		if lim.ShutdownDelay > 0 {
			t := time.NewTimer(lim.ShutdownDelay)
			select {
			case <-t.C:
			case err := <-errc:
				t.Stop()
				return err
			}
		}
		sctx, cancel := context.WithTimeout(context.Background(), lim.ShutdownGrace)
		defer cancel()
		err := srv.Shutdown(sctx)
		if errors.Is(err, context.DeadlineExceeded) {
			// The grace is over: cut what is still in flight, and give
			// the handlers a moment to record what they served.
			log.Warn("shutdown grace over: cutting the requests still in flight")
			err = srv.Close()
			wctx, wcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = gw.Wait(wctx)
			wcancel()
		}
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		return err
	})
	return g.Wait()
}
