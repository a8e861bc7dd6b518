package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// spy records the request bodies a backend receives; refuse lists paths
// it answers 404 without passing them on.
type spy struct {
	mu        sync.Mutex
	bodies    []string
	encodings []string // the Accept-Encoding of each request
	calls     []string // "PATH BODY" of each request
	refuse    map[string]bool
}

// list returns the requests received so far whose "PATH BODY" contains sub.
func (s *spy) list(sub string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls {
		if strings.Contains(c, sub) {
			out = append(out, c)
		}
	}
	return out
}

func (s *spy) last() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.bodies) == 0 {
		return ""
	}
	return s.bodies[len(s.bodies)-1]
}

// wrap returns h recording every request body first.
func (s *spy) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.bodies = append(s.bodies, string(b))
		s.encodings = append(s.encodings, r.Header.Get("Accept-Encoding"))
		s.calls = append(s.calls, r.URL.Path+" "+string(b))
		refused := s.refuse[r.URL.Path]
		s.mu.Unlock()
		if refused {
			http.NotFound(w, r)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		h.ServeHTTP(w, r)
	})
}

// startSpySim serves a simulator like startSim's behind a spy.
func startSpySim(t *testing.T) (*spy, string) {
	t.Helper()
	s, _ := startSim(t, "m1", nil)
	sp := &spy{}
	srv := httptest.NewServer(sp.wrap(s.Handler()))
	t.Cleanup(srv.Close)
	return sp, srv.URL
}

// exchanges is an Observer that keeps each request's events and response.
type exchanges struct {
	mu     sync.Mutex
	reqs   []*exchange.Request
	events map[*exchange.Request][]string
	resps  map[*exchange.Request]*exchange.Response
}

func newExchanges() *exchanges {
	return &exchanges{events: map[*exchange.Request][]string{}, resps: map[*exchange.Request]*exchange.Response{}}
}

func (e *exchanges) OnPrompt(time.Time, exchange.Operation, []byte) {}
func (e *exchanges) OnRequest(r *exchange.Request) {
	e.mu.Lock()
	e.reqs = append(e.reqs, r)
	e.mu.Unlock()
}
func (e *exchanges) OnEvent(r *exchange.Request, data []byte) {
	e.mu.Lock()
	e.events[r] = append(e.events[r], string(data))
	e.mu.Unlock()
}
func (e *exchanges) OnResponse(r *exchange.Request, p *exchange.Response) {
	e.mu.Lock()
	e.resps[r] = p
	e.mu.Unlock()
}

// lastDone waits for the n-th request's response and returns what was seen.
func (e *exchanges) lastDone(t *testing.T, n int) (*exchange.Request, []string, *exchange.Response) {
	t.Helper()
	waitFor(t, "the observer to see the response", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return len(e.reqs) == n && e.resps[e.reqs[n-1]] != nil
	})
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.reqs[n-1]
	return r, e.events[r], e.resps[r]
}

const injectChat = `{"model":"m1","messages":[{"role":"user","content":"Hello there"}],"max_tokens":12`

const (
	injectResponses   = `{"model":"m1","input":"Hello there","max_output_tokens":12,"store":false`
	injectedResponses = `,"include":["message.output_text.logprobs"],"top_logprobs":5`
)

