package gateway

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/tracing"
)

// The benchmarks in this file measure the gateway's own cost per request,
// without a network: the real handler (gin, parsing, balancing, spans, the
// ReverseProxy, the tap, metrics, the access log, the observer queue) in
// front of a transport that replays a recorded simulator response, one SSE
// event per Read as a backend sends them. BenchmarkAddedLatency measures
// the same path over real connections.
//
//	go test -run '^$' -bench 'Serve|Micro' -benchmem ./gateway/
//
// "min" is analyzers off (no Observer), spans never sampled, no access
// log; "full" is an Observer behind the dispatcher, every span sampled and
// batched to an exporter that discards them, and the JSON access log to
// io.Discard.

// Request bodies: the OpenAI SDKs' defaults (no stream_options: the
// gateway injects usage and strips it again) and a client that asks for
// usage itself.
var benchBodies = []struct{ name, body string }{
	{"nonstream", `{"model":"m1","max_tokens":32,"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`},
	{"stream", `{"model":"m1","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`},
	{"stream-usage", `{"model":"m1","max_tokens":32,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`},
}

// recorded is a backend response recorded from the simulator.
type recorded struct {
	header http.Header
	body   []byte
	events [][]byte // the body cut after each blank line (SSE) or whole
}

// recordSim records the simulator's answers to a non-streaming and a
// streaming (usage included) chat request of 32 tokens.
func recordSim(tb testing.TB) (plain, stream recorded) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	s := sim.New(sim.Options{Model: "m1", Seed: 1, Created: 1, Knobs: k})
	rec := func(body string) recorded {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		if w.Code != http.StatusOK {
			tb.Fatalf("simulator: %d %s", w.Code, w.Body)
		}
		r := recorded{header: w.Header().Clone(), body: w.Body.Bytes()}
		rest := r.body
		for len(rest) > 0 {
			i := bytes.Index(rest, []byte("\n\n"))
			if i < 0 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
				i = len(rest) - 2
			}
			r.events = append(r.events, rest[:i+2])
			rest = rest[i+2:]
		}
		return r
	}
	return rec(benchBodies[0].body), rec(benchBodies[2].body)
}

// replayTransport answers every request with a recorded response: the
// streaming one when the request body asks for a stream.
type replayTransport struct{ plain, stream recorded }

func (t *replayTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rc := &t.plain
	var head [96]byte
	n, _ := io.ReadFull(r.Body, head[:])
	io.Copy(io.Discard, r.Body)
	if bytes.Contains(head[:n], []byte(`"stream":true`)) {
		rc = &t.stream
	}
	h := make(http.Header, len(rc.header))
	for k, v := range rc.header {
		h[k] = v
	}
	resp := &http.Response{
		Status: "200 OK", StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: &eventReader{events: rc.events}, ContentLength: -1, Request: r,
	}
	if rc == &t.plain {
		resp.ContentLength = int64(len(rc.body))
	}
	return resp, nil
}

// eventReader returns one recorded event per Read, as a backend's stream
// arrives.
type eventReader struct {
	events [][]byte
	cur    []byte
}

func (e *eventReader) Read(p []byte) (int, error) {
	for len(e.cur) == 0 {
		if len(e.events) == 0 {
			return 0, io.EOF
		}
		e.cur, e.events = e.events[0], e.events[1:]
	}
	n := copy(p, e.cur)
	e.cur = e.cur[n:]
	return n, nil
}

func (e *eventReader) Close() error { return nil }

// discardWriter is a flushable http.ResponseWriter that keeps nothing.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.status = code }
func (w *discardWriter) Flush()                      {}

// benchGateway builds a gateway over replayTransport in the "min" or
// "full" configuration. Its background work runs until the benchmark ends.
func benchGateway(b *testing.B, full bool) *Server {
	plain, stream := recordSim(b)
	cfg := config.Default()
	cfg.Backends = []config.Backend{{Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai", Models: []string{"m1"}, Weight: 100}}
	cfg.Health.Interval = 0
	o := Options{
		Config:    cfg,
		Log:       slog.New(slog.DiscardHandler),
		Transport: &replayTransport{plain: plain, stream: stream},
	}
	ctx, cancel := context.WithCancel(context.Background())
	if full {
		tp, err := tracing.New(ctx, tracing.Options{Config: cfg.Tracing, Exporter: discardExporter{}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tp.Shutdown(context.Background()) })
		o.Tracer, o.Propagator = tp.Tracer(), tp.Propagator()
		o.AccessLog = slog.New(accesslog.NewHandler(io.Discard))
		o.Observer = nopObserver{}
	}
	gw, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); gw.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	return gw
}

// reqCtx stands for the cancelable context net/http gives each request
// (made once here: its cost is net/http's, not the gateway's).
var reqCtx, _ = context.WithCancel(context.Background())

// benchRequest is a client's request as net/http hands it to the handler.
func benchRequest(u *url.URL, body []byte) *http.Request {
	r := &http.Request{
		Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)), Host: "gateway", RemoteAddr: "127.0.0.1:40000", RequestURI: u.Path,
	}
	return r.WithContext(reqCtx)
}

