package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// Attempts the gateway cancels (cancel.go). Each test runs in a
// testing/synctest bubble on an in-memory network: the timeouts run out in
// the bubble's time, so that a bound is checked to the step and a busy
// machine stretches nothing.

// TestStreamIdleTimeout: a stream whose backend stalls after its headers
// and two tokens ends with an error event after limits.stream_idle_timeout,
// and the backend is counted a failure (passive ejection).
func TestStreamIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		_, url := startSimIn(t, n, "m", func(k *sim.Knobs) {
			k.OutputTokens, k.Stall, k.StallAfter = 10, time.Minute, 2
		})
		gw := startGatewayIn(t, n, []config.Backend{backend("a", url)}, func(c *config.Config) {
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
			code, _, body := gw.post(t, tc.path, tc.body)
			took := time.Since(start)
			if code != http.StatusOK {
				t.Fatalf("%s: status %d after %v", tc.path, code, took)
			}
			// The simulator's first tokens come within a few
			// milliseconds (its TTFT), then nothing.
			within(t, tc.path+": stalled stream ended", took, 300*time.Millisecond, 400*time.Millisecond)
			events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
			if n := len(events); n < 3 || events[n-1] != tc.want || strings.Contains(string(body), "[DONE]") {
				t.Fatalf("%s: %d events, ending %q; want the tokens before the stall, then %s", tc.path, n, events[n-1], tc.want)
			}
		}
		synctest.Wait() // the access log lines are written once the handlers return
		if n := len(gw.access.lines(t)); n != 2 {
			t.Fatalf("%d access log lines, want 2", n)
		}
		if a := adminBackends(t, gw)["a"]; a.Health.ConsecutiveFailures != 2 {
			t.Errorf("consecutive failures %d after two stalled streams, want 2", a.Health.ConsecutiveFailures)
		}
		if n := metricValue(t, gw, `vigil_attempts_cancelled_total{backend="a",reason="stream_idle"}`); n != 2 {
			t.Errorf("vigil_attempts_cancelled_total{stream_idle} = %v, want 2", n)
		}
		for _, l := range gw.access.lines(t) {
			if l["error_class"] != "upstream_5xx" {
				t.Errorf("stalled stream logged with error class %v, want upstream_5xx", l["error_class"])
			}
		}
	})
}

// TestStreamIdleIsNotASlowClient: while the gateway waits on a client
// that is slow to read, the backend is not idle: a stream whose client
// pauses for three times stream_idle_timeout is served whole. On the
// in-memory network the gateway's first write after the pause begins
// blocks (a pipe has no buffer), and so does the backend's, behind it.
func TestStreamIdleIsNotASlowClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, func(k *sim.Knobs) { k.OutputTokens, k.ITL = 2_000, time.Millisecond }, func(l *config.Limits) {
			l.StreamIdleTimeout, l.WriteTimeout = time.Second, 20*time.Second
		})
		c := dial(t, gw, addr)
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		r := bufio.NewReader(c)
		readEvents(t, r, 3)
		time.Sleep(3 * time.Second) // the gateway's writes block meanwhile
		rest, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%v after %d bytes, ending %q", err, len(rest), tail(string(rest), 200))
		}
		if s := string(rest); strings.Contains(s, "upstream_stream_idle") || !strings.Contains(s, "data: [DONE]") {
			t.Fatalf("a stream whose client paused 3s (stream_idle_timeout 1s) ends %q", tail(s, 200))
		}
	})
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

// startHanging serves a hanging backend on n until the test ends.
func startHanging(t *testing.T, n *testutil.Network) *hangingBackend {
	t.Helper()
	h := &hangingBackend{}
	stop := make(chan struct{})
	h.URL = n.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	// Registered after Serve's, so that it runs first: the handlers
	// return, then the server waits for its connections.
	t.Cleanup(func() { close(stop) })
	return h
}