// injectCases are requests with, for those that get logprobs injected at
// sample_ratio 1, the members the backend must see appended.
var injectCases = []struct {
	name, path, body, appended string
}{
	{"chat", "/v1/chat/completions", injectChat + `}`, `,"logprobs":true,"top_logprobs":5`},
	{"chat n=2", "/v1/chat/completions", injectChat + `,"n":2}`, `,"logprobs":true,"top_logprobs":5`},
	{"chat stream", "/v1/chat/completions", injectChat + `,"stream":true}`, `,"logprobs":true,"top_logprobs":5`},
	{"chat stream usage", "/v1/chat/completions", injectChat + `,"stream":true,"stream_options":{"include_usage":true},"n":2}`, `,"logprobs":true,"top_logprobs":5`},
	{"chat logprobs false", "/v1/chat/completions", injectChat + `,"logprobs":false}`, `,"logprobs":true,"top_logprobs":5`},
	{"chat logprobs null, spaces", "/v1/chat/completions", injectChat + ` , "logprobs" : null ,"stream":true }` + "\n", `,"logprobs":true,"top_logprobs":5`},
	{"completions", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10}`, `,"logprobs":5`},
	{"completions two prompts", "/v1/completions", `{"model":"m1","prompt":["Once upon","a time"],"max_tokens":10,"logprobs":null}`, `,"logprobs":5`},
	{"completions stream", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"stream":true}`, `,"logprobs":5`},
	{"completions stream usage", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"stream":true,"stream_options":{"include_usage":true}}`, `,"logprobs":5`},
	{"responses", "/v1/responses", injectResponses + `}`, injectedResponses},
	{"responses stream", "/v1/responses", injectResponses + `,"stream":true}`, injectedResponses},
	{"responses include null", "/v1/responses", injectResponses + `,"include":null,"top_logprobs":null}`, injectedResponses},
	{"responses instructions, stream, spaces", "/v1/responses", `{"model":"m1","instructions":"Be brief.","input":[{"role":"user","content":"Hi"}],"store" : false,"stream":true }` + "\n", injectedResponses},
	// The client asked: untouched.
	{"chat asks", "/v1/chat/completions", injectChat + `,"logprobs":true,"top_logprobs":2}`, ""},
	{"chat asks, stream", "/v1/chat/completions", injectChat + `,"stream":true,"logprobs":true}`, ""},
	{"chat top_logprobs only", "/v1/chat/completions", injectChat + `,"top_logprobs":0}`, ""},
	{"completions asks 0", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"logprobs":0}`, ""},
	{"completions asks, stream", "/v1/completions", `{"model":"m1","prompt":"Once upon a time","max_tokens":10,"logprobs":2,"stream":true}`, ""},
	{"responses asks", "/v1/responses", injectResponses + `,"include":["message.output_text.logprobs"],"top_logprobs":2}`, ""},
	{"responses asks, stream", "/v1/responses", injectResponses + `,"stream":true,"top_logprobs":3}`, ""},
	{"responses other include", "/v1/responses", injectResponses + `,"include":[]}`, ""},
	{"responses stored", "/v1/responses", `{"model":"m1","input":"Hello there","max_output_tokens":12,"stream":true}`, ""},
	// Never injected.
	{"embeddings", "/v1/embeddings", `{"model":"m1","input":["a b c","d e"]}`, ""},
	{"tgi generate", "/generate", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":8,"details":true}}`, ""},
	{"tgi generate_stream", "/generate_stream", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":8}}`, ""},
}

// withUsageAsked returns the upstream body of an OpenAI stream whose
// client did not ask for usage: body with stream_options appended
// (usage.inject, on by default).
func withUsageAsked(path, body string) string {
	if !strings.HasPrefix(path, "/v1/") || path == "/v1/responses" || !strings.Contains(body, `"stream":true`) || strings.Contains(body, "stream_options") {
		return body
	}
	end := strings.LastIndexByte(body, '}')
	return body[:end] + `,"stream_options":{"include_usage":true}` + body[end:]
}

// TestInjectByteIdentical: with sample_ratio 1, every eligible request
// reaches the backend with logprobs appended, the analyzers see the
// logprobs, and the client gets the body bytes the same request gets
// straight from an identical simulator without injection. Requests whose
// clients asked for logprobs, and other routes, pass untouched.
func TestInjectByteIdentical(t *testing.T) {
	_, direct := startSim(t, "m1", nil)
	sp, url := startSpySim(t)
	obs := newExchanges()
	gw := startGateway(t, []config.Backend{backend("vllm", url, "m1"), tgiBackend("tgi", url)},
		func(c *config.Config) { c.Analyzers.Confidence.Inject.SampleRatio = 1 },
		func(o *Options) { o.Observer = obs })

	injected := 0
	for i, tt := range injectCases {
		t.Run(tt.name, func(t *testing.T) {
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

			wantUp := tt.body
			if tt.appended != "" {
				injected++
				end := strings.LastIndexByte(wantUp, '}')
				wantUp = wantUp[:end] + tt.appended + wantUp[end:]
			}
			wantUp = withUsageAsked(tt.path, wantUp)
			if up := sp.last(); up != wantUp {
				t.Errorf("backend got\n %s\nwant\n %s", up, wantUp)
			}

			req, events, resp := obs.lastDone(t, i+1)
			if req.Injected != (tt.appended != "") || string(req.Body) != tt.body {
				t.Errorf("observer's request: Injected %v, Body %s", req.Injected, req.Body)
			}
			seen := string(resp.Body) + strings.Join(events, "\n")
			lp := `"top_logprobs"`
			if tt.path == "/v1/responses" {
				lp = `"logprob":` // a Responses body names top_logprobs anyway
			}
			if tt.appended != "" && !strings.Contains(seen, lp) {
				t.Errorf("the analyzers saw no logprobs: %s", seen)
			}
			stream := strings.Contains(tt.body, `"stream":true`)
			switch cl := gotHdr.Get("Content-Length"); {
			case stream:
			case tt.appended != "" && cl != "":
				t.Errorf("Content-Length %s on a stripped body, want none", cl)
			case tt.appended == "" && cl != wantHdr.Get("Content-Length"):
				t.Errorf("Content-Length %s, want the backend's %s", cl, wantHdr.Get("Content-Length"))
			}
		})
	}
	if n := testutil.ToFloat64(gw.metrics.injections); n != float64(injected) {
		t.Errorf("vigil_logprob_injections_total = %v, want %d", n, injected)
	}
}

// TestInjectOff: at sample_ratio 0 (the default) no request changes.
func TestInjectOff(t *testing.T) {
	_, direct := startSim(t, "m1", nil)
	sp, url := startSpySim(t)
	obs := newExchanges()
	gw := startGateway(t, []config.Backend{backend("vllm", url, "m1"), tgiBackend("tgi", url)}, nil,
		func(o *Options) { o.Observer = obs })
	for i, tt := range injectCases {
		t.Run(tt.name, func(t *testing.T) {
			_, wantHdr, want := post(t, direct+tt.path, tt.body)
			_, gotHdr, got := post(t, gw.URL+tt.path, tt.body)
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("body differs (-direct +vigil):\n%s", diff)
			}
			if g, w := gotHdr.Get("Content-Length"), wantHdr.Get("Content-Length"); g != w {
				t.Errorf("Content-Length %q, want %q", g, w)
			}
			if up, want := sp.last(), withUsageAsked(tt.path, tt.body); up != want {
				t.Errorf("backend got %s, want %s", up, want)
			}
			if req, _, _ := obs.lastDone(t, i+1); req.Injected {
				t.Error("request marked Injected")
			}
		})
	}
	if n := testutil.ToFloat64(gw.metrics.injections); n != 0 {
		t.Errorf("vigil_logprob_injections_total = %v, want 0", n)
	}
}

