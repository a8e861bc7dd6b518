package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

// quotaGateway serves a gateway in front of a simulator of model m1 with
// quotas on for the tenants given (X-Tenant), over store (nil: memory).
func quotaGateway(t *testing.T, knobs func(*sim.Knobs), tenants map[string]config.QuotaLimits, mutate func(*config.Config), store state.Store) *testGateway {
	_, url := startSim(t, "m1", knobs)
	return startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) {
		c.Quotas.Enabled, c.Quotas.Tenants = true, tenants
		if mutate != nil {
			mutate(c)
		}
	}, func(o *Options) {
		if store != nil {
			o.SharedStore, o.Replica = store, "r1"
		}
	})
}

func tenantClient(url, tenant string, retries int) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"),
		option.WithHeader("X-Tenant", tenant), option.WithMaxRetries(retries))
}

func chat(ctx context.Context, c openai.Client, hr **http.Response) error {
	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     "m1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Say hello.")},
		MaxTokens: openai.Int(4),
	}, option.WithResponseInto(hr))
	return err
}

// TestQuotaRequests: a tenant of 3 requests a minute gets 3, each told
// what remains in OpenAI's headers, and a 4th is refused as OpenAI
// refuses, with retry-after; another tenant, without limits, is not
// held, and gets no rate-limit headers.
func TestQuotaRequests(t *testing.T) {
	gw := quotaGateway(t, nil, map[string]config.QuotaLimits{"team-a": {RequestsPerMinute: 3, TokensPerMinute: 100000}}, nil, nil)
	ctx := t.Context()
	a := tenantClient(gw.URL, "team-a", 0)
	for i := range 3 {
		var hr *http.Response
		if err := chat(ctx, a, &hr); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		h := hr.Header
		if h.Get("X-Ratelimit-Limit-Requests") != "3" || h.Get("X-Ratelimit-Remaining-Requests") != strconv.Itoa(2-i) ||
			h.Get("X-Ratelimit-Limit-Tokens") != "100000" || h.Get("X-Ratelimit-Reset-Requests") == "" {
			t.Errorf("request %d: headers %v", i, h)
		}
	}
	var hr *http.Response
	err := chat(ctx, a, &hr)
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != http.StatusTooManyRequests || oe.Type != "requests" || oe.Code != "rate_limit_exceeded" {
		t.Fatalf("4th request: %v, want OpenAI's 429 rate_limit_exceeded of type requests", err)
	}
	ra, _ := strconv.Atoi(oe.Response.Header.Get("Retry-After"))
	if ra < 1 || ra > 61 || oe.Response.Header.Get("X-Ratelimit-Remaining-Requests") != "0" {
		t.Errorf("4th request: retry-after %q, headers %v", oe.Response.Header.Get("Retry-After"), oe.Response.Header)
	}
	// /admin/usage shows the tenant held back: its limits, use and
	// refusals.
	code, body := gw.get(t, "/admin/usage")
	var usage struct {
		Quotas struct {
			Enabled bool
			Store   string
			Tenants []struct {
				Tenant string
				Limits struct {
					RequestsPerMinute int64 `json:"requests_per_minute"`
				}
				Used *struct {
					Requests int64 `json:"requests_last_minute"`
				}
				Remaining *struct {
					RequestsPerMinute int64 `json:"requests_per_minute"`
				}
				Rejected map[string]int64
			}
		}
	}
	if err := json.Unmarshal(body, &usage); code != http.StatusOK || err != nil {
		t.Fatalf("GET /admin/usage: %d %v %s", code, err, body)
	}
	q := usage.Quotas
	if !q.Enabled || q.Store != "ok" || len(q.Tenants) != 1 {
		t.Fatalf("quotas %s", body)
	}
	if a := q.Tenants[0]; a.Tenant != "team-a" || a.Limits.RequestsPerMinute != 3 || a.Used == nil || a.Used.Requests != 3 ||
		a.Remaining == nil || a.Remaining.RequestsPerMinute != 0 || a.Rejected["requests"] != 1 {
		t.Errorf("team-a in /admin/usage: %s", body)
	}
	var hb *http.Response
	if err := chat(ctx, tenantClient(gw.URL, "team-b", 0), &hb); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if v := hb.Header.Get("X-Ratelimit-Limit-Requests"); v != "" {
		t.Errorf("a tenant without limits got x-ratelimit-limit-requests %q", v)
	}
	// A request larger than the limit itself is told so, without a
	// retry-after: waiting never admits it.
	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m1","max_tokens":200000,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Tenant", "team-a")
	resp, err := gw.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), "Request too large") || resp.Header.Get("Retry-After") != "" {
		t.Errorf("200,000 tokens of 100,000: %d %s, retry-after %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	// The access log says what the quota decided of each request.
	wantQuota(t, gw, "admitted", "admitted", "admitted", "refused_requests", "", "refused_tokens")
}

// wantQuota waits for an access log line per request and checks each
// line's quota decision, in the order given.
func wantQuota(t *testing.T, gw *testGateway, want ...string) []map[string]any {
	t.Helper()
	waitFor(t, "access log", func() bool { return len(gw.access.lines(t)) == len(want) })
	lines := gw.access.lines(t)
	for i, l := range lines {
		if l["quota"] != want[i] {
			t.Errorf("access line %d: quota %q, want %q (tenant %v, status %v)", i, l["quota"], want[i], l["tenant"], l["status"])
		}
	}
	return lines
}

// TestQuotaSDKsRetry: one request in flight per tenant; two clients at
// once, on openai-go and on anthropic-sdk-go with their default retries:
// the second is refused (429, retry-after 1), backs off as the SDK does
// against the hosted API, and succeeds.
func TestQuotaSDKsRetry(t *testing.T) {
	gw := quotaGateway(t, func(k *sim.Knobs) { k.TTFT = 300 * time.Millisecond },
		map[string]config.QuotaLimits{"team-a": {MaxConcurrent: 1}}, nil, nil)
	ctx := t.Context()
	run := func(name string, call func() error) {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Go(func() { errs[i] = call() })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("%s client %d: %v", name, i, err)
			}
		}
	}
	before := quotaRejections(t, gw)
	oa := tenantClient(gw.URL, "team-a", 2)
	run("openai-go", func() error { var hr *http.Response; return chat(ctx, oa, &hr) })
	an := anthropic.NewClient(anthropicoption.WithBaseURL(gw.URL), anthropicoption.WithAPIKey("unused"),
		anthropicoption.WithHeader("X-Tenant", "team-a"), anthropicoption.WithMaxRetries(2))
	run("anthropic-sdk-go", func() error {
		_, err := an.Messages.New(ctx, anthropic.MessageNewParams{Model: "m1", MaxTokens: 4,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Say hello."))}})
		return err
	})
	if got := quotaRejections(t, gw) - before; got < 2 {
		t.Errorf("%v concurrency refusals, want one per SDK at least", got)
	}
}

// quotaRejections reads vigil_quota_rejections_total{tenant="team-a",reason="concurrency"}.
func quotaRejections(t *testing.T, gw *testGateway) float64 {
	_, body := gw.get(t, "/metrics")
	for line := range strings.Lines(string(body)) {
		if rest, ok := strings.CutPrefix(line, `vigil_quota_rejections_total{reason="concurrency",tenant="team-a"} `); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// TestQuotaNotChargedOn5xx: requests the backend fails with a 500 count
// against no limit: with 2 a minute, 5 failures in a row are all the
// backend's 500s, never a 429.
func TestQuotaNotChargedOn5xx(t *testing.T) {
	gw := quotaGateway(t, func(k *sim.Knobs) { k.ErrorRate = 1 }, map[string]config.QuotaLimits{"team-a": {RequestsPerMinute: 2}},
		func(c *config.Config) { c.Retries.Attempts, c.Health.Failures = 1, 0 }, nil)
	c := tenantClient(gw.URL, "team-a", 0)
	for i := range 5 {
		var hr *http.Response
		err := chat(t.Context(), c, &hr)
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != http.StatusInternalServerError {
			t.Fatalf("request %d: %v, want the backend's 500", i, err)
		}
		// The settlement is asynchronous: wait for it, as a client
		// retrying later would.
		waitSettled(t, gw)
	}
}

// waitSettled waits until the gateway's quota settlements are done.
func waitSettled(t *testing.T, gw *testGateway) {
	t.Helper()
	waitFor(t, "the quota settlements", func() bool { return gw.quota.Pending() == 0 })
}

// TestQuotaStoreDown: with the shared store (a real Redis) stopped,
// quotas.fail: closed answers 503 quota_unavailable at once; open admits
// from the replica's share and refuses beyond it.
func TestQuotaStoreDown(t *testing.T) {
	for _, mode := range []string{config.QuotaFailClosed, config.QuotaFailOpen} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.Start(t)
			rc, err := state.OpenRedis(srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rc.Close() })
			gw := quotaGateway(t, nil, map[string]config.QuotaLimits{"team-a": {RequestsPerMinute: 2}},
				func(c *config.Config) { c.Quotas.Fail = mode }, state.NewRedis(rc, "test"))
			c := tenantClient(gw.URL, "team-a", 0)
			var hr *http.Response
			if err := chat(t.Context(), c, &hr); err != nil {
				t.Fatal(err)
			}
			srv.Stop()
			start := time.Now()
			err = chat(t.Context(), c, &hr)
			var oe *openai.Error
			switch mode {
			case config.QuotaFailClosed:
				if !errors.As(err, &oe) || oe.StatusCode != http.StatusServiceUnavailable || oe.Code != "quota_unavailable" {
					t.Fatalf("store down, fail closed: %v, want 503 quota_unavailable", err)
				}
			case config.QuotaFailOpen:
				if err != nil {
					t.Fatalf("store down, fail open, 1st: %v", err)
				}
				if err := chat(t.Context(), c, &hr); err != nil {
					t.Fatalf("store down, fail open, 2nd: %v", err)
				}
				if err := chat(t.Context(), c, &hr); !errors.As(err, &oe) || oe.StatusCode != http.StatusTooManyRequests {
					t.Fatalf("store down, fail open, 3rd of the share of 2: %v, want 429", err)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the store's outage held requests %v", d)
			}
			if mode == config.QuotaFailClosed {
				wantQuota(t, gw, "admitted", "unavailable")
			} else {
				wantQuota(t, gw, "admitted", "admitted_local", "admitted_local", "refused_requests")
			}
		})
	}
}