// TestBackendDownMovesWaitingRequests: requests waiting for the headers of
// a backend that hangs are moved to another backend as soon as the health
// check marks it down, not after limits.upstream_timeout; streams too.
func TestBackendDownMovesWaitingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := &testutil.Network{}
		hang := startHanging(t, nw)
		_, good := startSimIn(t, nw, "m", nil)
		gw := startGatewayIn(t, nw, []config.Backend{backend("hang", hang.URL), backend("good", good)}, func(c *config.Config) {
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
				resp, err := gw.hc.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					results <- result{code: -1, body: err.Error()}
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				results <- result{resp.StatusCode, resp.Header.Get("X-Vigil-Backend"), time.Since(start), string(b)}
			}()
		}
		synctest.Wait()
		if w := hang.waiting.Load(); w != n/2 {
			t.Fatalf("%d requests waiting on the hung backend, want %d", w, n/2)
		}
		hang.fail.Store(true)
		marked := time.Now()
		gw.checker.CheckAll(context.Background())
		for range n {
			r := <-results
			if r.code != http.StatusOK || r.backend != "good" {
				t.Fatalf("status %d from %q after %v: %s", r.code, r.backend, r.took, r.body)
			}
		}
		// In the bubble's time the moved requests take what the good
		// backend takes (its TTFT, 1ms), nothing near upstream_timeout.
		if took := time.Since(marked); took > time.Second {
			t.Errorf("the moved requests took %v after the mark (upstream_timeout 1m)", took)
		}
		if v := metricValue(t, gw, `vigil_retries_total{reason="backend_down"}`); v != n/2 {
			t.Errorf("vigil_retries_total{backend_down} = %v, want %d", v, n/2)
		}
		if v := metricValue(t, gw, `vigil_attempts_cancelled_total{backend="hang",reason="backend_down"}`); v != n/2 {
			t.Errorf("vigil_attempts_cancelled_total{hang,backend_down} = %v, want %d", v, n/2)
		}
		synctest.Wait()
		if w := hang.waiting.Load(); w != 0 {
			t.Errorf("%d requests still wait on the hung backend after they moved", w)
		}
	})
}

// TestBackendDownNowhereElse: with no other backend to go to, a request
// waiting on a backend marked down is left waiting (the backend may still
// answer), and ends as it did before: a 504 after upstream_timeout.
func TestBackendDownNowhereElse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		hang := startHanging(t, n)
		gw := startGatewayIn(t, n, []config.Backend{backend("hang", hang.URL)}, func(c *config.Config) {
			c.Limits.UpstreamTimeout = 1500 * time.Millisecond
		})
		var wg sync.WaitGroup
		var code int
		var took time.Duration
		wg.Go(func() {
			start := time.Now()
			code, _, _ = gw.post(t, "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
			took = time.Since(start)
		})
		synctest.Wait()
		if w := hang.waiting.Load(); w != 1 {
			t.Fatalf("%d requests waiting on the hung backend, want 1", w)
		}
		hang.fail.Store(true)
		gw.checker.CheckAll(context.Background())
		wg.Wait()
		if code != http.StatusGatewayTimeout || took < 1500*time.Millisecond || took > 1600*time.Millisecond {
			t.Errorf("status %d after %v, want 504 after upstream_timeout (1.5s)", code, took)
		}
	})
}

// TestEjectionMovesWaitingRequests: passive ejection marks a backend down
// too: a request waiting on it moves to another backend when other
// requests' failures eject it.
func TestEjectionMovesWaitingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		hang := startHanging(t, n)
		_, good := startSimIn(t, n, "m", nil)
		gw := startGatewayIn(t, n, []config.Backend{backend("hang", hang.URL), backend("good", good)}, func(c *config.Config) {
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
			resp, err := gw.hc.Do(req)
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
		synctest.Wait()
		if w := hang.waiting.Load(); w != 1 {
			t.Fatalf("%d requests waiting on the hung backend, want 1", w)
		}
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
		if took := time.Since(start); took > time.Second {
			t.Errorf("the waiting request was answered %v after the failures began (upstream_timeout 1m)", took)
		}
		if v := metricValue(t, gw, `vigil_retries_total{reason="backend_down"}`); v != 1 {
			t.Errorf("vigil_retries_total{backend_down} = %v, want 1", v)
		}
		if v := metricValue(t, gw, `vigil_backend_ejections_total{backend="hang"}`); v != 1 {
			t.Errorf("vigil_backend_ejections_total{hang} = %v, want 1", v)
		}
	})
}
