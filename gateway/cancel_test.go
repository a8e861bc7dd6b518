package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
)

// Attempts the gateway cancels (cancel.go). Each bound is checked against
// a wait many times longer, so that a missing cancel fails the test and a
// slow machine does not.

// TestStreamIdleTimeout: a stream whose backend stalls after its headers
// and two tokens ends with an error event after limits.stream_idle_timeout,
// and the backend is counted a failure (passive ejection).
func TestStreamIdleTimeout(t *testing.T) {
	_, url := startSim(t, "m", func(k *sim.Knobs) {
		k.OutputTokens, k.Stall, k.StallAfter = 10, time.Minute, 2
	})
	gw := startGateway(t, []config.Backend{backend("a", url)}, func(c *config.Config) {
		c.Limits.StreamIdleTimeout = 300 * time.Millisecond
		c.Health.Failures = 5
	})
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`data: {"error":{"message":"the stream from backend a sent nothing for 300ms","type":"upstream_error","code":"upstream_stream_idle"}}`},
		{"/v1/completions", `{"model":"m","stream":true,"prompt":"hi"}`,
			`data: {"error":{"message":"the stream from backend a sent nothing for 300ms","type":"upstream_error","code":"upstream_stream_idle"}}`},
	} {
		start := time.Now()
		code, _, body := post(t, gw.URL+tc.path, tc.body)
		took := time.Since(start)
		t.Logf("%s: stalled stream ended after %v (stream_idle_timeout 300ms, stall 1m)", tc.path, took)
		if code != http.StatusOK || took > 20*time.Second {
			t.Fatalf("%s: status %d after %v", tc.path, code, took)
		}
		events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
		if n := len(events); n < 3 || events[n-1] != tc.want || strings.Contains(string(body), "[DONE]") {
			t.Fatalf("%s: %d events, ending %q; want the tokens before the stall, then %s", tc.path, n, events[n-1], tc.want)
		}
	}
	waitFor(t, "access log", func() bool { return len(gw.access.lines(t)) == 2 })
	if a := adminBackends(t, gw.URL)["a"]; a.Health.ConsecutiveFailures != 2 {
		t.Errorf("consecutive failures %d after two stalled streams, want 2", a.Health.ConsecutiveFailures)
	}
	if n := metricValue(t, gw.URL, `vigil_attempts_cancelled_total{backend="a",reason="stream_idle"}`); n != 2 {
		t.Errorf("vigil_attempts_cancelled_total{stream_idle} = %v, want 2", n)
	}
	for _, l := range gw.access.lines(t) {
		if l["error_class"] != "upstream_5xx" {
			t.Errorf("stalled stream logged with error class %v, want upstream_5xx", l["error_class"])
		}
	}
}

// TestStreamIdleIsNotASlowClient: while the gateway waits on a client
// that is slow to read (its socket full), the backend is not idle: a
// stream whose client pauses for three times stream_idle_timeout is served
// whole.
func TestStreamIdleIsNotASlowClient(t *testing.T) {
	_, addr := limitsGateway(t, func(k *sim.Knobs) { k.OutputTokens = 40_000 }, func(l *config.Limits) {
		l.StreamIdleTimeout, l.WriteTimeout = time.Second, 20*time.Second
	})
	// Not a small receive buffer, as TestStalledReader has: on loopback
	// a 64 KiB segment never fits one and the connection stalls for good
	// once the client reads again. 40,000 tokens (9 MB) fill the default
	// buffers.
	c := dial(t, addr)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	head := make([]byte, 64)
	if _, err := io.ReadFull(c, head); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the gateway's writes block meanwhile
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	rest, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("%v after %d bytes, ending %q", err, len(rest), tail(string(rest), 200))
	}
	if s := string(rest); strings.Contains(s, "upstream_stream_idle") || !strings.Contains(s, "data: [DONE]") {
		t.Fatalf("a stream whose client paused 3s (stream_idle_timeout 1s) ends %q", tail(s, 200))
	}
}

// hangingBackend accepts requests and never answers them until the test
// ends (or the gateway gives up on them), except those with an X-Fail
// header, which get a 500; its health path answers 200 until fail is set,
// then 503.
type hangingBackend struct {
	URL     string
	fail    atomic.Bool
	waiting atomic.Int64
}

