package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
)

// recorder is an Observer that keeps what it sees. It copies each Request
// it is handed, on the dispatcher's goroutine: under the race detector, a
// gateway that wrote a Request after handing it over would fail the test.
type recorder struct {
	mu      sync.Mutex
	prompts []string // operation and body
	reqs    []*exchange.Request
	events  []string
	resps   []*exchange.Response
	ended   []exchange.Request // the Request of each OnResponse, copied then
}

func (r *recorder) OnPrompt(_ time.Time, op exchange.Operation, body []byte) {
	r.mu.Lock()
	r.prompts = append(r.prompts, string(op)+" "+string(body))
	r.mu.Unlock()
}
func (r *recorder) OnRequest(q *exchange.Request) {
	cp := *q
	r.mu.Lock()
	r.reqs = append(r.reqs, &cp)
	r.mu.Unlock()
}
func (r *recorder) OnEvent(_ *exchange.Request, data []byte) {
	r.mu.Lock()
	r.events = append(r.events, string(data))
	r.mu.Unlock()
}
func (r *recorder) OnResponse(q *exchange.Request, p *exchange.Response) {
	cp := *q
	r.mu.Lock()
	r.resps = append(r.resps, p)
	r.ended = append(r.ended, cp)
	r.mu.Unlock()
}

func TestObserverSeesEverything(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	rec := &recorder{}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil, func(o *Options) { o.Observer = rec })

	body := `{"model":"m1","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	_, _, raw := post(t, gw.URL+"/v1/chat/completions", body)
	post(t, gw.URL+"/v1/embeddings", `{"model":"m1","input":"x"}`)

	waitFor(t, "two responses", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.resps) == 2 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) != 2 || string(rec.reqs[0].Body) != body || !rec.reqs[0].Stream || rec.reqs[0].Model != "m1" || rec.reqs[0].Backend != "a" {
		t.Errorf("requests seen: %+v", rec.reqs)
	}
	var want []string
	for _, l := range strings.Split(string(raw), "\n") {
		if d, ok := strings.CutPrefix(l, "data: "); ok && d != "[DONE]" {
			want = append(want, d)
		}
	}
	if strings.Join(rec.events, "\n") != strings.Join(want, "\n") {
		t.Errorf("events seen:\n%s\nwant:\n%s", strings.Join(rec.events, "\n"), strings.Join(want, "\n"))
	}
	if r := rec.resps[0]; r.Status != 200 || r.CompletionTokens != 5 || r.Events != len(want)+1 /* [DONE] */ || r.TTFT <= 0 {
		t.Errorf("stream response: %+v", r)
	}
	if r := rec.resps[1]; r.Status != 200 || len(r.Body) == 0 || r.Truncated {
		t.Errorf("embeddings response: %+v", r)
	}
}

// blockingObserver never returns from OnRequest until released.
type blockingObserver struct{ release chan struct{} }

func (b *blockingObserver) OnPrompt(time.Time, exchange.Operation, []byte)   {}
func (b *blockingObserver) OnRequest(*exchange.Request)                      { <-b.release }
func (b *blockingObserver) OnEvent(*exchange.Request, []byte)                {}
func (b *blockingObserver) OnResponse(*exchange.Request, *exchange.Response) {}

// TestSlowObserverNeverSlowsClients: with the observer stuck and a tiny
// queue, streams still complete, and the dropped events are counted.
func TestSlowObserverNeverSlowsClients(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	obs := &blockingObserver{release: make(chan struct{})}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")},
		func(c *config.Config) { c.Analyzers.QueueSize = 2 },
		func(o *Options) { o.Observer = obs })
	defer close(obs.release)

	done := make(chan error, 1)
	go func() {
		for range 5 {
			resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m1","stream":true,"max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`))
			if err != nil {
				done <- err
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("requests blocked behind a stuck observer")
	}
	// The first request's events (a batch) wait in the queue behind the
	// stuck observer; the four later requests' events, at least 20
	// content events a stream, find it full.
	if n := testutil.ToFloat64(gw.metrics.dropped); n < 4*20 {
		t.Errorf("dropped events = %v, want those of the 4 requests that found the queue full (>= 80)", n)
	}
}

// TestCaptureIsBounded: the copy kept for analysis stops at
// max_capture_bytes while the client still gets the whole body.
func TestCaptureIsBounded(t *testing.T) {
	_, url := startSim(t, "m1", func(k *sim.Knobs) {})
	rec := &recorder{}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")},
		func(c *config.Config) { c.Analyzers.MaxCaptureBytes = 100 },
		func(o *Options) { o.Observer = rec })
	_, _, body := post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
	waitFor(t, "response", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.resps) == 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := rec.resps[0]
	if len(r.Body) != 100 || !r.Truncated || string(r.Body) != string(body[:100]) {
		t.Errorf("capture: %d bytes, truncated %v; client got %d bytes", len(r.Body), r.Truncated, len(body))
	}
}

