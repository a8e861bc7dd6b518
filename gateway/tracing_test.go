package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/tracing"
	"github.com/vigil-gw/vigil/tracing/otlptest"
)

// tracedGateway is a gateway exporting its spans over OTLP gRPC to an
// in-process receiver.
func tracedGateway(t *testing.T, backends []config.Backend, mutate func(*config.Config)) (*testGateway, *otlptest.Receiver, *tracing.Provider) {
	t.Helper()
	rcv := otlptest.NewReceiver(t)
	cfg := config.Default().Tracing
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + rcv.Endpoint(),
		"OTEL_EXPORTER_OTLP_INSECURE": "true",
		"OTEL_BSP_SCHEDULE_DELAY":     "50",
	}
	var tcfg config.Config
	tcfg.Tracing = cfg
	if mutate != nil {
		mutate(&tcfg)
	}
	p, err := tracing.New(context.Background(), tracing.Options{Config: tcfg.Tracing, Version: "test", Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	gw := startGateway(t, backends, func(c *config.Config) {
		if mutate != nil {
			mutate(c)
		}
	}, func(o *Options) { o.Tracer, o.Propagator = p.Tracer(), p.Propagator() })
	return gw, rcv, p
}

func byName(spans []otlptest.Span) map[string]otlptest.Span {
	m := map[string]otlptest.Span{}
	for _, s := range spans {
		m[s.Name] = s
	}
	return m
}

// TestTraceTree checks the span tree of a request: the caller's span, the
// server span under it, preprocess and inference under that, the backend's
// traceparent naming the inference span, and the GenAI attributes.
func TestTraceTree(t *testing.T) {
	type seen struct{ traceparent string }
	got := make(chan seen, 10)
	s := sim.New(sim.Options{Model: "m1", Seed: 1, Knobs: func() sim.Knobs { k := sim.DefaultKnobs(); k.TTFT, k.ITL = 0, 0; return k }()})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Header.Get("Traceparent")}
		s.Handler().ServeHTTP(w, r)
	}))
	defer be.Close()
	tgi := httptest.NewServer(s.Handler())
	defer tgi.Close()

	tests := []struct {
		name, path, body, op string
		stream               bool
	}{
		{"chat", "/v1/chat/completions", `{"model":"m1","max_tokens":5,"temperature":0.5,"top_p":0.9,"messages":[{"role":"user","content":"hi"}]}`, "chat", false},
		{"chat stream", "/v1/chat/completions", `{"model":"m1","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, "chat", true},
		{"completions", "/v1/completions", `{"model":"m1","max_tokens":5,"prompt":"hi"}`, "text_completion", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gw, rcv, p := tracedGateway(t, []config.Backend{backend("a", be.URL, "m1")}, nil)
			const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
			req, _ := http.NewRequest(http.MethodPost, gw.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Traceparent", caller)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			p.Shutdown(context.Background())
			spans := byName(rcv.WaitFor(t, 3, 5*time.Second))
			server, pre, inf := spans["POST "+tt.path], spans["preprocess"], spans[tt.op+" m1"]
			if server.SpanID == "" || pre.SpanID == "" || inf.SpanID == "" {
				t.Fatalf("spans: %v", names(spans))
			}
			if server.TraceID != "0af7651916cd43dd8448eb211c80319c" || server.ParentSpanID != "b7ad6b7169203331" {
				t.Errorf("server span %s/%s does not continue the caller's", server.TraceID, server.ParentSpanID)
			}
			if pre.ParentSpanID != server.SpanID || inf.ParentSpanID != server.SpanID {
				t.Errorf("preprocess and inference must be children of the server span")
			}
			if tp := (<-got).traceparent; !strings.Contains(tp, "-"+inf.SpanID+"-") || !strings.Contains(tp, server.TraceID) {
				t.Errorf("backend traceparent %q does not name the inference span %s", tp, inf.SpanID)
			}
			if resp.Header.Get("X-Vigil-Trace-Id") != server.TraceID {
				t.Errorf("X-Vigil-Trace-Id %q", resp.Header.Get("X-Vigil-Trace-Id"))
			}
			want := map[string]any{
				"gen_ai.operation.name": tt.op, "gen_ai.provider.name": "openai", "gen_ai.request.model": "m1",
				"gen_ai.response.model": "m1", "gen_ai.usage.output_tokens": int64(5), "gen_ai.request.max_tokens": int64(5),
				"server.address": "127.0.0.1", "http.response.status_code": int64(200),
			}
			for k, v := range want {
				if inf.Attributes[k] != v {
					t.Errorf("inference %s = %#v, want %#v", k, inf.Attributes[k], v)
				}
			}
			if id, _ := inf.Attributes["gen_ai.response.id"].(string); id == "" {
				t.Error("inference span lacks gen_ai.response.id")
			}
			if fr, ok := inf.Attributes["gen_ai.response.finish_reasons"].([]any); !ok || len(fr) != 1 || fr[0] != "length" {
				t.Errorf("finish reasons %#v", inf.Attributes["gen_ai.response.finish_reasons"])
			}
			if inf.Kind != "client" || server.Kind != "server" {
				t.Errorf("kinds: server %v, inference %v", server.Kind, inf.Kind)
			}
			if len(inf.Events) == 0 || inf.Events[0].Name != firstTokenEvent {
				t.Errorf("inference events %v, want the first-token event", inf.Events)
			}
		})
	}
}

func names(m map[string]otlptest.Span) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestTraceTGI: TGI's native route gets the same tree; the operation is
// "generate" and the finish reason comes from TGI's details.
func TestTraceTGI(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	gw, rcv, p := tracedGateway(t, []config.Backend{tgiBackend("t", url)}, nil)
	code, _, _ := post(t, gw.URL+"/generate_stream", `{"inputs":"hi","parameters":{"max_new_tokens":4,"details":true,"temperature":0.3}}`)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	p.Shutdown(context.Background())
	spans := byName(rcv.WaitFor(t, 3, 5*time.Second))
	inf, server := spans["generate"], spans["POST /generate_stream"]
	if inf.ParentSpanID == "" || inf.ParentSpanID != server.SpanID {
		t.Fatalf("spans %v", names(spans))
	}
	want := map[string]any{
		"gen_ai.operation.name": "generate", "gen_ai.provider.name": "tgi", "gen_ai.request.max_tokens": int64(4),
		"gen_ai.request.temperature": 0.3, "gen_ai.usage.output_tokens": int64(4),
	}
	for k, v := range want {
		if inf.Attributes[k] != v {
			t.Errorf("%s = %#v, want %#v", k, inf.Attributes[k], v)
		}
	}
	if fr, ok := inf.Attributes["gen_ai.response.finish_reasons"].([]any); !ok || len(fr) != 1 || fr[0] != "length" {
		t.Errorf("finish reasons %#v", inf.Attributes["gen_ai.response.finish_reasons"])
	}
}

// TestTraceErrors: a backend 500 and an unknown model mark their spans.
func TestTraceErrors(t *testing.T) {
	_, failURL := startSim(t, "broken", func(k *sim.Knobs) { k.ErrorRate = 1 })
	gw, rcv, p := tracedGateway(t, []config.Backend{backend("fail", failURL, "broken")}, nil)
	post(t, gw.URL+"/v1/chat/completions", `{"model":"broken","messages":[{"role":"user","content":"hi"}]}`)
	post(t, gw.URL+"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"hi"}]}`)
	p.Shutdown(context.Background())
	spans := rcv.WaitFor(t, 5, 5*time.Second) // 2 servers, 2 preprocess, 1 inference
	var inf, unknown *otlptest.Span
	for i := range spans {
		switch s := &spans[i]; {
		case s.Name == "chat broken":
			inf = s
		case s.Kind == "server" && s.Attributes["http.response.status_code"] == int64(404):
			unknown = s
		}
	}
	if inf == nil || inf.StatusCode != "error" || inf.Attributes["error.type"] != string(exchange.ClassUpstream5xx) {
		t.Errorf("inference span of a backend 500: %+v", inf)
	}
	if unknown == nil || unknown.Attributes["error.type"] != string(exchange.ClassUnknownModel) {
		t.Errorf("server span of an unknown model: %+v", unknown)
	}
}

