package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestByteIdentical sends each request straight to the simulator and through
// Vigil and requires the same status, content type and body bytes.
func TestByteIdentical(t *testing.T) {
	_, openaiURL := startSim(t, "m1", nil)
	_, tgiURL := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("vllm", openaiURL, "m1"), tgiBackend("tgi", tgiURL)}, nil)

	tests := []struct {
		name, path, body string
		tgi              bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"Hello there"}],"max_tokens":12,"logprobs":true,"top_logprobs":3}`, false},
		{"chat stream", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"Hello there"}],"max_tokens":12,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}`, false},
		{"completions", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"logprobs":3}`, false},
		{"completions stream", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"stream":true}`, false},
		{"embeddings", "/v1/embeddings", `{"model":"m1","input":["a b c","d e"]}`, false},
		{"tgi generate", "/generate", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":8,"details":true,"top_n_tokens":2}}`, true},
		{"tgi generate_stream", "/generate_stream", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":8,"details":true}}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			direct := openaiURL
			if tt.tgi {
				direct = tgiURL
			}
			wantCode, wantHdr, want := post(t, direct+tt.path, tt.body)
			gotCode, gotHdr, got := post(t, gw.URL+tt.path, tt.body)
			if wantCode != http.StatusOK {
				t.Fatalf("simulator answered %d: %s", wantCode, want)
			}
			if gotCode != wantCode {
				t.Errorf("status: got %d, want %d", gotCode, wantCode)
			}
			if g, w := gotHdr.Get("Content-Type"), wantHdr.Get("Content-Type"); g != w {
				t.Errorf("content type: got %q, want %q", g, w)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("body differs (-direct +vigil):\n%s", diff)
			}
			wantBackend := "vllm"
			if tt.tgi {
				wantBackend = "tgi"
			}
			if b := gotHdr.Get("X-Vigil-Backend"); b != wantBackend {
				t.Errorf("X-Vigil-Backend = %q, want %q", b, wantBackend)
			}
			if id := gotHdr.Get("X-Vigil-Trace-Id"); len(id) != 32 || !isLowerHex(id) {
				t.Errorf("X-Vigil-Trace-Id = %q, want 32 hex digits", id)
			}
			// Each of Vigil's headers once: ReverseProxy adds the
			// response's headers to those already on the writer.
			for _, k := range []string{"X-Vigil-Backend", "X-Vigil-Trace-Id", "X-Request-Id"} {
				if v := gotHdr.Values(k); len(v) != 1 {
					t.Errorf("%s = %q, want one value", k, v)
				}
			}
		})
	}
}

// TestUpstreamGetsClientBytes checks the backend receives the client's body
// bytes unchanged (odd spacing and key order included), with X-Forwarded-*
// and a traceparent that continues the client's trace.
func TestUpstreamGetsClientBytes(t *testing.T) {
	type seen struct {
		body   string
		header http.Header
	}
	got := make(chan seen, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{string(b), r.Header.Clone()}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id")) // as vLLM does
		io.WriteString(w, `{"ok":true}`)
	}))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)}, nil)

	body := "{ \"messages\" : [ {\"content\":\"h\u00e9llo\", \"role\":\"user\"} ],\n \"model\":\"x\",  \"temperature\": 0.70 }"
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	req.Header.Set("X-Forwarded-For", "10.1.2.3")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	s := <-got
	if s.body != body {
		t.Errorf("upstream body:\n got %q\nwant %q", s.body, body)
	}
	tp := s.header.Get("Traceparent")
	if !strings.HasPrefix(tp, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || strings.Contains(tp, "00f067aa0ba902b7") || !validTraceparent(tp) {
		t.Errorf("upstream traceparent %q does not continue the client's trace with a new span", tp)
	}
	if got := resp.Header.Values("X-Vigil-Trace-Id"); len(got) != 1 || got[0] != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("X-Vigil-Trace-Id = %q", got)
	}
	if got := resp.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != s.header.Get("X-Request-Id") {
		t.Errorf("X-Request-Id = %q, want once the id sent upstream (%q)", got, s.header.Get("X-Request-Id"))
	}
	if xff := s.header.Get("X-Forwarded-For"); !strings.HasPrefix(xff, "10.1.2.3, 127.0.0.1") {
		t.Errorf("X-Forwarded-For = %q, want the client's chain plus the client address", xff)
	}
	if s.header.Get("X-Forwarded-Proto") != "http" || s.header.Get("X-Forwarded-Host") == "" {
		t.Errorf("X-Forwarded-Proto/Host missing: %v", s.header)
	}
}

