package app

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
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway"
	"github.com/vigil-gw/vigil/internal/testutil"
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

	reader, err := Build(cfg, Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Close)
	reader.pipeline.Flush(t.Context()) // imports the stopped replica's buckets
	if got := reader.pipeline.Evaluate().Latency.Responses; got != n {
		t.Errorf("the shared store holds %d responses of the %d served before shutdown", got, n)
	}
}

// slowObserver takes its time over each response (on the bubble's clock),
// so that the gateway's observer queue is still full when shutdown starts.
type slowObserver struct{ responses atomic.Int64 }

func (o *slowObserver) OnPrompt(time.Time, exchange.Operation, []byte) {}
func (o *slowObserver) OnRequest(*exchange.Request)                    {}
func (o *slowObserver) OnEvent(*exchange.Request, []byte)              {}
func (o *slowObserver) OnResponse(*exchange.Request, *exchange.Response) {
	time.Sleep(20 * time.Millisecond)
	o.responses.Add(1)
}

// TestServeGatewayOrder: the analysis is stopped only after the
// gateway's observer queue drained into it, whatever the queue holds when
// shutdown starts. It runs in a synctest bubble, on the in-memory
// network: the requests take none of the bubble's time and the observer
// 20 ms of it per response, so that nearly all of them are still queued
// at the cancellation, however busy the machine.
func TestServeGatewayOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mem testutil.Network
		k := sim.DefaultKnobs()
		k.TTFT, k.ITL = 0, 0
		cfg := testConfig(mem.Serve(t, sim.New(sim.Options{Model: "m", Seed: 1, Knobs: k}).Handler()))
		obs := &slowObserver{}
		gw, err := gateway.New(gateway.Options{Config: cfg, Log: slog.New(slog.DiscardHandler), Observer: obs, Transport: mem.Transport()})
		if err != nil {
			t.Fatal(err)
		}
		ln := mem.Listen()
		client := mem.Client()
		seenAtStop := make(chan int64, 1)
		analysis := func(ctx context.Context) error {
			<-ctx.Done()
			seenAtStop <- obs.responses.Load()
			return nil
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- ServeGateway(ctx, ln, gw, cfg.Limits, slog.New(slog.DiscardHandler), analysis) }()
		const n = 20
		for i := range n {
			resp, err := client.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"q%d"}]}`, i)))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		queued := n - obs.responses.Load()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		client.CloseIdleConnections()
		if got := <-seenAtStop; got != n {
			t.Errorf("the analysis was stopped when the observer had %d of %d responses", got, n)
		}
		if queued == 0 {
			t.Errorf("every response was observed before the shutdown began: nothing was left for it to drain")
		}
	})
}

// TestGracefulShutdown stops a gateway as Kubernetes stops a pod, with 50
// streams in flight: on the signal /readyz answers 503 at once while the
// gateway still serves; after limits.shutdown_delay new connections are
// refused; every stream in flight is served to its end; then the final
// flush hands every response to the analyzers.
func TestGracefulShutdown(t *testing.T) {
	const n, tokens = 50, 40
	// Streams of 4 s outlast the 2 s delay, so that the drain after it is
	// tested; the delay leaves a busy machine a second to answer the first
	// /readyz.
	cfg := testConfig(simBackend(t, func(k *sim.Knobs) { k.OutputTokens, k.ITL = tokens, 100*time.Millisecond }))
	const delay = 2 * time.Second
	cfg.Limits.ShutdownDelay, cfg.Limits.ShutdownGrace = delay, 60*time.Second
	cfg.Analyzers.MinRequests, cfg.Analyzers.Window = 1_000_000, time.Hour
	a, base, stop := serveApp(t, cfg)
	addr := strings.TrimPrefix(base, "http://")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	defer client.CloseIdleConnections()
	started := make(chan struct{}, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			body := fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q%d"}]}`, i)
			resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				started <- struct{}{}
				errs <- err
				return
			}
			defer resp.Body.Close()
			first := make([]byte, 1)
			_, err = io.ReadFull(resp.Body, first)
			started <- struct{}{}
			rest, rerr := io.ReadAll(resp.Body)
			stream := string(first) + string(rest)
			switch {
			case err != nil || rerr != nil:
				errs <- fmt.Errorf("stream %d: %v %v", i, err, rerr)
			case !strings.HasSuffix(strings.TrimSpace(stream), "data: [DONE]") || strings.Count(stream, `"content":`) < tokens:
				errs <- fmt.Errorf("stream %d cut: %d content chunks of %d, ends %q", i, strings.Count(stream, `"content":`), tokens, stream[max(0, len(stream)-80):])
			default:
				errs <- nil
			}
		}()
	}
	for range n {
		<-started
	}

	signalled := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }() // what SIGTERM does (main)

	// /readyz turns 503 at once, served (not refused) while the delay runs.
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	testutil.WaitFor(t, "/readyz to answer 503", func() bool {
		resp, err := fresh.Get(base + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz %v after the signal: %v (want a 503 while shutdown_delay %v runs)", time.Since(signalled), err, delay)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			t.Logf("/readyz answered 503 %v after the signal", time.Since(signalled))
			return true
		}
		if time.Since(signalled) > delay/2 {
			t.Fatalf("/readyz still answers %d %v after the signal", resp.StatusCode, time.Since(signalled))
		}
		return false
	})
	// After the delay, new connections are refused.
	testutil.WaitFor(t, "new connections to be refused", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			refused := time.Since(signalled)
			if refused < delay {
				t.Errorf("connections refused %v after the signal, before shutdown_delay %v", refused, delay)
			}
			t.Logf("new connections refused %v after the signal (shutdown_delay %v)", refused, delay)
			return true
		}
		c.Close()
		if time.Since(signalled) > delay+10*time.Second {
			t.Fatalf("connections still accepted %v after the signal (shutdown_delay %v)", time.Since(signalled), delay)
		}
		return false
	})

	lost := 0
	for range n {
		if err := <-errs; err != nil {
			lost++
			t.Error(err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("serve: %v", err)
	}
	t.Logf("%d streams in flight at the signal, %d lost; serve returned %v after it", n, lost, time.Since(signalled))
	if got := a.pipeline.Evaluate().Latency.Responses; got != n {
		t.Errorf("the analyzers were handed %d responses of the %d served", got, n)
	}
}

// TestShutdownGraceCuts: streams still running when limits.shutdown_grace
// is over are cut, recorded, and serve returns.
func TestShutdownGraceCuts(t *testing.T) {
	cfg := testConfig(simBackend(t, func(k *sim.Knobs) { k.OutputTokens, k.ITL = 1000, 50*time.Millisecond }))
	cfg.Limits.ShutdownDelay, cfg.Limits.ShutdownGrace = 0, 300*time.Millisecond
	cfg.Analyzers.MinRequests, cfg.Analyzers.Window = 1_000_000, time.Hour
	a, base, stop := serveApp(t, cfg)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"q"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := resp.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	took := time.Since(signalled)
	t.Logf("a 50-s stream at the signal: serve returned after %v (shutdown_grace 300ms)", took)
	if took > 20*time.Second {
		t.Errorf("serve returned %v after the signal; the stream should have been cut at shutdown_grace 300ms", took)
	}
	// The cut stream was recorded (as its client's cancel: it did not end
	// well, and the latency windows leave it out), with the tokens it got.
	u, err := a.pipeline.Usage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if tot := u.Hour.Totals; tot.Requests != 1 || tot.CompletionTokens == 0 {
		t.Errorf("usage after the cut: %+v, want the cut stream with the tokens it got", tot)
	} else {
		t.Logf("the cut stream was recorded with %d of its 1000 tokens", tot.CompletionTokens)
	}
}