// TestContentCapture: prompts and completions are span events only when
// capture_content is on, cut at max_content_bytes.
func TestContentCapture(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	for _, capture := range []bool{false, true} {
		gw, rcv, p := tracedGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) {
			c.Tracing.CaptureContent, c.Tracing.MaxContentBytes = capture, 40
		})
		post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":20,"messages":[{"role":"user","content":"a secret prompt"}]}`)
		p.Shutdown(context.Background())
		inf := byName(rcv.WaitFor(t, 3, 5*time.Second))["chat m1"]
		var prompt string
		for _, e := range inf.Events {
			if e.Name == tracing.EventGenAIInferenceDetails {
				prompt, _ = e.Attributes[tracing.AttrGenAIInputMessages].(string)
			}
		}
		if capture != (prompt != "") {
			t.Errorf("capture %v: prompt event %q", capture, prompt)
		}
		if capture && (len(prompt) != 40 || !strings.HasPrefix(prompt, `{"model":"m1"`)) {
			t.Errorf("captured prompt %q, want the body cut at 40 bytes", prompt)
		}
	}
}

// TestRetrieval: the hook posts the last user message, inserts the passages
// as a context message (system first, or user before the last user
// message), under a retrieval span; failures skip or fail as configured.
func TestRetrieval(t *testing.T) {
	var query string
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var q struct {
			Query string `json:"query"`
			TopK  int    `json:"top_k"`
		}
		json.NewDecoder(r.Body).Decode(&q)
		query = q.Query
		json.NewEncoder(w).Encode(map[string]any{"passages": []map[string]string{{"text": "Paris is the capital."}, {"text": "It is in France."}}})
	}))
	defer rs.Close()
	upstream := make(chan string, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		upstream <- string(b)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","choices":[]}`)
	}))
	defer be.Close()
	body := `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Capital of France?"}]}`
	tests := []struct {
		inject, url, onError string
		code                 int
		want                 string
	}{
		{"system", rs.URL, "skip", 200, `{"model":"m","messages":[{"role":"system","content":"Use the following context to answer.\n\n[1] Paris is the capital.\n\n[2] It is in France.\n"},{"role":"system","content":"Be brief."},{"role":"user","content":"Capital of France?"}]}`},
		{"user", rs.URL, "skip", 200, `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Use the following context to answer.\n\n[1] Paris is the capital.\n\n[2] It is in France.\n"},{"role":"user","content":"Capital of France?"}]}`},
		{"system", "http://127.0.0.1:1/none", "skip", 200, body},
		{"system", "http://127.0.0.1:1/none", "fail", 502, ""},
	}
	for _, tt := range tests {
		t.Run(tt.inject+"/"+tt.onError, func(t *testing.T) {
			gw, rcv, p := tracedGateway(t, []config.Backend{backend("a", be.URL)}, func(c *config.Config) {
				c.Retrieval = config.Retrieval{URL: tt.url, Timeout: time.Second, TopK: 2, Inject: tt.inject, OnError: tt.onError}
			})
			code, _, _ := post(t, gw.URL+"/v1/chat/completions", body)
			if code != tt.code {
				t.Fatalf("status %d, want %d", code, tt.code)
			}
			if tt.want != "" {
				if got := <-upstream; got != tt.want {
					t.Errorf("upstream body:\n got %s\nwant %s", got, tt.want)
				}
			}
			p.Shutdown(context.Background())
			if r, ok := byName(rcv.WaitFor(t, 3, 5*time.Second))["retrieval"]; !ok {
				t.Error("no retrieval span")
			} else if tt.url == rs.URL && query != "Capital of France?" {
				t.Errorf("retrieval query %q", query)
			} else if tt.url != rs.URL && r.StatusCode != "error" {
				t.Errorf("failed retrieval span status %q", r.StatusCode)
			}
		})
	}
}