func startHanging(t *testing.T) *hangingBackend {
	t.Helper()
	h := &hangingBackend{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if h.fail.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		io.Copy(io.Discard, r.Body) // then the server sees the client leave
		if r.Header.Get("X-Fail") != "" {
			http.Error(w, `{"error":"failing"}`, http.StatusInternalServerError)
			return
		}
		h.waiting.Add(1)
		defer h.waiting.Add(-1)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	h.URL = srv.URL
	return h
}

// TestBackendDownMovesWaitingRequests: requests waiting for the headers of
// a backend that hangs are moved to another backend as soon as the health
// check marks it down, not after limits.upstream_timeout; streams too.
func TestBackendDownMovesWaitingRequests(t *testing.T) {
	hang := startHanging(t)
	_, good := startSim(t, "m", nil)
	gw := startGateway(t, []config.Backend{backend("hang", hang.URL), backend("good", good)}, func(c *config.Config) {
		c.Balancer.Strategy = "round_robin"
		c.Limits.UpstreamTimeout = time.Minute
	})
	const n = 6
	type result struct {
		code    int
		backend string
		took    time.Duration
		body    string
	}
	results := make(chan result, n)
	start := time.Now()
	for i := range n {
		stream := i%2 == 0
		go func() {
			body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				results <- result{code: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{resp.StatusCode, resp.Header.Get("X-Vigil-Backend"), time.Since(start), string(b)}
		}()
	}
	waitFor(t, "requests waiting on the hung backend", func() bool { return hang.waiting.Load() == n/2 })
	hang.fail.Store(true)
	marked := time.Now()
	gw.checker.CheckAll(context.Background())
	for range n {
		r := <-results
		if r.code != http.StatusOK || r.backend != "good" {
			t.Fatalf("status %d from %q after %v: %s", r.code, r.backend, r.took, r.body)
		}
	}
	t.Logf("%d requests, %d of them waiting on the hung backend: all answered by the other %v after it was marked down (upstream_timeout 1m)",
		n, n/2, time.Since(marked))
	if took := time.Since(marked); took > 20*time.Second {
		t.Errorf("the moved requests took %v after the mark", took)
	}
	if v := metricValue(t, gw.URL, `vigil_retries_total{reason="backend_down"}`); v != n/2 {
		t.Errorf("vigil_retries_total{backend_down} = %v, want %d", v, n/2)
	}
	if v := metricValue(t, gw.URL, `vigil_attempts_cancelled_total{backend="hang",reason="backend_down"}`); v != n/2 {
		t.Errorf("vigil_attempts_cancelled_total{hang,backend_down} = %v, want %d", v, n/2)
	}
	waitFor(t, "the hung backend's requests to be gone", func() bool { return hang.waiting.Load() == 0 })
}

// TestBackendDownNowhereElse: with no other backend to go to, a request
// waiting on a backend marked down is left waiting (the backend may still
// answer), and ends as it did before: a 504 after upstream_timeout.
func TestBackendDownNowhereElse(t *testing.T) {
	hang := startHanging(t)
	gw := startGateway(t, []config.Backend{backend("hang", hang.URL)}, func(c *config.Config) {
		c.Limits.UpstreamTimeout = 1500 * time.Millisecond
	})
	var wg sync.WaitGroup
	var code int
	var took time.Duration
	wg.Go(func() {
		start := time.Now()
		code, _, _ = post(t, gw.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
		took = time.Since(start)
	})
	waitFor(t, "the request to wait on the hung backend", func() bool { return hang.waiting.Load() == 1 })
	hang.fail.Store(true)
	gw.checker.CheckAll(context.Background())
	wg.Wait()
	if code != http.StatusGatewayTimeout || took < time.Second {
		t.Errorf("status %d after %v, want 504 after upstream_timeout (1.5s)", code, took)
	}
}

// TestEjectionMovesWaitingRequests: passive ejection marks a backend down
// too: a request waiting on it moves to another backend when other
// requests' failures eject it.
func TestEjectionMovesWaitingRequests(t *testing.T) {
	hang := startHanging(t)
	_, good := startSim(t, "m", nil)
	gw := startGateway(t, []config.Backend{backend("hang", hang.URL), backend("good", good)}, func(c *config.Config) {
		c.Balancer.Strategy = "round_robin"
		c.Limits.UpstreamTimeout = time.Minute
		c.Health.Failures = 2
	})
	send := func(fail bool) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if fail {
			req.Header.Set("X-Fail", "1")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1, err.Error()
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, resp.Header.Get("X-Vigil-Backend")
	}
	var wg sync.WaitGroup
	codes := make([]int, 2)
	for i := range 2 { // round robin: one each; the one on hang waits
		wg.Go(func() { codes[i], _ = send(false) })
	}
	waitFor(t, "a request waiting on the hung backend", func() bool { return hang.waiting.Load() == 1 })
	start := time.Now()
	for range 4 { // the 500s of hang are retried on good; the second ejects hang
		if code, b := send(true); code != http.StatusOK || b != "good" {
			t.Fatalf("failing request: %d from %q", code, b)
		}
	}
	wg.Wait()
	if codes[0] != http.StatusOK || codes[1] != http.StatusOK {
		t.Fatalf("statuses %v, want the waiting request moved and answered", codes)
	}
	t.Logf("the waiting request was answered %v after the failures began (upstream_timeout 1m)", time.Since(start))
	if v := metricValue(t, gw.URL, `vigil_retries_total{reason="backend_down"}`); v != 1 {
		t.Errorf("vigil_retries_total{backend_down} = %v, want 1", v)
	}
	if v := metricValue(t, gw.URL, `vigil_backend_ejections_total{backend="hang"}`); v != 1 {
		t.Errorf("vigil_backend_ejections_total{hang} = %v, want 1", v)
	}
}
