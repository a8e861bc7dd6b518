package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// Clients that misbehave: each test serves the gateway with HTTPServer
// and Listener, as `vigil serve` does, with limits.* small, and plays the
// client over a raw connection. Each runs in a testing/synctest bubble on
// an in-memory network, so that the limits run out in the bubble's time:
// a bound is met to the step, and a machine too busy to run the test
// promptly stretches nothing. A connection there is a net.Pipe, whose
// writes block until the other end reads them (no socket buffer): a
// client that stops reading blocks the gateway's next write at once.

// serveLimited serves gw as `vigil serve` does, on its in-memory network,
// until the test ends, and returns its address.
func serveLimited(t *testing.T, gw *testGateway) string {
	t.Helper()
	return gw.net.ServeServer(t, gw.HTTPServer(nil), gw.Listener)
}

// dial connects to addr on gw's network; the connection is closed when
// the test ends.
func dial(t *testing.T, gw *testGateway, addr string) net.Conn {
	t.Helper()
	c, err := gw.net.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reports whether the server closes c within limit, writing
// one byte of what trickle gives every step meanwhile (nothing when
// trickle is empty).
func closedWithin(c net.Conn, limit, step time.Duration, trickle string) (time.Duration, bool) {
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		io.Copy(io.Discard, c) // returns when the server closes c (or the test does)
	}()
	for i := 0; time.Since(start) < limit; i++ {
		if trickle != "" {
			c.Write([]byte{trickle[i%len(trickle)]})
		}
		select {
		case <-closed:
			return time.Since(start), true
		case <-time.After(step):
		}
	}
	return time.Since(start), false
}

// readEvents reads from r until it has read n events of a stream, and
// returns what it read (chunked, as it comes).
//
// A test whose client stops reading a stream must read past a gap between
// two tokens first (the simulator's ITL must not be 0): httputil's
// ReverseProxy starts a goroutine to flush the response's head that waits
// on the lock its writes hold, and a goroutine waiting on a lock is not
// durably blocked, so that while it waits behind a write blocked on a
// client that reads nothing, the bubble's clock stands still and the
// write deadline never comes. During a gap the lock is free: that
// goroutine runs, and is done, before the bubble's time reaches the next
// token.
func readEvents(t *testing.T, r *bufio.Reader, n int) string {
	t.Helper()
	var b strings.Builder
	for strings.Count(b.String(), "data: ") < n {
		line, err := r.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			t.Fatalf("reading the stream's first %d events: %v after %q", n, err, b.String())
		}
	}
	return b.String()
}

// limitsGateway serves a gateway with the limits set, in front of one
// simulator, both on n, as `vigil serve` does; it returns the gateway and
// its address.
func limitsGateway(t *testing.T, n *testutil.Network, knobs func(*sim.Knobs), set func(*config.Limits)) (*testGateway, string) {
	t.Helper()
	_, url := startSimIn(t, n, "m", knobs)
	gw := startGatewayIn(t, n, []config.Backend{backend("a", url)}, func(c *config.Config) { set(&c.Limits) })
	return gw, serveLimited(t, gw)
}

// within fails the test unless took is in [lo, hi]: in a bubble a limit
// runs out when it is due, give or take the test's polling step.
func within(t *testing.T, what string, took, lo, hi time.Duration) {
	t.Helper()
	if took < lo || took > hi {
		t.Errorf("%s after %v, want between %v and %v", what, took, lo, hi)
	}
}

// TestSlowloris: a client trickling its headers a byte at a time is cut
// after limits.read_header_timeout.
func TestSlowloris(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, nil, func(l *config.Limits) { l.ReadHeaderTimeout = 300 * time.Millisecond })
		c := dial(t, gw, addr)
		fmt.Fprint(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\n")
		took, closed := closedWithin(c, 10*time.Second, 50*time.Millisecond, "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n")
		if !closed {
			t.Fatalf("a client trickling headers still connected after %v (read_header_timeout 300ms)", took)
		}
		within(t, "headers trickled: connection closed", took, 250*time.Millisecond, 350*time.Millisecond)
	})
}

