package gateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// rawRecorder is an http.RoundTripper that keeps a copy of every response
// body as the client read it.
type rawRecorder struct {
	mu     sync.Mutex
	bodies []*bytes.Buffer
}

func (r *rawRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	b := &bytes.Buffer{}
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.mu.Unlock()
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(resp.Body, lockedWriter{&r.mu, b}), resp.Body}
	return resp, nil
}

func (r *rawRecorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[len(r.bodies)-1].String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func sdkClient(baseURL string, rec *rawRecorder, header ...string) openai.Client {
	opts := []option.RequestOption{option.WithBaseURL(baseURL + "/v1"), option.WithAPIKey("sk-test-key-123456"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: rec})}
	for i := 0; i+1 < len(header); i += 2 {
		opts = append(opts, option.WithHeader(header[i], header[i+1]))
	}
	return openai.NewClient(opts...)
}

// lastAccess waits for the n-th access log line and returns it.
func lastAccess(t *testing.T, gw *testGateway, n int) map[string]any {
	t.Helper()
	var lines []map[string]any
	waitFor(t, "the access log line", func() bool { lines = gw.access.lines(t); return len(lines) >= n })
	return lines[n-1]
}

// TestUsageWithoutAsking: an OpenAI SDK client streams without
// stream_options; the backend is asked for usage all the same, the client
// reads the bytes a direct request reads, and the access log and metrics
// carry the backend's exact figures.
func TestUsageWithoutAsking(t *testing.T) {
	_, direct := startSim(t, "m1", nil)
	sp, url := startSpySim(t)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	ctx := context.Background()

	chat := openai.ChatCompletionNewParams{
		Model:     "m1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea")},
		MaxTokens: openai.Int(17),
	}
	cmpl := openai.CompletionNewParams{
		Model:     "m1",
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("Once upon a time")},
		MaxTokens: openai.Int(9),
		N:         openai.Int(2),
	}
	// What the backend reports when asked: the figures the log must hold.
	withUsage := chat
	withUsage.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	var acc openai.ChatCompletionAccumulator
	refRec := &rawRecorder{}
	_, ref := startSim(t, "m1", nil) // a sim of its own: ids follow each sim's request count
	refClient := sdkClient(ref, refRec)
	st := refClient.Chat.Completions.NewStreaming(ctx, withUsage)
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil || acc.Usage.PromptTokens == 0 || acc.Usage.CompletionTokens != 17 {
		t.Fatalf("direct stream with usage: %v, %+v", err, acc.Usage)
	}
	wantPrompt := acc.Usage.PromptTokens

	run := func(t *testing.T, base string, chatReq bool) (string, int) {
		rec := &rawRecorder{}
		c := sdkClient(base, rec)
		chunks := 0
		if chatReq {
			s := c.Chat.Completions.NewStreaming(ctx, chat)
			for s.Next() {
				chunks++
				if s.Current().JSON.Usage.Valid() {
					t.Errorf("the client got usage it did not ask for: %s", s.Current().RawJSON())
				}
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		} else {
			s := c.Completions.NewStreaming(ctx, cmpl)
			for s.Next() {
				chunks++
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		}
		return rec.last(), chunks
	}
	for i, tt := range []struct {
		name           string
		chat           bool
		wantCompletion int
	}{{"chat", true, 17}, {"completions n=2", false, 18}} {
		t.Run(tt.name, func(t *testing.T) {
			want, wantChunks := run(t, direct, tt.chat)
			got, gotChunks := run(t, gw.URL, tt.chat)
			if got != want || gotChunks != wantChunks {
				t.Errorf("the client's bytes differ from a direct request's (%d chunks, direct %d):\nvigil:  %q\ndirect: %q", gotChunks, wantChunks, got, want)
			}
			if up := sp.last(); !strings.Contains(up, `"stream_options":{"include_usage":true}`) {
				t.Errorf("the backend was not asked for usage: %s", up)
			}
			line := lastAccess(t, gw, i+1)
			if line["usage_source"] != "reported" || line["completion_tokens"] != float64(tt.wantCompletion) || line["prompt_tokens"].(float64) == 0 {
				t.Errorf("access log: usage_source %v, prompt %v, completion %v; want reported, >0, %d", line["usage_source"], line["prompt_tokens"], line["completion_tokens"], tt.wantCompletion)
			}
			if tt.chat && line["prompt_tokens"] != float64(wantPrompt) {
				t.Errorf("prompt_tokens %v, the backend reports %d", line["prompt_tokens"], wantPrompt)
			}
		})
	}
	if n := promtest.ToFloat64(gw.metrics.usageInjections); n != 2 {
		t.Errorf("vigil_usage_injections_total = %v, want 2", n)
	}
	if n := promtest.ToFloat64(gw.metrics.usage.WithLabelValues("", "m1", "a", "output", "reported")); n != 17+18 {
		t.Errorf("vigil_tokens_total{output, reported} = %v, want 35", n)
	}
}

// TestUsageCountedWhenCut: a client that leaves after 12 content chunks
// is accounted with the 12 tokens it was served, counted from the stream.
func TestUsageCountedWhenCut(t *testing.T) {
	_, url := startSim(t, "m1", func(k *sim.Knobs) { k.ITL = 20 * time.Millisecond })
	obs := newExchanges()
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil, func(o *Options) { o.Observer = obs })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := sdkClient(gw.URL, &rawRecorder{})
	s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     "m1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Write a long story")},
		MaxTokens: openai.Int(200),
	})
	const n = 12
	got := 0
	for got < n && s.Next() {
		if len(s.Current().Choices) > 0 && s.Current().Choices[0].Delta.Content != "" {
			got++
		}
	}
	cancel()
	s.Close()
	if got != n {
		t.Fatalf("read %d content chunks, want %d (%v)", got, n, s.Err())
	}
	line := lastAccess(t, gw, 1)
	tokens := line["completion_tokens"].(float64)
	// The gateway counts the chunks it relayed, which may run a few past
	// what the client read before its cancel reached the gateway (20 ms
	// apart; more on a loaded machine), never fewer than it read.
	if line["usage_source"] != "counted" || tokens < n-1 || tokens > n+5 {
		t.Errorf("access log: usage_source %v, completion_tokens %v; want counted, %d to %d", line["usage_source"], tokens, n-1, n+5)
	}
	if line["error_class"] != string(exchange.ClassClientCancel) {
		t.Errorf("error_class %v, want client_cancel", line["error_class"])
	}
	_, _, resp := obs.lastDone(t, 1)
	if resp.UsageSource != exchange.UsageCounted || float64(resp.CompletionTokens) != tokens {
		t.Errorf("the analyzers got %s %d tokens, the log %v", resp.UsageSource, resp.CompletionTokens, tokens)
	}
	if n := promtest.ToFloat64(gw.metrics.usage.WithLabelValues("", "m1", "a", "output", "counted")); n != tokens {
		t.Errorf("vigil_tokens_total{output, counted} = %v, want %v", n, tokens)
	}
}

