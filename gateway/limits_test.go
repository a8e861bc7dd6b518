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
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
)

// Clients that misbehave (issue 18): each test serves the gateway with
// HTTPServer and Listener, as `vigil serve` does, with limits.* small, and
// plays the client over a raw connection. Each bound is checked against a
// wait several times longer, so that a missing limit fails the test and a
// slow machine does not.

// serveLimited serves gw as `vigil serve` does, on a free port, until the
// test ends, and returns its address.
func serveLimited(t *testing.T, gw *testGateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := gw.HTTPServer(nil)
	go srv.Serve(gw.Listener(ln))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
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

func limitsGateway(t *testing.T, knobs func(*sim.Knobs), set func(*config.Limits)) (*testGateway, string) {
	t.Helper()
	_, url := startSim(t, "m", knobs)
	gw := startGateway(t, []config.Backend{backend("a", url)}, func(c *config.Config) { set(&c.Limits) })
	return gw, serveLimited(t, gw)
}

// TestSlowloris: a client trickling its headers a byte at a time is cut
// after limits.read_header_timeout.
func TestSlowloris(t *testing.T) {
	_, addr := limitsGateway(t, nil, func(l *config.Limits) { l.ReadHeaderTimeout = 300 * time.Millisecond })
	c := dial(t, addr)
	fmt.Fprint(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\n")
	took, closed := closedWithin(c, 10*time.Second, 50*time.Millisecond, "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaa\r\n")
	if !closed {
		t.Fatalf("a client trickling headers still connected after %v (read_header_timeout 300ms)", took)
	}
	t.Logf("headers trickled: connection closed after %v (read_header_timeout 300ms)", took)
}

// TestBodyTrickle: a body that trickles in slower than limits.read_timeout
// allows gets a 408 in OpenAI's error shape, and no backend sees it.
func TestBodyTrickle(t *testing.T) {
	gw, addr := limitsGateway(t, nil, func(l *config.Limits) { l.ReadTimeout = 400 * time.Millisecond })
	c := dial(t, addr)
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
	t.Logf("body trickled: 408 after %v (read_timeout 400ms)", time.Since(start))
	waitFor(t, "the access log line", func() bool { return len(gw.access.lines(t)) == 1 })
	if l := gw.access.lines(t)[0]; l["backend"] != nil && l["backend"] != "" {
		t.Errorf("a backend was chosen for a request whose body never arrived: %v", l)
	}
}

// TestHeaderFlood: headers over limits.max_header_bytes get a 431, and the
// gateway stays up for the next client.
func TestHeaderFlood(t *testing.T) {
	_, addr := limitsGateway(t, nil, func(l *config.Limits) { l.MaxHeaderBytes = 4096 })
	c := dial(t, addr)
	var b strings.Builder
	b.WriteString("GET /healthz HTTP/1.1\r\nHost: vigil\r\n")
	for i := range 1000 { // ~64 KiB of headers
		fmt.Fprintf(&b, "X-Flood-%d: %s\r\n", i, strings.Repeat("a", 50))
	}
	b.WriteString("\r\n")
	go c.Write([]byte(b.String())) // the server may stop reading before the end
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to 64 KiB of headers: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("64 KiB of headers with max_header_bytes 4096: %d, want 431", resp.StatusCode)
	}
	r2, err := http.Get("http://" + addr + "/healthz")
	if err != nil || r2.StatusCode != http.StatusOK {
		t.Fatalf("after the flood: %v %v", r2, err)
	}
	r2.Body.Close()
}

// TestStalledReader: a client that stops reading a stream does not hold
// the request (its goroutine, its backend connection, the memory of what
// it does not read) for longer than limits.write_timeout: the response is
// cut, recorded, and the gateway is free.
func TestStalledReader(t *testing.T) {
	gw, addr := limitsGateway(t, func(k *sim.Knobs) { k.OutputTokens = 200_000 },
		func(l *config.Limits) { l.WriteTimeout = 500 * time.Millisecond })
	c := dial(t, addr)
	// A small receive buffer, so that the socket fills soon.
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: vigil\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	head := make([]byte, 64)
	if _, err := io.ReadFull(c, head); err != nil { // the stream started; then nothing is read
		t.Fatal(err)
	}
	start := time.Now()
	deadline := start.Add(30 * time.Second)
	for len(gw.access.lines(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a stream whose client stopped reading still runs 30 s later (write_timeout 500ms)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	l := gw.access.lines(t)[0]
	t.Logf("client stopped reading: response cut after %v: status %v, error %v, completion tokens %v of 200000",
		time.Since(start), l["status"], l["error"], l["completion_tokens"])
	if n, _ := l["completion_tokens"].(float64); n >= 200_000 {
		t.Errorf("the stream ran to its end (%v tokens) although its client read none of it", n)
	}
}

// TestWriteTimeoutIsNotAStreamLimit: write_timeout bounds a blocked write,
// not the time between a backend's tokens nor a connection's idle time: a
// stream with gaps longer than it is served whole, and the keep-alive
// connection serves its next request (one the gateway answers itself,
// which moves no deadline) after an idle spell longer than it. Neither
// does read_timeout, once the body is in, bound the response.
func TestWriteTimeoutIsNotAStreamLimit(t *testing.T) {
	_, addr := limitsGateway(t, func(k *sim.Knobs) { k.OutputTokens, k.ITL = 3, 700*time.Millisecond },
		func(l *config.Limits) { l.WriteTimeout, l.ReadTimeout = 300*time.Millisecond, 300*time.Millisecond })
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
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
}

// TestIdleKeepAlive: a keep-alive connection idle for limits.idle_timeout
// is closed.
func TestIdleKeepAlive(t *testing.T) {
	_, addr := limitsGateway(t, nil, func(l *config.Limits) { l.IdleTimeout = 300 * time.Millisecond })
	c := dial(t, addr)
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
	t.Logf("idle keep-alive connection closed after %v (idle_timeout 300ms)", took)
}

// TestMaxConnections: beyond limits.max_connections, a new connection
// waits (in the listen backlog) until one of the open ones closes.
func TestMaxConnections(t *testing.T) {
	_, addr := limitsGateway(t, nil, func(l *config.Limits) { l.MaxConnections = 2 })
	held := []net.Conn{dial(t, addr), dial(t, addr)}
	for _, c := range held { // both accepted and served
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: vigil\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		} else {
			resp.Body.Close()
		}
	}
	third := func(limit time.Duration) error {
		client := &http.Client{Timeout: limit, Transport: &http.Transport{DisableKeepAlives: true}}
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