// BenchmarkServe is one chat request through the gateway's handler, in
// the min and full configurations, non-streaming and streaming.
func BenchmarkServe(b *testing.B) {
	for _, conf := range []string{"min", "full"} {
		gw := benchGateway(b, conf == "full")
		h := gw.Handler()
		u, _ := url.Parse("/v1/chat/completions")
		for _, bb := range benchBodies {
			body := []byte(bb.body)
			b.Run(conf+"/"+bb.name, func(b *testing.B) {
				w := &discardWriter{h: make(http.Header)}
				b.ReportAllocs()
				cpu := processCPU()
				for b.Loop() {
					clear(w.h)
					w.status = 0
					h.ServeHTTP(w, benchRequest(u, body))
					if w.status != http.StatusOK {
						b.Fatalf("status %d", w.status)
					}
				}
				reportCPU(b, cpu)
			})
		}
	}
}

// BenchmarkServeParallel is BenchmarkServe from GOMAXPROCS goroutines at
// once: the request path's contention (the dispatcher's channel, the
// metrics, the span processor's queue) with the observer's goroutine.
func BenchmarkServeParallel(b *testing.B) {
	for _, conf := range []string{"min", "full"} {
		gw := benchGateway(b, conf == "full")
		h := gw.Handler()
		u, _ := url.Parse("/v1/chat/completions")
		for _, bb := range benchBodies[:2] {
			body := []byte(bb.body)
			b.Run(conf+"/"+bb.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					w := &discardWriter{h: make(http.Header)}
					for pb.Next() {
						clear(w.h)
						h.ServeHTTP(w, benchRequest(u, body))
					}
				})
				reportCPU(b, cpu)
			})
		}
	}
}

// reportCPU reports the process's CPU time per operation since since
// (processCPU): the gateway's cost with its background work (GC, the
// observer's and the span exporter's goroutines), and one that other
// processes on a busy machine disturb less than ns/op.
func reportCPU(b *testing.B, since time.Duration) {
	if since > 0 && b.N > 0 {
		b.ReportMetric(float64(processCPU()-since)/float64(b.N), "cpu-ns/op")
	}
}

// benchCall is a finished streaming request as finish sees it.
func benchCall() *call {
	start := time.Now()
	x := &call{
		req: &exchange.Request{
			Route: "/v1/chat/completions", Operation: exchange.OpChat, Start: start,
			ID: "3f2a9c1e5b7d4f608a1b2c3d4e5f6a7b", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
			Model: "llama-3-8b", Backend: "a", Stream: true, Tenant: "team-a",
		},
		resp: responseStats{
			firstByte: start.Add(81 * time.Millisecond), latency: 912 * time.Millisecond,
			promptTokens: 42, completionTokens: 128, usageSource: exchange.UsageReported,
		},
		retry:  attemptState{attempts: 1},
		answer: answerState{status: 200},
	}
	x.resp.gaps = exchange.Gaps{Count: 127, P50: 11900 * time.Microsecond, P95: 14200 * time.Microsecond, Max: 31500 * time.Microsecond}
	return x
}

func BenchmarkMicroParseRequest(b *testing.B) {
	for _, bb := range benchBodies {
		body := []byte(bb.body)
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, aerr := request.Parse(exchange.OpChat, body); aerr != nil {
					b.Fatal(aerr)
				}
			}
		})
	}
}

func BenchmarkMicroRequestID(b *testing.B) {
	for _, tc := range []struct{ name, id string }{{"new", ""}, {"client", "req-0123456789abcdef"}} {
		r := &http.Request{Header: http.Header{}}
		if tc.id != "" {
			r.Header.Set("X-Request-Id", tc.id)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if requestID(r) == "" {
					b.Fatal("empty id")
				}
			}
		})
	}
}

func BenchmarkMicroAccessLog(b *testing.B) {
	s := &Server{access: accesslog.New(slog.New(accesslog.NewHandler(io.Discard)))}
	x := benchCall()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.logAccess(ctx, x, 200, exchange.ClassNone)
	}
}

func BenchmarkMicroMetricsObserve(b *testing.B) {
	gw := benchGateway(b, false)
	x := benchCall()
	x.req.Model = "m1"
	b.ReportAllocs()
	for b.Loop() {
		gw.metrics.observe(x, 200, exchange.ClassNone)
	}
}