// TestSSEFirstEventBeforeBackendFinishes: the backend sends each event
// only once the client has received the one before it through Vigil, so
// any buffering in the gateway, of the first event or of any later one,
// stalls the exchange until the backend gives up with an error event, and
// fails the test. The lockstep needs no timing: a busy machine only makes
// it slower.
func TestSSEFirstEventBeforeBackendFinishes(t *testing.T) {
	const events = 4
	received := make(chan struct{}, 1) // the client has read the last event sent
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-received:
			case <-time.After(testutil.WaitDeadline):
				fmt.Fprintf(w, "data: {\"error\":\"event %d never reached the client\"}\n\n", i)
				return
			}
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)}, nil)

	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var got []string
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if strings.Contains(line, "error") {
			t.Fatalf("backend reports: %s", line)
		}
		got = append(got, line)
		if line != "data: [DONE]" {
			received <- struct{}{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{`data: {"n":0}`, `data: {"n":1}`, `data: {"n":2}`, `data: {"n":3}`, "data: [DONE]"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("events (-want +got):\n%s", d)
	}
}

// TestBackendKilledMidStream: when the backend's connection dies after some
// events, the client must see an error, never a silent clean end: the
// stream ends with an error event (the OpenAI SDK's case is in
// TestStreamBreakSDK), framed as an event of its own wherever the break fell.
func TestBackendKilledMidStream(t *testing.T) {
	tests := []struct {
		name, path, sent, want string
	}{
		{"between events", "/v1/chat/completions", "data: {\"n\":0}\n\n",
			"data: {\"n\":0}\n\n" + `data: {"error":{"message":"the stream from backend a broke before it ended","type":"upstream_error","code":"upstream_stream_broken"}}` + "\n\n"},
		{"after a line", "/v1/completions", "data: {\"n\":0}\n",
			"data: {\"n\":0}\n\n" + `data: {"error":{"message":"the stream from backend a broke before it ended","type":"upstream_error","code":"upstream_stream_broken"}}` + "\n\n"},
		{"mid-line", "/v1/chat/completions", "data: {\"n\":0}\n\ndata: {\"n\"",
			"data: {\"n\":0}\n\ndata: {\"n\"\n\n" + `data: {"error":{"message":"the stream from backend a broke before it ended","type":"upstream_error","code":"upstream_stream_broken"}}` + "\n\n"},
		{"tgi", "/generate_stream", "data:{\"token\":{\"id\":1}}\n\n",
			"data:{\"token\":{\"id\":1}}\n\n" + `data:{"error":"the stream from backend a broke before it ended","error_type":"upstream_error"}` + "\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// Read all the request: a close with unread input would be a reset,
				// which can discard what was sent before it, however long one waits.
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, tt.sent)
				w.(http.Flusher).Flush()
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close() // the backend dies without ending the chunked body
				}
			}))
			defer be.Close()
			b := backend("a", be.URL)
			if tt.path == "/generate_stream" {
				b.Kind = "tgi"
			}
			gw := startGateway(t, []config.Backend{b}, nil)

			body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"prompt":"x","inputs":"x"}`
			code, _, got := post(t, gw.URL+tt.path, body)
			if code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			if diff := cmp.Diff(tt.want, string(got)); diff != "" {
				t.Errorf("client got (-want +got):\n%s", diff)
			}
			waitFor(t, "access log line", func() bool { return len(gw.access.lines(t)) == 1 })
			if c := gw.access.lines(t)[0]["error_class"]; c != string(exchange.ClassUpstream5xx) {
				t.Errorf("error_class = %v, want %s", c, exchange.ClassUpstream5xx)
			}
			// A broken stream counts against the backend.
			if n := gw.Pool().Backends()[0].ConsecutiveFailures(); n != 1 {
				t.Errorf("consecutive failures = %d, want 1", n)
			}
			// The gateway survives and serves the next request.
			if code, _ := testutil.Get(t, gw.URL+"/healthz"); code != 200 {
				t.Errorf("gateway stopped serving: /healthz %d", code)
			}
		})
	}
}

// TestBackendKilledMidBody: a plain (non-SSE) body that breaks still aborts
// the client's connection: there is no in-band way to signal it. The
// attempt still ends (the proxy's abort is a panic): its backend counts
// nothing in flight afterwards.
func TestBackendKilledMidBody(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read all the request: a close with unread input would be a reset,
		// which can discard what was sent before it, however long one waits.
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","choices":[`)
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)}, nil)
	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b, err := io.ReadAll(resp.Body); err == nil {
		t.Fatalf("body ended cleanly after %q; want an error for the client", b)
	}
	waitFor(t, "the attempt's end", func() bool { return gw.Pool().Backends()[0].Inflight() == 0 })
}

