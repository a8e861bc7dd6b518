// Package app builds the parts of a running gateway from a config
// (tracing, Redis, the analyzers pipeline, the gateway server) and runs
// them under one errgroup with the ordered shutdown: /readyz 503 and
// limits.shutdown_delay, HTTP with limits.shutdown_grace, the gateway's
// background work, the analyzers, then the tracer and the Redis client.
// `vigil serve` and `vigil demo` run their gateways with it.
package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/vigil-gw/vigil/analyzers"
	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/tracing"
)

// Options are what Build needs besides the config.
type Options struct {
	Log       *slog.Logger // the gateway's and the analyzers' log; nil: none
	AccessLog *slog.Logger // nil: no access log
	Version   string       // the build's version, reported by the tracer
	// Getenv reads the OTEL_* variables of the tracer (tracing.Options);
	// nil: the process environment. Several gateways in one process (the
	// matrix demo) each point their exporter at their own collector.
	Getenv func(string) string
}

// App is a wired gateway with the analyzers behind it.
type App struct {
	gw       *gateway.Server
	pipeline *analyzers.Pipeline
	tracing  *tracing.Provider // nil until built
	closers  []io.Closer       // closed last, after the tracer
	log      *slog.Logger
	limits   config.Limits // the shutdown's delay and grace
}

// Gateway returns the app's gateway server.
func (a *App) Gateway() *gateway.Server { return a.gw }

// Pipeline returns the analyzers behind the gateway.
func (a *App) Pipeline() *analyzers.Pipeline { return a.pipeline }

// Build wires the parts of a gateway from a validated config. Whatever it
// opened before a failing step is closed again.
func Build(cfg config.Config, o Options) (_ *App, err error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &App{log: log, limits: cfg.Limits}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.tracing, err = tracing.New(context.Background(), tracing.Options{Config: cfg.Tracing, Version: o.Version, Log: log, Registry: reg, Getenv: o.Getenv}); err != nil {
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
	// An adapter's base model is what the backends' /v1/models say. The
	// pipeline asks already while it is built, before the gateway is: it
	// gets none then and asks again at its next rebalance.
	ao.BaseModel = func(model string) string {
		if a.gw == nil {
			return ""
		}
		return a.gw.Pool().BaseModel(model)
	}
	if a.pipeline, err = analyzers.New(ao); err != nil {
		return nil, err
	}
	p := a.pipeline
	gopts := gateway.Options{
		Config: cfg, Log: log, AccessLog: o.AccessLog, Registry: reg,
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

// Serve runs the app on ln until ctx is done, then shuts it down in order
// (see ServeGateway) and closes it.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	defer a.Close()
	return ServeGateway(ctx, ln, a.gw, a.limits, a.log, a.pipeline.Run)
}

// SetQuotas puts new tenant quotas (validated) in force, as SIGHUP's
// reload does: the tenants' counts so far stand against the new limits.
func (a *App) SetQuotas(q config.Quotas) { a.gw.SetQuotas(q) }

// Close flushes the spans still queued, for at most five seconds, then
// closes the shared store's client. Safe on a partly built app; Serve
// closes the app itself, so Close is for an app that is never served.
func (a *App) Close() {
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
