package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// Bodies as vLLM writes them with --enable-prompt-tokens-details, and as
// the OpenAI and Anthropic APIs document them.
const (
	chatCachedBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1764400000,"model":"m1",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":1200,"total_tokens":1210,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":1024}}}`
	chatCachedEvent = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764400000,"model":"m1","choices":[],` +
		`"usage":{"prompt_tokens":300,"total_tokens":310,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":256}}}`
	completionsCachedBody = `{"id":"cmpl-1","object":"text_completion","created":1764400000,"model":"m1",` +
		`"choices":[{"index":0,"text":"hi","logprobs":null,"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":64,"total_tokens":80,"completion_tokens":16,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":48}}}`
	responsesCachedBody = `{"id":"resp_1","object":"response","created_at":1764400000,"model":"m1","status":"completed","output":[],` +
		`"usage":{"input_tokens":900,"input_tokens_details":{"cached_tokens":512},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":920}}`
	messagesCachedBody = `{"id":"msg_1","type":"message","role":"assistant","model":"m1","content":[{"type":"text","text":"hi"}],` +
		`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":50,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":12}}`
)

// TestCachedTokens: the cached prompt tokens of each API's usage, plain
// and streamed, and the prompt tokens the hit rate counts them against.
func TestCachedTokens(t *testing.T) {
	type want struct{ prompt, cached, queries int }
	tests := []struct {
		name   string
		op     exchange.Operation
		stream bool
		docs   []string // a plain body, or a stream's event payloads
		want   want
	}{
		{"chat", exchange.OpChat, false, []string{chatCachedBody}, want{1200, 1024, 1200}},
		{"chat stream", exchange.OpChat, true, []string{
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1764400000,"model":"m1","choices":[{"index":0,"delta":{"content":"hi"},"logprobs":null,"finish_reason":null}]}`,
			chatCachedEvent}, want{300, 256, 300}},
		{"completions", exchange.OpCompletion, false, []string{completionsCachedBody}, want{64, 48, 64}},
		{"vllm without prompt details", exchange.OpChat, false, []string{
			`{"id":"c","object":"chat.completion","model":"m1","choices":[],"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2,"prompt_tokens_details":null}}`}, want{7, 0, 7}},
		{"escaped key (encoding/json path)", exchange.OpChat, false, []string{
			`{"usage":{"prompt_tokens":70,"completion_tokens":2,"prompt_tokens_detail\u0073":{"cached_tokens":60}}}`}, want{70, 60, 70}},
		{"tgi", exchange.OpChat, false, []string{`{"generated_text":"hi","details":{"finish_reason":"length","generated_tokens":5}}`}, want{0, 0, 0}},
		{"responses", exchange.OpResponses, false, []string{responsesCachedBody}, want{900, 512, 900}},
		{"responses stream", exchange.OpResponses, true, []string{
			`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","model":"m1","status":"in_progress","output":[],"usage":null}}`,
			`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"hi","logprobs":[]}`,
			`{"type":"response.completed","sequence_number":2,"response":` + responsesCachedBody + `}`}, want{900, 512, 900}},
		// Anthropic's input_tokens leaves out cache reads and writes.
		{"messages", exchange.OpMessages, false, []string{messagesCachedBody}, want{50, 2000, 2150}},
		{"messages stream", exchange.OpMessages, true, []string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m1","content":[],"stop_reason":null,"stop_sequence":null,` +
				`"usage":{"input_tokens":50,"cache_creation_input_tokens":100,"cache_read_input_tokens":2000,"output_tokens":1}}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}`}, want{50, 2000, 2150}},
		// Cumulative counts in message_delta (the newer API) replace those
		// of message_start.
		{"messages stream, counts in message_delta", exchange.OpMessages, true, []string{
			`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m1","content":[],"usage":{"input_tokens":50,"output_tokens":1}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":50,"cache_read_input_tokens":3000,"cache_creation_input_tokens":0,"output_tokens":12}}`}, want{50, 3000, 3050}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := &call{req: &exchange.Request{Start: time.Now(), Operation: tt.op, Stream: tt.stream}}
			api := tt.op == exchange.OpResponses || tt.op == exchange.OpMessages
			if tt.stream {
				tp := x.newTap(nil, true, 0)
				tp.api = api
				for _, d := range tt.docs {
					tp.data([]byte(d))
				}
			} else {
				x.resp.captured = []byte(tt.docs[0])
				if api {
					x.apiUsageFromCapture()
				} else {
					x.usageFromCapture()
				}
			}
			got := want{x.resp.promptTokens, int(x.resp.cachedTokens), x.resp.promptTokens + int(x.resp.extraPrompt)}
			if got != tt.want {
				t.Errorf("prompt, cached, queries = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCachedTokensMatchSDK: the fields read are those the OpenAI SDK
// decodes.
func TestCachedTokensMatchSDK(t *testing.T) {
	var c openai.ChatCompletion
	if err := json.Unmarshal([]byte(chatCachedBody), &c); err != nil {
		t.Fatal(err)
	}
	var ch openai.ChatCompletionChunk
	if err := json.Unmarshal([]byte(chatCachedEvent), &ch); err != nil {
		t.Fatal(err)
	}
	var r responses.Response
	if err := json.Unmarshal([]byte(responsesCachedBody), &r); err != nil {
		t.Fatal(err)
	}
	if got := [3]int64{c.Usage.PromptTokensDetails.CachedTokens, ch.Usage.PromptTokensDetails.CachedTokens, r.Usage.InputTokensDetails.CachedTokens}; got != [3]int64{1024, 256, 512} {
		t.Errorf("the SDK reads cached tokens %v, want 1024, 256, 512", got)
	}
}

// TestScanCachedMatchesEncodingJSON: the fast path reads
// prompt_tokens_details as encoding/json does, or gives up.
func TestScanCachedMatchesEncodingJSON(t *testing.T) {
	for _, doc := range []string{
		chatCachedBody, chatCachedEvent, completionsCachedBody,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":null}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":3},"prompt_tokens_details":{}}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":3,"cached_tokens":null}}}`,
		`{"usage":{"prompt_tokens_details":{"Cached_Tokens":3}}}`,
		`{"usage":{"prompt_tokens_details":[]}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":1.5}}}`,
		`{"usage":{"prompt_tokens_details":{"cached_tokens":-2}}}`,
	} {
		checkScanResponse(t, []byte(doc))
	}
	var u responseFields
	if !scanResponse([]byte(chatCachedBody), true, &u) || u.cachedTokens != 1024 {
		t.Errorf("fast path on vLLM's body: %v, cached %d", scanResponse([]byte(chatCachedBody), true, &u), u.cachedTokens)
	}
}

// cachingBackend is an OpenAI-compatible backend that reports cached
// prompt tokens: each request of a conversation has 100 prompt tokens, of
// which the first has none cached and every later one 75. With metrics,
// it also exports vLLM's prefix-cache counters, which say 90 %.
type cachingBackend struct {
	requests atomic.Int64
	queries  atomic.Int64 // the exported counters
}

func (cb *cachingBackend) handler(metrics bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		cached := 75
		if cb.requests.Add(1) == 1 {
			cached = 0
		}
		cb.queries.Add(100)
		var req struct {
			Stream bool `json:"stream"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		usage := fmt.Sprintf(`{"prompt_tokens":100,"completion_tokens":2,"total_tokens":102,"prompt_tokens_details":{"cached_tokens":%d}}`, cached)
		if req.Stream {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n")
			w.(http.Flusher).Flush() // chunked, as vLLM streams
			fmt.Fprintf(w, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m1\",\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", usage)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","object":"chat.completion","model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":%s}`, usage)
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"object":"list","data":[{"id":"m1","object":"model","parent":null}]}`))
	})
	if metrics {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
			q := cb.queries.Load()
			fmt.Fprintf(w, "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m1\"} %d\n"+
				"# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m1\"} %d\nvllm:num_requests_running 0\n", q, q*9/10)
		})
	}
	return mux
}

// TestPrefixCacheAdmin: through a real gateway, the cached tokens that a
// backend's answers report show per backend in /admin/backends,
// /admin/prefix_cache and /metrics; a backend exporting vLLM's counters
// is measured by them instead; the fleet figure sums both.
func TestPrefixCacheAdmin(t *testing.T) {
	var plain, withMetrics cachingBackend
	ps := httptest.NewServer(plain.handler(false))
	t.Cleanup(ps.Close)
	ms := httptest.NewServer(withMetrics.handler(true))
	t.Cleanup(ms.Close)
	gw := startGateway(t, []config.Backend{backend("plain", ps.URL, "m1"), {Name: "served", URL: ms.URL, Kind: "openai", Models: []string{"m1"}, Weight: 100, Metrics: ms.URL + "/metrics"}},
		func(c *config.Config) {
			c.Balancer.Strategy = "round_robin"
			c.Balancer.ScrapeInterval = 20 * time.Millisecond
		})
	// The first sample of the server's counters opens its window.
	waitFor(t, "the first scrape", func() bool {
		pc := gw.pool.Backends()[1].PrefixCache()
		return pc != nil && pc.Source == "server"
	})
	for i := range 8 {
		stream := i%2 == 1
		code, _, body := gw.post(t, "/v1/chat/completions", fmt.Sprintf(`{"model":"m1","stream":%v,"messages":[{"role":"user","content":"hello"}]}`, stream))
		if code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	type prefixJSON struct {
		HitRate       *float64 `json:"hit_rate"`
		Source        string   `json:"source"`
		WindowSeconds float64  `json:"window_seconds"`
		WindowQueries float64  `json:"window_queries"`
		Queries       float64  `json:"queries"`
		Hits          float64  `json:"hits"`
		PromptTokens  int64    `json:"prompt_tokens"`
		CachedTokens  int64    `json:"cached_tokens"`
	}
	read := func() map[string]prefixJSON {
		_, body := gw.get(t, "/admin/backends")
		var l []struct {
			Name        string     `json:"name"`
			PrefixCache prefixJSON `json:"prefix_cache"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("/admin/backends: %v: %s", err, body)
		}
		m := map[string]prefixJSON{}
		for _, b := range l {
			m[b.Name] = b.PrefixCache
		}
		return m
	}
	var got map[string]prefixJSON
	waitFor(t, "hit rates of both backends", func() bool {
		got = read()
		p, s := got["plain"], got["served"]
		return p.PromptTokens == 400 && p.HitRate != nil && p.WindowQueries == 400 && s.Source == "server" && s.HitRate != nil && s.WindowQueries == 400
	})
	// plain: 4 answers of 100 prompt tokens, 0 + 3 × 75 cached.
	if p := got["plain"]; p.Source != "gateway" || math.Abs(*p.HitRate-225.0/400) > 1e-9 || p.CachedTokens != 225 || p.Queries != 400 || p.Hits != 225 || p.WindowSeconds != 60 {
		t.Errorf("plain: %+v (hit rate %v), want 225/400 from the gateway", p, *p.HitRate)
	}
	// served: its counters say 90 %, whatever its answers say (they say
	// the same as plain's, and the gateway still counts them).
	if s := got["served"]; math.Abs(*s.HitRate-0.9) > 1e-9 || s.PromptTokens != 400 || s.CachedTokens != 225 || s.Queries != 400 || s.Hits != 360 {
		t.Errorf("served: %+v (hit rate %v), want 0.9 from the server", s, *s.HitRate)
	}
	// The fleet: (225 + 360) / (400 + 400).
	_, body := gw.get(t, "/admin/prefix_cache")
	var fleet struct {
		prefixJSON
		Backends map[string]prefixJSON `json:"backends"`
	}
	if err := json.Unmarshal(body, &fleet); err != nil {
		t.Fatalf("/admin/prefix_cache: %v: %s", err, body)
	}
	if fleet.HitRate == nil || math.Abs(*fleet.HitRate-585.0/800) > 1e-9 || fleet.PromptTokens != 800 || fleet.CachedTokens != 450 || len(fleet.Backends) != 2 {
		t.Errorf("/admin/prefix_cache: %s", body)
	}
	for series, want := range map[string]float64{
		`vigil_backend_prompt_tokens_total{backend="plain"}`:        400,
		`vigil_backend_cached_prompt_tokens_total{backend="plain"}`: 225,
		`vigil_backend_prefix_cache_hit_ratio{backend="plain"}`:     225.0 / 400,
		`vigil_backend_prefix_cache_hit_ratio{backend="served"}`:    0.9,
		`vigil_prefix_cache_hit_ratio`:                              585.0 / 800,
	} {
		if got := metricValue(t, gw, series); !(math.Abs(got-want) <= 1e-9) { // NaN: absent
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	states := gw.admin.BackendStates()
	if len(states) != 2 || states[0].PrefixHitRate == nil || states[0].PrefixWindowQueries != 400 {
		t.Errorf("history's backend states: %+v", states)
	}
}

// loraBackend serves /v1/models with the given ids and answers chat
// requests for any model.
func loraBackend(t *testing.T, ids ...string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		var data []string
		for _, id := range ids {
			parent := `null`
			if id != "base" {
				parent = `"base"`
			}
			data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","parent":%s}`, id, parent))
		}
		fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("vllm:num_requests_running 0\n"))
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"c","object":"chat.completion","model":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// scraped is a backend whose metrics the gateway reads (and so its model
// list).
func scraped(name, url string) config.Backend {
	c := backend(name, url)
	c.Metrics = url + "/metrics"
	return c
}

// TestLoRARouting: three backends without configured model lists, one of
// which lists the adapter a1 in its /v1/models: requests for a1 go only
// there, requests for the base model to all three.
func TestLoRARouting(t *testing.T) {
	gw := startGateway(t, []config.Backend{scraped("b0", loraBackend(t, "base")), scraped("lora", loraBackend(t, "base", "a1")), scraped("b2", loraBackend(t, "base"))},
		func(c *config.Config) {
			c.Balancer.Strategy = "round_robin"
			c.Balancer.ScrapeInterval = 20 * time.Millisecond
		})
	waitFor(t, "the model lists", func() bool {
		return gw.pool.Listed("a1") && gw.pool.Backends()[0].DiscoveredModels() != nil && gw.pool.Backends()[2].DiscoveredModels() != nil
	})
	served := func(model string, n int) map[string]int {
		m := map[string]int{}
		for range n {
			code, h, body := gw.post(t, "/v1/chat/completions", `{"model":"`+model+`","messages":[{"role":"user","content":"x"}]}`)
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", model, code, body)
			}
			m[h.Get("X-Vigil-Backend")]++
		}
		return m
	}
	if got := served("a1", 12); got["lora"] != 12 {
		t.Errorf("a1 served by %v, want lora only", got)
	}
	if got := served("base", 12); len(got) != 3 {
		t.Errorf("base served by %v, want all three", got)
	}
	_, body := gw.get(t, "/admin/backends")
	if !strings.Contains(string(body), `"discovered_models":["a1","base"]`) {
		t.Errorf("/admin/backends does not show lora's discovered models: %s", body)
	}
}