// TestQuotaSettlesExact: a reservation is settled to the tokens the
// request used, plain or streamed (the stream's usage asked for by the
// gateway and taken out again): the tenant's use in /admin/usage is the
// sum of the usage its client read.
func TestQuotaSettlesExact(t *testing.T) {
	gw := quotaGateway(t, nil, map[string]config.QuotaLimits{"team-a": {TokensPerMinute: 100000}}, nil, nil)
	c := tenantClient(gw.URL, "team-a", 0)
	params := openai.ChatCompletionNewParams{
		Model:     "m1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea, in a few words.")},
		MaxTokens: openai.Int(7),
	}
	r, err := c.Chat.Completions.New(t.Context(), params)
	if err != nil {
		t.Fatal(err)
	}
	want := r.Usage.TotalTokens
	stream := c.Chat.Completions.NewStreaming(t.Context(), params)
	chunks := 0
	for stream.Next() {
		chunks++
	}
	if err := stream.Err(); err != nil || chunks == 0 {
		t.Fatalf("stream: %v, %d chunks", err, chunks)
	}
	want += r.Usage.PromptTokens + 7 // the same prompt, 7 tokens generated
	got := settledTokens(t, gw)
	if got != want {
		t.Errorf("tokens used %d, want %d (the usage reported: %d, then the stream's)", got, want, r.Usage.TotalTokens)
	}
	// Each access line says what its request was charged.
	var logged int64
	for _, l := range wantQuota(t, gw, "admitted", "admitted") {
		n, _ := l["quota_tokens"].(float64)
		logged += int64(n)
	}
	if logged != want {
		t.Errorf("quota_tokens in the access log sum to %d, want %d", logged, want)
	}
}