// TestUsageInjectOff: with usage.inject false, a stream goes upstream
// unchanged and is accounted from its content chunks, exactly for a
// backend that sends one token per chunk.
func TestUsageInjectOff(t *testing.T) {
	sp, url := startSpySim(t)
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) { c.Usage.Inject = false })
	body := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":11,"n":3,"stream":true}`
	if code, _, b := post(t, gw.URL+"/v1/chat/completions", body); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	if sp.last() != body {
		t.Errorf("the backend got %s, want the client's body", sp.last())
	}
	line := lastAccess(t, gw, 1)
	if line["usage_source"] != "counted" || line["completion_tokens"] != float64(33) || line["prompt_tokens"] != float64(0) {
		t.Errorf("access log: %v %v %v; want counted, 33 completion, 0 prompt", line["usage_source"], line["completion_tokens"], line["prompt_tokens"])
	}
}

// TestUsageCountedTGI: a TGI stream without details is counted, one
// token per event.
func TestUsageCountedTGI(t *testing.T) {
	_, url := startSim(t, "tgi-model", nil)
	gw := startGateway(t, []config.Backend{tgiBackend("tgi", url)}, nil)
	if code, _, b := post(t, gw.URL+"/generate_stream", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":7}}`); code != http.StatusOK {
		t.Fatalf("status %d: %s", code, b)
	}
	line := lastAccess(t, gw, 1)
	if line["completion_tokens"] != float64(7) || line["usage_source"] != "counted" {
		t.Errorf("access log: %v %v; want counted, 7", line["usage_source"], line["completion_tokens"])
	}
}