// TestInjectLeavesOtherAnswersAlone: an injected request's error answer,
// or an answer that is neither JSON nor SSE, reaches the client as the
// backend sent it, logprobs-looking values and Content-Length included;
// injected requests go upstream without Accept-Encoding.
func TestInjectLeavesOtherAnswersAlone(t *testing.T) {
	const answer = `{"choices":[{"logprobs":{"content":[]}}]}`
	sp := &spy{}
	be := httptest.NewServer(sp.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
		case "/v1/completions":
			w.Header().Set("Content-Type", "text/plain")
		}
		io.WriteString(w, answer)
	})))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)},
		func(c *config.Config) { c.Analyzers.Confidence.Inject.SampleRatio = 1 })
	for _, tt := range []struct {
		path, body string
		code       int
	}{
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, http.StatusBadRequest},
		{"/v1/completions", `{"model":"m","prompt":"hi"}`, http.StatusOK},
	} {
		code, hdr, got := post(t, gw.URL+tt.path, tt.body) // Go's client asks for gzip
		if code != tt.code || string(got) != answer || hdr.Get("Content-Length") != "41" {
			t.Errorf("%s: got %d %s (Content-Length %q), want %d %s", tt.path, code, got, hdr.Get("Content-Length"), tt.code, answer)
		}
		if !strings.Contains(sp.last(), `"logprobs":`) {
			t.Errorf("%s: not injected: %s", tt.path, sp.last())
		}
	}
	// An injected request asks for a plain body, which the stripper reads;
	// others keep the client's Accept-Encoding.
	post(t, gw.URL+"/v1/completions", `{"model":"m","prompt":"hi","logprobs":1}`)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if diff := cmp.Diff([]string{"", "", "gzip"}, sp.encodings); diff != "" {
		t.Errorf("Accept-Encoding upstream (-want +got):\n%s", diff)
	}
}

// TestInjectSampleRatio: about the configured share of eligible requests
// is injected. With 400 requests at 0.5 the count's standard deviation is
// 10; the bounds are 8 of them away, so the test fails by chance about
// once in 10^15 runs.
func TestInjectSampleRatio(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)},
		func(c *config.Config) { c.Analyzers.Confidence.Inject.SampleRatio = 0.5 })
	for range 400 {
		post(t, gw.URL+"/v1/completions", `{"model":"m","prompt":"hi"}`)
	}
	if n := testutil.ToFloat64(gw.metrics.injections); n < 120 || n > 280 {
		t.Errorf("%v of 400 requests injected at ratio 0.5", n)
	}
}
