package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway"
)

// ServeGateway serves gw on ln until ctx is done, then shuts down in order,
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
func ServeGateway(ctx context.Context, ln net.Listener, gw *gateway.Server, lim config.Limits, log *slog.Logger, analysis func(context.Context) error) error {
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

// ServeHandler serves h on ln until ctx is done, then shuts down
// gracefully, giving requests in flight ten seconds. It serves the
// simulator, the agent and the demo's helpers: no gateway limits, and the
// server's own error log discarded.
func ServeHandler(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
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
