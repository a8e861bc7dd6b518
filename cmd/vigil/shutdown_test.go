package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state/redistest"
)

// TestShutdownFlushesEverything: a gateway stopped right after its last
// response (thousands of stream events just queued) shuts down in order
// (HTTP, then the queue drains into the analyzers, then the last flush),
// so every response it served reaches the real Redis. A replica started
// afterwards counts them all. TestServeGatewayOrder pins the order itself.
func TestShutdownFlushesEverything(t *testing.T) {
	redis := redistest.Start(t)
	cfg := testConfig(simBackend(t, func(k *sim.Knobs) { k.OutputTokens = 200 }))
	cfg.State.Redis.URL = redis.URL()
	cfg.Analyzers.MinRequests, cfg.Analyzers.Window = 1_000_000, time.Hour
	cfg.Analyzers.QueueSize = 1 << 17 // nothing dropped: every event is queued
	if err := cfg.ValidateServe(); err != nil {
		t.Fatal(err)
	}
	_, base, stop := serveApp(t, cfg)

	const n = 120
	url := base + "/v1/chat/completions"
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				body := fmt.Sprintf(`{"model":"m","stream":true,"logprobs":true,"top_logprobs":5,"messages":[{"role":"user","content":"q%d"}]}`, i)
				resp, err := http.Post(url, "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}

	reader, err := build(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.close)
	reader.pipeline.Flush(t.Context()) // imports the stopped replica's buckets
	if got := reader.pipeline.Evaluate().Latency.Responses; got != n {
		t.Errorf("the shared store holds %d responses of the %d served before shutdown", got, n)
	}
}

// slowObserver takes its time over each response, so that the gateway's
// observer queue is still full when shutdown starts.
type slowObserver struct{ responses atomic.Int64 }

func (o *slowObserver) OnRequest(*exchange.Request)       {}
func (o *slowObserver) OnEvent(*exchange.Request, []byte) {}
func (o *slowObserver) OnResponse(*exchange.Request, *exchange.Response) {
	time.Sleep(20 * time.Millisecond)
	o.responses.Add(1)
}

// TestServeGatewayOrder: the analysis is stopped only after the
// gateway's observer queue drained into it, whatever the queue holds when
// shutdown starts.
func TestServeGatewayOrder(t *testing.T) {
	cfg := testConfig(simBackend(t, nil))
	obs := &slowObserver{}
	gw, err := gateway.New(gateway.Options{Config: cfg, Log: slog.New(slog.DiscardHandler), Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seenAtStop := make(chan int64, 1)
	analysis := func(ctx context.Context) error {
		<-ctx.Done()
		seenAtStop <- obs.responses.Load()
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveGateway(ctx, ln, gw, slog.New(slog.DiscardHandler), analysis) }()
	const n = 20
	for i := range n {
		resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
			strings.NewReader(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"q%d"}]}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	cancel() // about n × 20 ms of observing still queued
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-seenAtStop; got != n {
		t.Errorf("the analysis was stopped when the observer had %d of %d responses", got, n)
	}
}