// TestBodyTrickle: a body that trickles in slower than limits.read_timeout
// allows gets a 408 in OpenAI's error shape, and no backend sees it.
func TestBodyTrickle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, nil, func(l *config.Limits) { l.ReadTimeout = 400 * time.Millisecond })
		c := dial(t, gw, addr)
		body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
		start := time.Now()
		type answer struct {
			resp *http.Response
			body string
			err  error
		}
		got := make(chan answer, 1)
		go func() {
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				got <- answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			got <- answer{resp: resp, body: string(b)}
		}()
		var a answer
		for i := 0; ; i++ {
			select {
			case a = <-got:
			case <-time.After(100 * time.Millisecond):
				if i < len(body)-1 { // never the last byte: the body stays incomplete
					c.Write([]byte{body[i]})
				}
				if time.Since(start) > 10*time.Second {
					t.Fatal("no answer 10 s into a trickled body (read_timeout 400ms)")
				}
				continue
			}
			break
		}
		if a.err != nil {
			t.Fatalf("reading the answer: %v", a.err)
		}
		if a.resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(a.body, `"code":"request_timeout"`) {
			t.Fatalf("trickled body: %d %s, want 408 with an OpenAI error body", a.resp.StatusCode, a.body)
		}
		within(t, "body trickled: 408", time.Since(start), 400*time.Millisecond, 500*time.Millisecond)
		synctest.Wait() // the access log line is written once the handler returns
		lines := gw.access.lines(t)
		if len(lines) != 1 {
			t.Fatalf("%d access log lines, want 1", len(lines))
		}
		if l := lines[0]; l["backend"] != nil && l["backend"] != "" {
			t.Errorf("a backend was chosen for a request whose body never arrived: %v", l)
		}
	})
}

// TestHeaderFlood: headers over limits.max_header_bytes get a 431, and the
// gateway stays up for the next client.
func TestHeaderFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, nil, func(l *config.Limits) { l.MaxHeaderBytes = 4096 })
		c := dial(t, gw, addr)
		var b strings.Builder
		b.WriteString("GET /healthz HTTP/1.1\r\nHost: vigil\r\n")
		for i := range 1000 { // ~64 KiB of headers
			fmt.Fprintf(&b, "X-Flood-%d: %s\r\n", i, strings.Repeat("a", 50))
		}
		b.WriteString("\r\n")
		go c.Write([]byte(b.String())) // the server stops reading before the end; its close ends the write
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer to 64 KiB of headers: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("64 KiB of headers with max_header_bytes 4096: %d, want 431", resp.StatusCode)
		}
		r2, err := gw.hc.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("after the flood: %v", err)
		}
		r2.Body.Close()
		if r2.StatusCode != http.StatusOK {
			t.Fatalf("after the flood: GET /healthz: %d", r2.StatusCode)
		}
	})
}

// TestStalledReader: a client that stops reading a stream does not hold
// the request (its goroutine, its backend connection, the memory of what
// it does not read) for longer than limits.write_timeout: the response is
// cut, recorded, and the gateway is free.
func TestStalledReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, func(k *sim.Knobs) { k.OutputTokens, k.ITL = 200_000, time.Millisecond },
			func(l *config.Limits) { l.WriteTimeout = 500 * time.Millisecond })
		c := dial(t, gw, addr)
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		readEvents(t, bufio.NewReader(c), 3) // the stream started; then nothing is read
		start := time.Now()
		for len(gw.access.lines(t)) == 0 {
			if time.Since(start) > 30*time.Second {
				t.Fatal("a stream whose client stopped reading still runs 30 s later (write_timeout 500ms)")
			}
			time.Sleep(10 * time.Millisecond)
		}
		took := time.Since(start)
		l := gw.access.lines(t)[0]
		t.Logf("client stopped reading: response cut after %v: status %v, error %v, completion tokens %v of 200000",
			took, l["status"], l["error"], l["completion_tokens"])
		// The deadline moves once half of it has passed: the write
		// fails between half of write_timeout and all of it.
		within(t, "client stopped reading: response cut", took, 250*time.Millisecond, 510*time.Millisecond)
		if n, _ := l["completion_tokens"].(float64); n >= 200_000 {
			t.Errorf("the stream ran to its end (%v tokens) although its client read none of it", n)
		}
	})
}

