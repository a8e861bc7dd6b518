package demo

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers"
	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway"
)

// testBuild wires a gateway like `vigil serve` does for the demo's config
// (in-memory state, no tracing: the demo's), for the tests here, which
// cannot reach cmd/vigil's wiring.
func testBuild(cfg config.Config, log, access *slog.Logger) (*Gateway, error) {
	reg := prometheus.NewRegistry()
	ao := analyzers.Options{Config: cfg.Analyzers, Registry: reg, Log: log, Backends: cfg.Backends, Alerts: cfg.Alerts}
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
	var gw *gateway.Server
	ao.BackendStates = func() []exchange.BackendState { return gw.BackendStates() }
	p, err := analyzers.New(ao)
	if err != nil {
		return nil, err
	}
	gw, err = gateway.New(gateway.Options{Config: cfg, Log: log, AccessLog: access, Registry: reg,
		Observer: p, Signals: p, Baseline: p, Feedback: p, Alerts: p, Notifications: p, History: p, Usage: p, Shadow: p})
	if err != nil {
		return nil, err
	}
	serve := func(ctx context.Context, ln net.Listener) error {
		srv := gw.HTTPServer(slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug))
		ln = gw.Listener(ln)
		gwCtx, stopGateway := context.WithCancel(context.WithoutCancel(ctx))
		anCtx, stopAnalysis := context.WithCancel(context.WithoutCancel(ctx))
		defer stopGateway()
		defer stopAnalysis()
		var g errgroup.Group
		gwDone := make(chan struct{})
		g.Go(func() error { defer close(gwDone); return gw.Run(gwCtx) })
		g.Go(func() error { return p.Run(anCtx) })
		g.Go(func() error {
			defer func() { stopGateway(); <-gwDone; stopAnalysis() }()
			errc := make(chan error, 1)
			go func() { errc <- gw.Serve(srv, ln) }()
			select {
			case err := <-errc:
				return err
			case <-ctx.Done():
			}
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := srv.Shutdown(sctx)
			if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) {
				err = errors.Join(err, serr)
			}
			return err
		})
		return g.Wait()
	}
	return &Gateway{Pipeline: p, Server: gw, Serve: serve, Close: func() {}}, nil
}

// testServeHTTP serves h on ln until ctx is done.
func testServeHTTP(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}