// TestQuotaChargesClientThatLeft: a client that leaves a stream part way
// (recorded 499) is charged what the backend made for it, the prompt's
// estimate and the chunks counted, not nothing and not the whole
// reservation.
func TestQuotaChargesClientThatLeft(t *testing.T) {
	gw := quotaGateway(t, func(k *sim.Knobs) { k.TTFT, k.ITL, k.OutputTokens = 0, 20*time.Millisecond, 500 },
		map[string]config.QuotaLimits{"team-a": {TokensPerMinute: 100000}}, nil, nil)
	c := tenantClient(gw.URL, "team-a", 0)
	ctx, cancel := context.WithCancel(t.Context())
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     "m1",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea.")},
		MaxTokens: openai.Int(500),
	})
	for chunks := 0; chunks < 3 && stream.Next(); chunks++ {
	}
	cancel()
	stream.Close()
	got := settledTokens(t, gw)
	// The body is under 400 bytes (a prompt estimate under 100 tokens);
	// the reservation held 500 more.
	if got < 3 || got >= 500 {
		t.Errorf("tokens used %d, want the prompt's estimate and the chunks read (3 to 500)", got)
	}
}

// settledTokens waits for the settlements and returns the one tenant's
// tokens in the last minute, as /admin/usage shows them.
func settledTokens(t *testing.T, gw *testGateway) int64 {
	t.Helper()
	waitSettled(t, gw)
	_, body := gw.get(t, "/admin/usage")
	var usage struct {
		Quotas struct {
			Tenants []struct {
				Used struct {
					Tokens int64 `json:"tokens_last_minute"`
				}
			}
		}
	}
	if err := json.Unmarshal(body, &usage); err != nil || len(usage.Quotas.Tenants) != 1 {
		t.Fatalf("/admin/usage: %v %s", err, body)
	}
	return usage.Quotas.Tenants[0].Used.Tokens
}