// TestDispatcherBatches: a request's events reach the observer in order,
// however the batches fall, and a full queue drops whole batches,
// counting their events.
func TestDispatcherBatches(t *testing.T) {
	rec := &recorder{}
	dropped := 0
	d := newDispatcher(rec, 100, func(n int) { dropped += n })
	req := &exchange.Request{}
	var b batch
	d.request(&b)
	var want []string
	for i := range 2*maxBatchEvents + 5 {
		p := strings.Repeat("x", i%7) + string(rune('a'+i%26))
		want = append(want, p)
		d.chunk(req, &b, []byte(p))
	}
	if len(d.queue) != 2 {
		t.Fatalf("%d batches queued, want 2 full ones", len(d.queue))
	}
	d.response(req, &b, &exchange.Response{Status: 200})
	for len(d.queue) > 0 {
		d.deliver(<-d.queue)
	}
	if len(rec.reqs) != 1 || len(rec.resps) != 1 || strings.Join(rec.events, ",") != strings.Join(want, ",") {
		t.Errorf("observer saw %d requests, %d responses, events %q; want 1, 1, %q", len(rec.reqs), len(rec.resps), rec.events, want)
	}
	if d.queued.Load() != 0 || dropped != 0 {
		t.Errorf("queued %d, dropped %d after delivery; want 0, 0", d.queued.Load(), dropped)
	}

	// With the observer stalled, a queue of 100 events admits a batch
	// while fewer than 100 wait: the first request's four batches (33,
	// 32, 32 and 5 events: OnRequest, 100 payloads, OnResponse), then
	// none of the next two requests', whose events are all counted.
	for range 3 {
		var b batch
		d.request(&b)
		for range 100 {
			d.chunk(req, &b, []byte("y"))
		}
		d.response(req, &b, &exchange.Response{})
	}
	if got := d.queued.Load(); got != 102 || dropped != 2*102 {
		t.Errorf("%d events queued, %d dropped; want 102, 204", got, dropped)
	}
}

// TestObserverFirstToken: a stream's FirstToken is its time to the first
// content chunk, which its first byte is not where the API opens the
// stream with events of its own (Messages' message_start); a chat
// stream's first byte is its first token; a non-streamed answer has none.
func TestObserverFirstToken(t *testing.T) {
	const ttft = 200 * time.Millisecond
	_, url := startSim(t, "m1", func(k *sim.Knobs) { k.TTFT = ttft })
	rec := &recorder{}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil, func(o *Options) { o.Observer = rec })
	post(t, gw.URL+"/v1/messages", `{"model":"m1","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":3,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
	waitFor(t, "three responses", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.resps) == 3 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if m := rec.resps[0]; m.FirstToken < ttft || m.TTFT >= m.FirstToken {
		t.Errorf("messages stream: first byte %v, first token %v; want the token at %v or later, after the first byte", m.TTFT, m.FirstToken, ttft)
	}
	if c := rec.resps[1]; c.FirstToken < ttft || c.FirstToken < c.TTFT {
		t.Errorf("chat stream: first byte %v, first token %v; want the token at %v or later, with or after the first byte", c.TTFT, c.FirstToken, ttft)
	}
	if n := rec.resps[2]; n.FirstToken != 0 {
		t.Errorf("non-streamed answer: first token %v, want none", n.FirstToken)
	}
}

// TestObserverPromptBeforeAnswer: a prompt reaches the observer when its
// request goes to the backend, before any answer (this backend never
// answers), and once; requests the gateway answers itself (an unknown
// model, the model list) hand over none.
func TestObserverPromptBeforeAnswer(t *testing.T) {
	_, url := startSim(t, "m1", func(k *sim.Knobs) { k.Hang = true })
	rec := &recorder{}
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil, func(o *Options) { o.Observer = rec })

	body := `{"model":"m1","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitFor(t, "the prompt", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.prompts) == 1 })
	rec.mu.Lock()
	if got, want := rec.prompts[0], "chat "+body; got != want || len(rec.reqs) != 0 || len(rec.resps) != 0 {
		t.Errorf("while the backend hangs the observer saw prompts %q, %d requests, %d responses; want [%q], 0, 0",
			rec.prompts, len(rec.reqs), len(rec.resps), want)
	}
	rec.mu.Unlock()

	post(t, gw.URL+"/v1/chat/completions", `{"model":"unknown","messages":[{"role":"user","content":"hi"}]}`)
	if resp, err := http.Get(gw.URL + "/v1/models"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the client got an answer from a backend that hangs")
	}
	waitFor(t, "two responses", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.resps) == 2 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.prompts) != 1 {
		t.Errorf("prompts seen: %q, want the hanging request's only", rec.prompts)
	}
}

// TestDispatcherPrompts: prompts wait without waking the dispatcher, reach
// the observer in order when it drains them, and beyond queue_size are
// dropped and counted.
func TestDispatcherPrompts(t *testing.T) {
	rec := &recorder{}
	dropped := 0
	d := newDispatcher(rec, 3, func(n int) { dropped += n })
	for i := range 4 {
		d.prompt(&exchange.Request{Operation: exchange.OpChat, Body: []byte{'a' + byte(i)}})
	}
	if dropped != 1 {
		t.Errorf("%d prompts dropped, want 1", dropped)
	}
	d.deliverPrompts()
	if got := strings.Join(rec.prompts, ","); got != "chat a,chat b,chat c" {
		t.Errorf("observer saw %q", got)
	}
}
