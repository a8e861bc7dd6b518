package faults

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/vigil-gw/vigil/state/redistest"
	"github.com/vigil-gw/vigil/test/toxitest"
)

// quotaUse is a tenant's use as /admin/usage shows it (read from Redis).
type quotaUse struct {
	Tenant string
	Used   *struct {
		Requests int64 `json:"requests_last_minute"`
		Tokens   int64 `json:"tokens_last_minute"`
	}
}

// quotaState is the quotas part of /admin/usage.
type quotaState struct {
	Quotas struct {
		Store         string
		LiveReplicas  int64 `json:"live_replicas"`
		Pending       int   `json:"settlements_pending"`
		AdmittedLocal int64 `json:"admitted_locally"`
		StoreOutages  int64 `json:"store_outages"`
		Tenants       []quotaUse
	}
}

func (g *gateway) quotas(t *testing.T) quotaState {
	t.Helper()
	var s quotaState
	g.getJSON(t, "/admin/usage", &s)
	return s
}

// tokensOf is tenant's tokens in the last minute as g reads them (-1: g
// shows none).
func (g *gateway) tokensOf(t *testing.T, tenant string) int64 {
	t.Helper()
	for _, u := range g.quotas(t).Quotas.Tenants {
		if u.Tenant == tenant && u.Used != nil {
			return u.Used.Tokens
		}
	}
	return -1
}

// tenantTally is what one tenant's clients saw: answers by phase and
// status (0: no answer), and the tokens the answered requests' usage
// reported.
type tenantTally struct {
	mu      sync.Mutex
	tokens  int64
	phase   string
	byPhase map[string]map[int]int
}

func newTally(phase string) *tenantTally {
	return &tenantTally{phase: phase, byPhase: map[string]map[int]int{}}
}

func (c *tenantTally) setPhase(p string) {
	c.mu.Lock()
	c.phase = p
	c.mu.Unlock()
}

func (c *tenantTally) add(status int, tokens int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens += tokens
	if c.byPhase[c.phase] == nil {
		c.byPhase[c.phase] = map[int]int{}
	}
	c.byPhase[c.phase][status]++
}

// answered is how many requests of phase got an answer (any status).
func (c *tenantTally) answered(phase string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for s, k := range c.byPhase[phase] {
		if s != 0 {
			n += k
		}
	}
	return n
}

func (c *tenantTally) read() (tokens int64, byPhase map[string]map[int]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[int]int{}
	for p, m := range c.byPhase {
		out[p] = map[int]int{}
		for s, n := range m {
			out[p][s] = n
		}
	}
	return c.tokens, out
}

// tenantLoad sends chat completions for tenant from workers clients, each
// to the replicas in turn, with pause between requests (and after a
// refusal), until ctx ends; tally counts what they saw. A request in
// flight when ctx ends is let finish, so that every request the gateway
// charged is counted.
func tenantLoad(ctx context.Context, wg *sync.WaitGroup, replicas []*gateway, tenant string, workers int, pause time.Duration, tally *tenantTally) {
	for w := range workers {
		others := make([]openai.Client, len(replicas))
		for i, r := range replicas {
			others[i] = openai.NewClient(option.WithBaseURL(r.URL+"/v1"), option.WithAPIKey("unused"),
				option.WithHeader("X-Tenant", tenant), option.WithMaxRetries(0))
		}
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				comp, err := others[(w+i)%len(others)].Chat.Completions.New(rctx, openai.ChatCompletionNewParams{
					Model:     "m",
					Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("%s worker %d asks question %d", tenant, w, i))},
					MaxTokens: openai.Int(8),
				})
				cancel()
				var oe *openai.Error
				switch {
				case err == nil:
					tally.add(http.StatusOK, comp.Usage.TotalTokens)
				case errors.As(err, &oe):
					tally.add(oe.StatusCode, 0)
				default:
					tally.add(0, 0) // no answer at all
				}
				select {
				case <-ctx.Done():
				case <-time.After(pause):
				}
			}
		})
	}
}

// TestQuotaAcrossReplicas: three `vigil serve` replicas share their
// tenants' limits through a real Redis, in front of one simulator.
//
//   - A tenant hammering all three, as fast as it is answered, is held to
//     its tokens_per_minute: the tokens its clients were served stay
//     within 2 % of the limit plus one reservation per replica, and reach
//     the limit less the reservations in flight.
//   - A quiet tenant beside it is never refused.
//   - A stream its client cuts after a few chunks is charged the prompt's
//     estimate and the chunks it got, not its whole reservation.
//   - Redis goes away (its connections closed, new ones refused; it keeps
//     its data, as a restarted Redis with persistence would): under
//     quotas.fail open every replica goes on admitting, from its share of
//     the limits (the quiet tenant is never refused); under closed the
//     clients get 503 quota_unavailable.
//   - Redis comes back: every replica admits again, and the counts in
//     Redis are the tokens the clients were served, before, during (open:
//     the local admissions are charged once it answers) and after.
func TestQuotaAcrossReplicas(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			quotaAcrossReplicas(t, mode)
		})
	}
}