// TestWriteTimeoutIsNotAStreamLimit: write_timeout bounds a blocked write,
// not the time between a backend's tokens nor a connection's idle time: a
// stream with gaps longer than it is served whole, and the keep-alive
// connection serves its next request (one the gateway answers itself,
// which moves no deadline) after an idle spell longer than it. Neither
// does read_timeout, once the body is in, bound the response.
func TestWriteTimeoutIsNotAStreamLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		_, addr := limitsGateway(t, n, func(k *sim.Knobs) { k.OutputTokens, k.ITL = 3, 700*time.Millisecond },
			func(l *config.Limits) { l.WriteTimeout, l.ReadTimeout = 300*time.Millisecond, 300*time.Millisecond })
		tr := n.Transport()
		tr.MaxIdleConnsPerHost = 1
		client := &http.Client{Transport: tr}
		defer client.CloseIdleConnections()
		var conns []string
		for i := range 2 {
			if i == 1 {
				time.Sleep(time.Second) // idle, with the first response's deadline long past
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
				strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
			if i == 1 {
				req, _ = http.NewRequest(http.MethodGet, "http://"+addr+"/readyz", nil)
			}
			req = req.WithContext(withConnTrace(req.Context(), &conns))
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if i == 0 && (err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), "data: [DONE]")) {
				t.Fatalf("stream with 700ms gaps under write_timeout 300ms: %v, ends %q", err, tail(string(b), 60))
			}
			if i == 1 && (err != nil || resp.StatusCode != http.StatusOK) {
				t.Fatalf("GET /readyz on the stream's connection, 1 s later: %d %v", resp.StatusCode, err)
			}
		}
		if len(conns) != 2 || conns[0] != conns[1] {
			t.Errorf("the second request did not reuse the first's connection: %v", conns)
		}
	})
}

// TestIdleKeepAlive: a keep-alive connection idle for limits.idle_timeout
// is closed.
func TestIdleKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, addr := limitsGateway(t, &testutil.Network{}, nil, func(l *config.Limits) { l.IdleTimeout = 300 * time.Millisecond })
		c := dial(t, gw, addr)
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: vigil\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /healthz: %v %v", resp, err)
		}
		resp.Body.Close()
		took, closed := closedWithin(c, 10*time.Second, 50*time.Millisecond, "")
		if !closed {
			t.Fatalf("an idle keep-alive connection still open after %v (idle_timeout 300ms)", took)
		}
		within(t, "idle keep-alive connection closed", took, 250*time.Millisecond, 350*time.Millisecond)
	})
}

// TestMaxConnections: beyond limits.max_connections, a new connection
// waits (in the listener's backlog) until one of the open ones closes.
func TestMaxConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		gw, addr := limitsGateway(t, n, nil, func(l *config.Limits) { l.MaxConnections = 2 })
		held := []net.Conn{dial(t, gw, addr), dial(t, gw, addr)}
		for _, c := range held { // both accepted and served
			fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: vigil\r\n\r\n")
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
				t.Fatal(err)
			} else {
				resp.Body.Close()
			}
		}
		third := func(limit time.Duration) error {
			tr := n.Transport()
			tr.DisableKeepAlives = true
			client := &http.Client{Timeout: limit, Transport: tr}
			resp, err := client.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		if err := third(time.Second); err == nil {
			t.Fatal("a third connection was served while two were open (max_connections 2)")
		}
		held[0].Close()
		if err := third(10 * time.Second); err != nil {
			t.Fatalf("a connection closed, yet the next one is not served: %v", err)
		}
	})
}

// withConnTrace records the local address of each connection a request uses.
func withConnTrace(ctx context.Context, conns *[]string) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		*conns = append(*conns, i.Conn.LocalAddr().String())
	}})
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