// TestClientDisconnectCancelsUpstream: a client that goes away mid-stream
// must cancel the backend's generation.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	s, url := startSim(t, "m1", func(k *sim.Knobs) { k.ITL = 50 * time.Millisecond; k.OutputTokens = 200 })
	gw := startGateway(t, []config.Backend{backend("a", url)}, nil)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m1","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("reading first event: %v", err)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the simulator to see the cancellation", func() bool { return s.Stats().Cancelled == 1 })
	waitFor(t, "the simulator to finish", func() bool { return s.Stats().Running == 0 })
	waitFor(t, "access log line", func() bool { return len(gw.access.lines(t)) == 1 })
	if c := gw.access.lines(t)[0]["error_class"]; c != string(exchange.ClassClientCancel) {
		t.Errorf("error_class = %v, want %s", c, exchange.ClassClientCancel)
	}
}

// TestErrors covers every gateway-made error and the pass-through of
// backend errors.
func TestErrors(t *testing.T) {
	_, okURL := startSim(t, "m1", nil)
	_, failURL := startSim(t, "broken", func(k *sim.Knobs) { k.ErrorRate = 1 })
	_, slowURL := startSim(t, "slow", func(k *sim.Knobs) { k.TTFT = 3 * time.Second })
	_, shortURL := startSim(t, "short", func(k *sim.Knobs) { k.MaxModelLen = 16 })
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()

	gw := startGateway(t, []config.Backend{
		backend("ok", okURL, "m1"), backend("fail", failURL, "broken"), backend("slow", slowURL, "slow"),
		backend("short", shortURL, "short"), backend("dead", deadURL, "gone"),
	}, func(c *config.Config) {
		c.Limits.MaxBodyBytes = 4096
		c.Limits.UpstreamTimeout = 300 * time.Millisecond
	})
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}]}`
	}
	tests := []struct {
		name, path, body string
		code             int
		errCode          string
		class            exchange.ErrorClass
	}{
		{"bad json", "/v1/chat/completions", `{"model":`, 400, "invalid_request", exchange.ClassBadRequest},
		{"not an object", "/v1/chat/completions", `[1,2]`, 400, "invalid_request", exchange.ClassBadRequest},
		{"wrong type", "/v1/chat/completions", `{"model":"m1","stream":"yes","messages":[]}`, 400, "invalid_request", exchange.ClassBadRequest},
		{"model not a string", "/v1/completions", `{"model":7,"prompt":"x"}`, 400, "invalid_request", exchange.ClassBadRequest},
		{"missing messages", "/v1/chat/completions", `{"model":"m1"}`, 400, "invalid_request", exchange.ClassBadRequest},
		{"empty body", "/v1/embeddings", ``, 400, "invalid_request", exchange.ClassBadRequest},
		{"too large", "/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large", exchange.ClassBadRequest},
		{"unknown model", "/v1/chat/completions", chat("nope"), 404, "model_not_found", exchange.ClassUnknownModel},
		{"upstream down", "/v1/chat/completions", chat("gone"), 502, "upstream_unavailable", exchange.ClassUpstream5xx},
		{"upstream timeout", "/v1/chat/completions", chat("slow"), 504, "upstream_timeout", exchange.ClassTimeout},
		{"backend 500 passes through", "/v1/chat/completions", chat("broken"), 500, "", exchange.ClassUpstream5xx},
		{"prompt too long passes through", "/v1/chat/completions", `{"model":"short","messages":[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]}`, 400, "", exchange.ClassPromptTooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(gw.access.lines(t))
			code, hdr, body := post(t, gw.URL+tt.path, tt.body)
			if code != tt.code {
				t.Fatalf("status %d, want %d; body %s", code, tt.code, body)
			}
			if tt.errCode != "" {
				var e struct {
					Error struct{ Message, Type, Code string } `json:"error"`
				}
				if err := jsonUnmarshal(body, &e); err != nil || e.Error.Code != tt.errCode || e.Error.Message == "" || e.Error.Type == "" {
					t.Errorf("error body %s: want OpenAI error with code %q", body, tt.errCode)
				}
				if hdr.Get("X-Vigil-Trace-Id") == "" {
					t.Error("gateway error lacks X-Vigil-Trace-Id")
				}
			}
			waitFor(t, "access log line", func() bool { return len(gw.access.lines(t)) == before+1 })
			line := gw.access.lines(t)[before]
			if line["error_class"] != string(tt.class) {
				t.Errorf("error_class = %q, want %q", line["error_class"], tt.class)
			}
			if int(line["status"].(float64)) != tt.code {
				t.Errorf("logged status %v, want %d", line["status"], tt.code)
			}
		})
	}

	// Backend errors reach the client byte for byte.
	_, _, want := post(t, failURL+"/v1/chat/completions", chat("broken"))
	_, _, got := post(t, gw.URL+"/v1/chat/completions", chat("broken"))
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("backend error body changed (-direct +vigil):\n%s", diff)
	}
}

// TestNoHealthyBackend: once health checks find every backend down, requests
// get 503 and /readyz fails; when one recovers both recover.
func TestNoHealthyBackend(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	var down atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		http.Redirect(w, r, url+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer flaky.Close()
	gw := startGateway(t, []config.Backend{backend("a", flaky.URL)}, nil)

	ready := func() int {
		resp, err := http.Get(gw.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if ready() != 200 {
		t.Fatal("not ready at start")
	}
	down.Store(true)
	gw.checker.CheckAll(context.Background())
	if got := ready(); got != 503 {
		t.Errorf("/readyz = %d with every backend down, want 503", got)
	}
	code, _, body := post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`)
	if code != 503 || !strings.Contains(string(body), "no_healthy_backend") {
		t.Errorf("got %d %s, want 503 no_healthy_backend", code, body)
	}
	down.Store(false)
	gw.checker.CheckAll(context.Background())
	if got := ready(); got != 200 {
		t.Errorf("/readyz = %d after recovery, want 200", got)
	}
}