// TestStreamGaps: the gaps between content chunks are the simulator's
// inter-token latency, within 20 %, and a 2 s stall mid-stream shows as
// the stream's longest gap, in the access log and vigil_stream_max_gap_seconds.
func TestStreamGaps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// In a bubble the clock moves only when every goroutine waits, so the
		// gaps the gateway measures are the simulator's to the nanosecond,
		// however busy the machine: the 20 % band allows for the chunks that
		// share a read.
		const itl = 50 * time.Millisecond
		n := &testutil.Network{}
		simSrv, url := startSimIn(t, n, "m1", func(k *sim.Knobs) { k.ITL = itl })
		obs := newExchanges()
		gw := startGatewayIn(t, n, []config.Backend{backend("a", url, "m1")}, nil, func(o *Options) { o.Observer = obs })
		body := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":30,"stream":true}`

		if code, _, b := gw.post(t, "/v1/chat/completions", body); code != http.StatusOK {
			t.Fatalf("status %d: %s", code, b)
		}
		_, _, resp := obs.lastDone(t, 1)
		g := resp.Gaps
		near := func(d time.Duration) bool { return d >= itl*8/10 && d <= itl*12/10 }
		if g.Count != 29 || !near(g.P50) || !near(g.P95) {
			t.Errorf("gaps: %d, P50 %v, P95 %v; want 29 within 20%% of %v", g.Count, g.P50, g.P95, itl)
		}
		line := lastAccess(t, gw, 1)
		if p50 := line["itl_p50_ms"].(float64); !near(time.Duration(p50 * float64(time.Millisecond))) {
			t.Errorf("access log itl_p50_ms %v, want ≈ %v", p50, itl)
		}
		if tps := line["tokens_per_second"].(float64); tps < 0.8*30/(30*itl.Seconds()) || tps > 1.2*30/(29*itl.Seconds()) {
			t.Errorf("tokens_per_second %v, want ≈ %v", tps, 1/itl.Seconds())
		}

		k := simSrv.Knobs()
		k.Stall, k.StallAfter = 2*time.Second, 10
		simSrv.SetKnobs(k)
		if code, _, b := gw.post(t, "/v1/chat/completions", body); code != http.StatusOK {
			t.Fatalf("status %d: %s", code, b)
		}
		_, _, resp = obs.lastDone(t, 2)
		if g := resp.Gaps; g.Max < 2*time.Second || g.Max > 2*time.Second+4*itl || !near(g.P50) {
			t.Errorf("stalled stream: max gap %v, P50 %v; want ≈ 2s and ≈ %v", g.Max, g.P50, itl)
		}
		if mg := lastAccess(t, gw, 2)["max_gap_ms"].(float64); mg < 2000 {
			t.Errorf("access log max_gap_ms %v, want ≥ 2000", mg)
		}
		if n := promtest.CollectAndCount(gw.metrics.maxGap); n != 1 {
			t.Fatalf("vigil_stream_max_gap_seconds: %d series, want 1", n)
		}
		out, _ := promtest.CollectAndFormat(gw.metrics.maxGap, expfmt.TypeTextPlain, "vigil_stream_max_gap_seconds")
		if !strings.Contains(string(out), `le="1"} 1`) || !strings.Contains(string(out), `le="2.5"} 2`) {
			t.Errorf("vigil_stream_max_gap_seconds: want one stream under 1 s and the stalled one in (1, 2.5]:\n%s", out)
		}
	})
}