func quotaAcrossReplicas(t *testing.T, mode string) {
	tp := toxitest.Start(t)
	redis := redistest.Start(t)
	px := tp.Proxy(t, "redis", redis.Addr)
	// Answers are max_tokens long (8 for the load), 2 ms a token.
	be := startSim(t, "--itl", "2ms", "--output-tokens", "2000")
	const limit = 3000
	cfg := baseConfig(backendYAML("a", be.URL)) +
		"state: {redis: {url: \"redis://" + px.Addr() + "/0\"}}\n" +
		fmt.Sprintf(`quotas:
  enabled: true
  fail: %s
  timeout: 100ms
  tenants:
    hammer: {tokens_per_minute: %d}
    quiet: {requests_per_minute: 6000}
    streamer: {tokens_per_minute: 1000000}
`, mode, limit)
	replicas := []*gateway{startVigil(t, "r1", cfg), startVigil(t, "r2", cfg), startVigil(t, "r3", cfg)}
	waitFor(t, "three live replicas", 15*time.Second, func() bool {
		for _, r := range replicas {
			if r.quotas(t).Quotas.LiveReplicas != 3 {
				return false
			}
		}
		return true
	})
	settled := func(what string) {
		waitFor(t, what, 15*time.Second, func() bool {
			for _, r := range replicas {
				if q := r.quotas(t).Quotas; q.Pending != 0 || q.Store != "ok" {
					return false
				}
			}
			return true
		})
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	hammer, quiet := newTally("shared"), newTally("shared")
	tenantLoad(ctx, &wg, replicas, "hammer", 6, 20*time.Millisecond, hammer)
	tenantLoad(ctx, &wg, replicas, "quiet", 1, 100*time.Millisecond, quiet)

	// A stream cut by its client, through r2, while the others run.
	sc := openai.NewClient(option.WithBaseURL(replicas[1].URL+"/v1"), option.WithAPIKey("unused"),
		option.WithHeader("X-Tenant", "streamer"), option.WithMaxRetries(0))
	sctx, scancel := context.WithCancel(ctx)
	stream := sc.Chat.Completions.NewStreaming(sctx, openai.ChatCompletionNewParams{
		Model:     "m",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Tell me about the sea, at length.")},
		MaxTokens: openai.Int(2000),
	})
	chunks := 0
	for chunks < 3 && stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 && c.Choices[0].Delta.Content != "" {
			chunks++
		}
	}
	scancel()
	stream.Close()
	if chunks != 3 {
		t.Fatalf("the stream to cut: %d chunks, %v", chunks, stream.Err())
	}

	// Each phase lasts until both tenants have had answers enough in it.
	phaseFor := func(ph string, hammerN, quietN int) {
		waitFor(t, ph+": answers to both tenants", 30*time.Second, func() bool {
			return hammer.answered(ph) >= hammerN && quiet.answered(ph) >= quietN
		})
	}
	phaseFor("shared", 1000, 30)
	hammer.setPhase("store gone")
	quiet.setPhase("store gone")
	served1, _ := hammer.read()
	closed := closedPort(t)
	px.SetUpstream(t, closed)
	phaseFor("store gone", 150, 15)
	px.SetUpstream(t, redis.Addr)
	back := waitFor(t, "the store answers every replica", 15*time.Second, func() bool {
		for _, r := range replicas {
			if r.quotas(t).Quotas.Store != "ok" {
				return false
			}
		}
		return true
	})
	hammer.setPhase("store back")
	quiet.setPhase("store back")
	phaseFor("store back", 150, 10)
	cancel()
	wg.Wait()
	settled("the settlements after the load")

	served, hammerPhases := hammer.read()
	_, quietPhases := quiet.read()
	t.Logf("hammer (tokens_per_minute %d) by phase and status: %v", limit, hammerPhases)
	t.Logf("quiet by phase and status: %v", quietPhases)
	var locals, outages int64
	for _, r := range replicas {
		q := r.quotas(t).Quotas
		locals += q.AdmittedLocal
		outages += q.StoreOutages
	}
	t.Logf("store back in %v once restored; %d admissions from the replicas' own shares, %d outages seen",
		back.Round(100*time.Millisecond), locals, outages)

	// Held across the replicas: the shared phase's tokens.
	const reservation = 8 + 30 // max_tokens and a token per 4 of the body's ~110 bytes
	overshoot := float64(served1-limit) / limit
	t.Logf("shared phase: the hammer's clients were served %d tokens of %d (%+.2f %%); bound +2 %% and one reservation (~%d) per replica",
		served1, limit, 100*overshoot, reservation)
	if served1 > limit*102/100+3*reservation {
		t.Errorf("served %d tokens of a %d-token minute through three replicas: over 2 %% and one reservation per replica", served1, limit)
	}
	if served1 < limit-6*reservation {
		t.Errorf("served %d tokens of a %d-token minute: the replicas together admit less than one would", served1, limit)
	}
	for ph, m := range hammerPhases {
		if m[0] != 0 {
			t.Errorf("hammer, %s: %d requests got no answer", ph, m[0])
		}
	}
	if hammerPhases["shared"][http.StatusTooManyRequests] == 0 {
		t.Errorf("the hammer was never refused: %v", hammerPhases)
	}
	for ph, m := range quietPhases {
		if mode == "open" || ph != "store gone" {
			if len(m) != 1 || m[http.StatusOK] == 0 {
				t.Errorf("quiet tenant, %s: %v, want only answers", ph, m)
			}
		}
	}
	switch mode {
	case "open":
		if locals == 0 || hammerPhases["store gone"][http.StatusOK] == 0 {
			t.Errorf("store gone, fail open: %d local admissions, hammer %v", locals, hammerPhases["store gone"])
		}
	case "closed":
		if m := quietPhases["store gone"]; m[http.StatusServiceUnavailable] == 0 || m[0] != 0 {
			t.Errorf("store gone, fail closed: quiet tenant %v, want 503s", m)
		}
		if locals != 0 {
			t.Errorf("fail closed admitted %d from the replicas' shares", locals)
		}
	}
	if m := quietPhases["store back"]; m[http.StatusOK] == 0 || len(m) != 1 {
		t.Errorf("store back: quiet tenant %v, want only answers", m)
	}

	// Consistent once Redis is back: every replica reads, from Redis, the
	// tokens the hammer's clients were served in all.
	for _, r := range replicas {
		if got := r.tokensOf(t, "hammer"); got != served {
			t.Errorf("%s: the hammer's tokens in Redis %d, its clients were served %d", r.name, got, served)
		}
	}
	// The cut stream: the prompt's estimate and the chunks it got, far
	// below its 2,000-token reservation.
	if got := replicas[0].tokensOf(t, "streamer"); got < 3 || got > 200 {
		t.Errorf("the cut stream was charged %d tokens, want its prompt's estimate and 3 chunks (3 to 200)", got)
	} else {
		t.Logf("the stream cut after 3 chunks was charged %d tokens of its 2,000+ reserved", got)
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestQuotaTenThousandTenants: 10,000 distinct tenants through one replica
// with default limits: the gateway's memory stays bounded (tenants past
// the first 64 share "other", as in usage), and so do /admin/usage and
// the quota metrics' series.
func TestQuotaTenThousandTenants(t *testing.T) {
	t.Parallel()
	redis := redistest.Start(t)
	be := startSim(t)
	cfg := baseConfig(backendYAML("a", be.URL)) +
		"state: {redis: {url: \"" + redis.URL() + "\"}}\n" +
		"quotas: {enabled: true, default: {requests_per_minute: 100000, tokens_per_minute: 100000000}}\n"
	g := startVigil(t, "gw", cfg)
	heap := func() float64 { return g.metric(t, "go_memstats_heap_inuse_bytes") }
	const tenants, workers = 10_000, 8
	send := func(from, to int) {
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				hc := &http.Client{}
				for i := range next {
					req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/chat/completions",
						strings.NewReader(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("X-Tenant", fmt.Sprintf("tenant-%05d", i))
					resp, err := hc.Do(req)
					if err != nil {
						t.Errorf("tenant %d: %v", i, err)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("tenant %d: %s", i, resp.Status)
					}
				}
			})
		}
		for i := from; i < to; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
	}
	send(0, 1000) // warm: pools, series, the first 64 labels
	before := heap()
	send(1000, tenants)
	after := heap()
	q := g.quotas(t).Quotas
	series := strings.Count(string(g.metrics(t)), "\nvigil_quota_remaining_tokens{")
	t.Logf("heap in use %.1f MiB after 1,000 tenants, %.1f MiB after %d; /admin/usage lists %d tenants; %d remaining-tokens series",
		before/(1<<20), after/(1<<20), tenants, len(q.Tenants), series)
	if len(q.Tenants) > 66 || series > 66 {
		t.Errorf("/admin/usage lists %d tenants and metrics %d series after %d tenants: unbounded", len(q.Tenants), series, tenants)
	}
	// Bounded: a byte per tenant would not show; a map entry of ~200 B
	// per tenant kept would be 2 MiB, plus what the GC leaves around.
	if after-before > 32<<20 {
		t.Errorf("heap grew %.1f MiB over 9,000 new tenants", (after-before)/(1<<20))
	}
}