// TestAccessLog checks the fields of the access log line, token usage from
// a streaming usage chunk included, and that prompt text never appears.
func TestAccessLog(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	const secret = "my-secret-prompt-text"
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"m1","stream":%t,"stream_options":{"include_usage":true},"max_tokens":7,"messages":[{"role":"user","content":%q}]}`, stream, secret)
		if !stream {
			body = fmt.Sprintf(`{"model":"m1","max_tokens":7,"messages":[{"role":"user","content":%q}]}`, secret)
		}
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("X-Request-Id", fmt.Sprintf("req-%t", stream))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	waitFor(t, "two access log lines", func() bool { return len(gw.access.lines(t)) == 2 })
	for i, line := range gw.access.lines(t) {
		stream := i == 1
		for _, k := range []string{"time", "request_id", "trace_id", "route", "model", "backend", "status", "stream", "latency_ms", "ttft_ms", "prompt_tokens", "completion_tokens", "error_class"} {
			if _, ok := line[k]; !ok {
				t.Errorf("line %d lacks %q: %v", i, k, line)
			}
		}
		want := map[string]any{
			"request_id": fmt.Sprintf("req-%t", stream), "route": "/v1/chat/completions", "model": "m1",
			"backend": "a", "status": 200.0, "stream": stream, "completion_tokens": 7.0, "error_class": "",
		}
		for k, v := range want {
			if line[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, line[k], v)
			}
		}
		if line["prompt_tokens"].(float64) <= 0 {
			t.Errorf("line %d: prompt_tokens = %v, want > 0", i, line["prompt_tokens"])
		}
		if tid, _ := line["trace_id"].(string); len(tid) != 32 {
			t.Errorf("line %d: trace_id = %q", i, tid)
		}
	}
	gw.access.mu.Lock()
	leaked := strings.Contains(gw.access.b.String(), secret)
	gw.access.mu.Unlock()
	if leaked {
		t.Error("prompt text appears in the access log")
	}
}

// TestForwardedHeadersAsStdlib: rewrite's X-Forwarded-* are those of
// httputil.ProxyRequest.SetXForwarded after copying the client's chain.
func TestForwardedHeadersAsStdlib(t *testing.T) {
	for _, tc := range []struct {
		remote string
		xff    []string
		tls    bool
	}{
		{"127.0.0.1:4000", nil, false},
		{"[::1]:4000", []string{"10.0.0.1"}, true},
		{"10.0.0.9:1", []string{"10.0.0.1", "10.0.0.2, 10.0.0.3"}, false},
		{":4000", []string{"10.0.0.1"}, false},
		{"@", []string{"10.0.0.1"}, false},
		{"", nil, true},
	} {
		in := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		in.RemoteAddr, in.Host = tc.remote, "gw.example:8080"
		if tc.xff != nil {
			in.Header["X-Forwarded-For"] = tc.xff
		}
		if !tc.tls {
			in.TLS = nil
		} else if in.TLS == nil {
			in.TLS = &tls.ConnectionState{}
		}
		// The old rewrite: the client's chain copied, then SetXForwarded.
		want := &httputil.ProxyRequest{In: in, Out: in.Clone(context.Background())}
		want.Out.Header = http.Header{}
		if xff := in.Header["X-Forwarded-For"]; len(xff) > 0 {
			want.Out.Header["X-Forwarded-For"] = append([]string(nil), xff...)
		}
		want.SetXForwarded()

		x := &call{}
		x.forwardedHeaders(in)
		got := http.Header{}
		if x.forwardedFor {
			got["X-Forwarded-For"] = x.header(hdrForwardedFor)
		}
		got["X-Forwarded-Host"] = x.header(hdrForwardedHost)
		got["X-Forwarded-Proto"] = x.header(hdrForwardedProto)
		if diff := cmp.Diff(want.Out.Header, got); diff != "" {
			t.Errorf("remote %q, chain %q, tls %v (-SetXForwarded +ours):\n%s", tc.remote, tc.xff, tc.tls, diff)
		}
	}
}

// TestClientLeavesAfterStreamEnd: a client that closes as soon as it has
// read a stream's end marker (openai-go does), while the backend has yet
// to end its body, got its whole answer: the request is a success, not a
// 499. Each API's end marker counts: chat's [DONE], the Messages API's
// message_stop, the Responses API's response.completed, TGI's last event
// (the one with details).
func TestClientLeavesAfterStreamEnd(t *testing.T) {
	cases := []struct {
		path, body, end string
	}{
		{"/generate_stream", `{"inputs":"hi","parameters":{"max_new_tokens":1}}`,
			"data:{\"index\":1,\"token\":{\"id\":1,\"text\":\"hi\",\"logprob\":-0.1,\"special\":false},\"generated_text\":\"hi\",\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":1,\"seed\":null}}\n\n"},
		{"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"},
		{"/v1/messages", `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
		{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`,
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"model\":\"m\",\"status\":\"completed\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n"},
	}
	for _, c := range cases {
		t.Run(strings.TrimPrefix(strings.TrimPrefix(c.path, "/v1/"), "/"), func(t *testing.T) {
			be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, c.end)
				w.(http.Flusher).Flush()
				<-r.Context().Done() // the body ends only when the gateway goes
			}))
			defer be.Close()
			b := backend("a", be.URL, "m")
			if c.path == "/generate_stream" {
				b = tgiBackend("a", be.URL)
			}
			gw := startGateway(t, []config.Backend{b}, nil)
			req, _ := http.NewRequest(http.MethodPost, gw.URL+c.path, strings.NewReader(c.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(c.end))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != c.end {
				t.Fatalf("read %q, %v; want %q", got, err, c.end)
			}
			resp.Body.Close()
			waitFor(t, "access log line", func() bool { return len(gw.access.lines(t)) == 1 })
			if l := gw.access.lines(t)[0]; l["status"] != float64(http.StatusOK) || l["error_class"] != "" {
				t.Errorf("status %v, error_class %q; want 200 and none", l["status"], l["error_class"])
			}
		})
	}
}