// TestTenantUsage: tokens are counted by the tenant header's value; a
// credential header is never a label, only a short hash of it.
func TestTenantUsage(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	for _, tt := range []struct {
		name, header, value, want string
	}{
		{"x-tenant", "X-Tenant", "team-a", "team-a"},
		{"authorization", "Authorization", "Bearer sk-secret-key-0123456789", "sha256:fe9dff2e2230"},
		{"odd value", "X-Tenant", "team a", "sha256:35a622062702"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) { c.Usage.TenantHeader = tt.header })
			req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true}`))
			req.Header.Set(tt.header, tt.value)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n := promtest.ToFloat64(gw.metrics.usage.WithLabelValues(tt.want, "m1", "a", "output", "reported")); n != 5 {
				t.Errorf("vigil_tokens_total{tenant=%q} = %v, want 5", tt.want, n)
			}
			line := lastAccess(t, gw, 1)
			if line["tenant"] != tt.want {
				t.Errorf("access log tenant %v, want %q", line["tenant"], tt.want)
			}
			if strings.Contains(tt.value, "secret") && strings.Contains(tt.want, "secret") {
				t.Error("the credential is a label")
			}
		})
	}
}

// TestTenantLabelsBounded: tenants share the bound on label values that
// models have; past it a tenant is "other".
func TestTenantLabelsBounded(t *testing.T) {
	tn := request.NewTenants("X-Tenant", new(modelLabels).label)
	r, _ := http.NewRequest("GET", "/", nil)
	for i := range maxModelLabels + 10 {
		r.Header.Set("X-Tenant", "t"+strings.Repeat("x", i%60)+string(rune('a'+i/60)))
		tn.Of(r)
	}
	r.Header.Set("X-Tenant", "late")
	if got := tn.Of(r); got != "other" {
		t.Errorf("tenant beyond the bound = %q, want other", got)
	}
}

// TestUsageStrippedFromSizedStream: a server that buffers a short stream
// and sends it with a Content-Length (not vLLM, but a proxy in front of
// one may) still reaches the client whole once the injected usage is
// stripped: the gateway drops the length of a body it shortens.
func TestUsageStrippedFromSizedStream(t *testing.T) {
	const events = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"m1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n" +
		"data: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(events)))
		io.WriteString(w, events)
	}))
	t.Cleanup(up.Close)
	gw := startGateway(t, []config.Backend{backend("a", up.URL, "m1")}, nil)
	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m1","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the stream: %v (Content-Length %q, read %q)", err, resp.Header.Get("Content-Length"), body)
	}
	if bytes.Contains(body, []byte(`"usage"`)) || !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")) {
		t.Errorf("client got %q, want the stream without the injected usage", body)
	}
}

// TestMessagesPromptCountsCacheReads: Anthropic's input_tokens leaves out
// the tokens read from the prefix cache, so the gateway adds them back: a
// prompt accounted twice is the same size whether it hit the cache or not.
func TestMessagesPromptCountsCacheReads(t *testing.T) {
	_, url := startSim(t, "m1", func(k *sim.Knobs) { k.PrefixCacheBlocks = 1024 })
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, nil)
	body := `{"model":"m1","max_tokens":4,"system":"` + strings.Repeat("You review Go code carefully. ", 40) + `","messages":[{"role":"user","content":"hello"}]}`
	var prompts []float64
	for i := range 2 {
		if status, _, b := testutil.Post(t, gw.URL+"/v1/messages", body); status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, status, b)
		}
		line := lastAccess(t, gw, i+1)
		prompts = append(prompts, line["prompt_tokens"].(float64))
	}
	if prompts[0] == 0 || prompts[1] != prompts[0] {
		t.Errorf("prompt_tokens cold %v, warm %v: want the same whole prompt both times", prompts[0], prompts[1])
	}
	if n := promtest.ToFloat64(gw.metrics.usage.WithLabelValues("", "m1", "a", "input", "reported")); n != 2*prompts[0] {
		t.Errorf("vigil_tokens_total{input, reported} = %v, want %v", n, 2*prompts[0])
	}
}
