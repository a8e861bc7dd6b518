package tracing

import (
	"errors"
	"log/slog"
	"sync"

	"go.opentelemetry.io/otel"
)

// The otel SDK reports errors it cannot return (a failed background export,
// a bad OTEL_* value) to one process-wide handler, otel.SetErrorHandler.
// Vigil installs its router there once, on the first New, and the router
// sends each error to the limiter of the newest Provider not yet shut down,
// so SDK errors are logged like export errors: at most once a minute. With
// no live Provider they go to slog.Default. These variables exist only
// because otel's handler is global.
var (
	errorRouterOnce sync.Once
	errorRouterMu   sync.Mutex
	errorRouterLive []*limiter // live Providers' limiters, oldest first
)

func installErrorRouter() {
	errorRouterOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(routeError))
	})
}

func routeError(err error) {
	if _, ok := errors.AsType[*loggedError](err); ok {
		return // counted and logged by the exporter that returned it
	}
	errorRouterMu.Lock()
	var l *limiter
	if n := len(errorRouterLive); n > 0 {
		l = errorRouterLive[n-1]
	}
	errorRouterMu.Unlock()
	if l == nil {
		slog.Default().Warn("tracing: opentelemetry error", "error", err)
		return
	}
	l.warn("tracing: opentelemetry error", err)
}

func addErrorRoute(l *limiter) {
	installErrorRouter()
	errorRouterMu.Lock()
	errorRouterLive = append(errorRouterLive, l)
	errorRouterMu.Unlock()
}

func removeErrorRoute(l *limiter) {
	errorRouterMu.Lock()
	defer errorRouterMu.Unlock()
	for i, x := range errorRouterLive {
		if x == l {
			errorRouterLive = append(errorRouterLive[:i], errorRouterLive[i+1:]...)
			return
		}
	}
}