// BenchmarkMicroTapSSE is the tap's work on one SSE content event: split,
// count, scan, and (with a dispatcher) the copy queued for the observer.
func BenchmarkMicroTapSSE(b *testing.B) {
	_, stream := recordSim(b)
	ev := stream.events[3]
	for _, withDisp := range []bool{false, true} {
		name := "no-observer"
		if withDisp {
			name = "observer"
		}
		b.Run(name, func(b *testing.B) {
			x := &call{req: &exchange.Request{Start: time.Now(), Operation: exchange.OpChat, Stream: true}}
			var d *dispatcher
			if withDisp {
				d = newDispatcher(nopObserver{}, 4096, func(int) {})
				x.disp = d
			}
			src := &loopReader{ev: ev}
			t := x.newTap(src, true, 0)
			t.count = true
			p := make([]byte, 32<<10)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := t.Read(p); err != nil {
					b.Fatal(err)
				}
				if d != nil {
					select {
					case ev := <-d.queue: // the observer's side, inline
						d.deliver(ev)
					default:
					}
				}
				if x.resp.chunks.ngaps > 1000 {
					x.resp.chunks.release()
					x.resp.chunks = chunkCounter{}
				}
			}
		})
	}
}

// loopReader returns ev on every Read.
type loopReader struct{ ev []byte }

func (l *loopReader) Read(p []byte) (int, error) { return copy(p, l.ev), nil }
func (l *loopReader) Close() error               { return nil }

// BenchmarkMicroDispatcherChunk queues one SSE payload for an observer
// draining on its own goroutine (cpu-ns/op: both sides). The producer
// outruns even a no-op observer, so the queue fills and drops batches:
// drops/op says what share of the payloads was never delivered.
func BenchmarkMicroDispatcherChunk(b *testing.B) {
	_, stream := recordSim(b)
	payload := bytes.TrimSpace(bytes.TrimPrefix(stream.events[3], []byte("data: ")))
	var drops atomic.Int64
	d := newDispatcher(nopObserver{}, 4096, func(n int) { drops.Add(int64(n)) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	req := &exchange.Request{}
	var pending batch
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		d.chunk(req, &pending, payload)
	}
	reportCPU(b, cpu)
	b.ReportMetric(float64(drops.Load())/float64(b.N), "drops/op")
	cancel()
	<-done
}

// BenchmarkMicroDispatcherRequest hands a non-streamed request to the
// observer, with its prompt queued first or not, and delivers it on the
// same goroutine (as the dispatcher would, without waking it): what the
// prompt's own queue costs both sides.
func BenchmarkMicroDispatcherRequest(b *testing.B) {
	for _, prompt := range []bool{false, true} {
		name := "response"
		if prompt {
			name = "prompt+response"
		}
		b.Run(name, func(b *testing.B) {
			d := newDispatcher(nopObserver{}, 4096, func(int) { b.Fatal("dropped") })
			req := &exchange.Request{Operation: exchange.OpChat}
			resp := &exchange.Response{Status: 200}
			b.ReportAllocs()
			for b.Loop() {
				if prompt {
					d.prompt(req)
				}
				var pending batch
				d.request(&pending)
				d.response(req, &pending, resp)
				d.deliverPrompts()
				d.deliver(<-d.queue)
			}
		})
	}
}

// BenchmarkMicroSpans starts and ends the server, preprocess and
// inference spans of one request with a sampling, batching tracer.
func BenchmarkMicroSpans(b *testing.B) {
	gw := benchGateway(b, true)
	r := benchRequest(&url.URL{Path: "/v1/chat/completions"}, nil)
	f, _ := request.Parse(exchange.OpChat, []byte(benchBodies[0].body))
	ss := newServerSpan(http.MethodPost, "/v1/chat/completions")
	b.ReportAllocs()
	for b.Loop() {
		x := benchCall()
		x.backend = gw.pool.Backends()[0]
		ctx := gw.startServer(r, "/v1/chat/completions", ss, x)
		_, pre := gw.tracer.Start(ctx, "preprocess")
		pre.End()
		gw.startInference(ctx, x, &f)
		gw.endSpans(x, 200, exchange.ClassNone)
	}
}

// BenchmarkMicroUsage reads the usage of a non-streaming body and of a
// stream's usage event.
func BenchmarkMicroUsage(b *testing.B) {
	plain, stream := recordSim(b)
	usageEvent := bytes.TrimSpace(bytes.TrimPrefix(stream.events[len(stream.events)-2], []byte("data: ")))
	for _, tc := range []struct {
		name string
		doc  []byte
	}{{"nonstream", plain.body}, {"stream-event", usageEvent}} {
		b.Run(tc.name, func(b *testing.B) {
			x := &call{span: spanState{recording: true}}
			b.ReportAllocs()
			for b.Loop() {
				x.usage(tc.doc)
				if !x.resp.usageReported {
					b.Fatal("no usage")
				}
			}
		})
	}
}
