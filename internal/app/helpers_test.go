package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// simBackend serves a zero-latency simulator of model "m" (seed 1), its
// knobs adjusted by set, until the test ends, and returns its URL.
func simBackend(t *testing.T, set func(*sim.Knobs)) string {
	t.Helper()
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	if set != nil {
		set(&k)
	}
	srv := httptest.NewServer(sim.New(sim.Options{Model: "m", Seed: 1, Knobs: k}).Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// testConfig is a serving config over one backend, without active health
// checks or span export.
func testConfig(backendURL string) config.Config {
	cfg := config.Default()
	cfg.Tracing.Exporter = "none"
	cfg.Backends = []config.Backend{{Name: "a", URL: backendURL, Kind: "openai", Weight: 100}}
	cfg.Health.Interval = 0
	cfg.Listen = "127.0.0.1:0"   // loopback: the admin API may go without a token
	cfg.Limits.ShutdownDelay = 0 // tests that need the delay set it
	return cfg
}

// startApp validates cfg, builds the app and serves its gateway (with its
// background work) until the test ends; it returns the app and its URL.
func startApp(t *testing.T, cfg config.Config) (*App, string) {
	t.Helper()
	if err := cfg.ValidateServe(); err != nil {
		t.Fatal(err)
	}
	a, err := Build(cfg, Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.gw.Handler())
	t.Cleanup(srv.Close)
	go a.gw.Run(t.Context())
	return a, srv.URL
}

// serveApp builds the app from cfg and serves it as `vigil serve` does
// (ordered shutdown included) on a free port. It returns the app, its base
// URL and stop, which shuts it down and returns what serve returned.
func serveApp(t *testing.T, cfg config.Config) (a *App, url string, stop func() error) {
	t.Helper()
	a, err := Build(cfg, Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	var once sync.Once
	var serveErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case serveErr = <-done:
			case <-time.After(30 * time.Second):
				serveErr = errors.New("serve did not return within 30 s of its cancellation")
			}
		})
		return serveErr
	}
	t.Cleanup(func() { stop() })
	return a, "http://" + ln.Addr().String(), stop
}

// nextBucket waits until the analyzers have taken in the responses to the
// first served requests the gateway answered (the usage counts them once
// their ends are recorded), and then until the wall clock has left the
// bucket of width they ended in: buckets are numbered by the wall clock
// (window.Series), so that requests sent from then on land in a later one.
func nextBucket(t *testing.T, a *App, served int64, width time.Duration) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d responses taken in by the analyzers", served), func() bool {
		u, err := a.pipeline.Usage(t.Context())
		return err == nil && u.Hour.Totals.Requests >= served
	})
	last := time.Now().UnixNano() / int64(width)
	testutil.WaitFor(t, "the next bucket", func() bool { return time.Now().UnixNano()/int64(width) > last })
}
