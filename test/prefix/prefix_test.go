package prefix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
)

// vigilBin is the vigil binary TestMain built.
var vigilBin string

// TestMain builds vigil once, without the race detector: the processes
// under test are the product as shipped, and the race detector's slowdown
// would only blur the latencies compared.
func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	bin, cleanup, err := proctest.BuildVigil()
	if err != nil {
		fmt.Fprintln(os.Stderr, "prefix:", err)
		return 1
	}
	defer cleanup()
	vigilBin = bin
	return m.Run()
}

// The fleet: each backend answers after simTTFT plus perToken for every
// prompt token not in its prefix cache, so a cold system prompt of about
// 500 tokens costs about 255 ms and a warm one about 15 ms.
const (
	tenants     = 6
	systemChars = 2000 // about 500 tokens as the simulator counts them
	simTTFT     = 5 * time.Millisecond
	perToken    = 500 * time.Microsecond
	blockSize   = 16
	// cacheShare is each backend's cache room as a share of all the
	// tenants' system prompts: 2.4 tenants of six. The prefix strategy
	// places two on each (bounded placement) and keeps them there, while round
	// robin, which sends every tenant everywhere, finds each cache too
	// small for six.
	cacheShare = 0.4
	// maxModelLen makes the backends refuse the bad-input test's 1 MB
	// prompt as vLLM refuses one beyond its context, instead of
	// "prefilling" it for minutes.
	maxModelLen = 16384
	model       = "m"
	// requests per strategy, the first warmup of them not counted: every
	// tenant's first request is cold under any strategy.
	requests        = 150
	warmup          = 30
	clients         = 6
	seed     uint64 = 20261202
)

const startAttempts = 3

// tenantPrompt is tenant t's system prompt under the seed: seeded words
// after a line that names the tenant, so that prompts differ from the
// first characters on.
func tenantPrompt(seed uint64, t int) string {
	rng := rand.New(rand.NewPCG(seed, uint64(t)))
	var b strings.Builder
	fmt.Fprintf(&b, "You are the assistant of tenant %d. ", t+1)
	for b.Len() < systemChars {
		b.WriteString(strings.Join(words(rng, 12), " "))
		b.WriteString(". ")
	}
	return b.String()
}

var vocabulary = strings.Fields(`account answer billing cache customer deploy error gateway invoice latency
model network order policy queue refund region request routing service shipping support ticket token usage
always never kindly briefly clearly escalate explain confirm verify summarize mention before after every`)

func words(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return out
}

// startSim runs `vigil sim` with a prefix cache of blocks blocks until the
// test ends.
func startSim(t *testing.T, blocks int) string {
	t.Helper()
	return proctest.Start(t, startAttempts, func() (string, error) {
		ports, err := proctest.FreePorts(1)
		if err != nil {
			return "", err
		}
		url := "http://" + ports[0]
		err = proctest.Run(t, proctest.Service{
			Name: "vigil sim",
			Path: vigilBin,
			Args: []string{"sim", "--listen", ports[0], "--model", model, "--ttft", simTTFT.String(), "--itl", "1ms",
				"--output-tokens", "4", "--max-model-len", fmt.Sprint(maxModelLen), "--prefill-per-token", perToken.String(),
				"--block-size", fmt.Sprint(blockSize), "--prefix-cache-blocks", fmt.Sprint(blocks)},
			Ready: func() bool { return proctest.HTTPOK(url + "/health") },
		})
		return url, err
	})
}

// startVigil runs `vigil serve` with the strategy in front of sims until
// the test ends.
func startVigil(t *testing.T, strategy string, sims []string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("backends:\n")
	for i, u := range sims {
		fmt.Fprintf(&b, "  - {name: b%d, url: %q, models: [%s], metrics: %q}\n", i+1, u, model, u+"/metrics")
	}
	fmt.Fprintf(&b, `balancer: {strategy: %s}
tracing: {exporter: none}
analyzers:
  drift: {enabled: false}
  confidence: {enabled: false}
  latency: {enabled: false}
  output: {enabled: false}
  precision: {enabled: false}
health: {interval: 1s, timeout: 500ms}
log: {level: warn, access: false}
admin: {token: %s}
`, strategy, adminToken)
	return proctest.Start(t, startAttempts, func() (string, error) {
		ports, err := proctest.FreePorts(1)
		if err != nil {
			return "", err
		}
		file := filepath.Join(t.TempDir(), strategy+".yaml")
		if err := os.WriteFile(file, []byte(fmt.Sprintf("listen: %q\n%s", ports[0], b.String())), 0o600); err != nil {
			return "", err
		}
		url := "http://" + ports[0]
		err = proctest.Run(t, proctest.Service{
			Name: "vigil serve (" + strategy + ")",
			Path: vigilBin,
			Args: []string{"serve", "-config", file},
			Env:  proctest.WithoutOTEL(os.Environ()),
			// /readyz answers once one backend is healthy; the prefix
			// strategy places each tenant where its first request went,
			// so the load must not start before all are.
			Ready:     func() bool { return healthyBackends(url) == len(sims) },
			StopGrace: 15 * time.Second,
		})
		return url, err
	})
}

// healthyBackends counts the backends the gateway at url reports healthy
// (vigil_backend_healthy on its /metrics); 0 when it does not answer.
func healthyBackends(url string) int {
	resp, err := (&http.Client{Timeout: time.Second}).Get(url + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return 0
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "vigil_backend_healthy{") && strings.HasSuffix(line, " 1") {
			n++
		}
	}
	return n
}

// chatBody is a chat request of a tenant's system prompt and a user
// message, streamed with usage at the end when stream is set.
func chatBody(system, user string, stream bool) string {
	req := map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
		"max_tokens": 4,
	}
	if stream {
		req["stream"] = true
		req["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, _ := json.Marshal(req)
	return string(b)
}

// client makes the tests' requests; its timeout is what "hangs" means.
var client = &http.Client{Timeout: 30 * time.Second}

// promptTokens asks a backend how many prompt tokens a system prompt
// counts (usage.prompt_tokens of a one-token answer without the user
// message): its cache counts in its own tokens.
func promptTokens(t *testing.T, simURL, system string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 1,
		"messages": []map[string]string{{"role": "system", "content": system}}})
	resp, err := client.Post(simURL+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Usage.PromptTokens <= 0 {
		t.Fatalf("the simulator's prompt_tokens: %v (%+v)", err, out)
	}
	return out.Usage.PromptTokens
}

// answer is one streamed request as the client saw it.
type answer struct {
	backend        string
	ttft           time.Duration
	prompt, cached int
}

// stream sends a streamed chat request and reads it to the end: ttft is
// the time to the first event with content, prompt and cached the usage
// the stream ended with.
func stream(ctx context.Context, url, body string) (answer, error) {
	var a answer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return a, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	a.backend = resp.Header.Get("X-Vigil-Backend")
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return a, fmt.Errorf("%s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return a, fmt.Errorf("event %.200q: %w", data, err)
		}
		if a.ttft == 0 && len(ev.Choices) > 0 && ev.Choices[0].Delta.Content != "" {
			a.ttft = time.Since(start)
		}
		if ev.Usage != nil {
			a.prompt = ev.Usage.PromptTokens
			if d := ev.Usage.PromptTokensDetails; d != nil {
				a.cached = d.CachedTokens
			}
		}
	}
	switch {
	case sc.Err() != nil:
		return a, sc.Err()
	case !done || a.ttft == 0:
		return a, errors.New("stream without content or [DONE]")
	case a.prompt == 0:
		return a, errors.New("stream without usage")
	}
	return a, nil
}

// result is what a strategy's measured requests add up to.
type result struct {
	hitRate  float64 // Σ cached_tokens / Σ prompt_tokens
	meanTTFT time.Duration
	shares   map[string]float64
	// placed counts each tenant's requests by backend, for the log.
	placed [tenants]map[string]int
}

// drive sends the requests through the gateway from clients in parallel,
// each taking the next of a sequence fixed by the seed (the same for
// every strategy), and sums up those after the warm-up.
func drive(t *testing.T, url string, prompts []string) result {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	bodies := make([]string, requests)
	tenantOf := make([]int, requests)
	for i := range bodies {
		tenant := rng.IntN(tenants)
		tenantOf[i] = tenant
		bodies[i] = chatBody(prompts[tenant], fmt.Sprintf("Question %d: %s?", i+1, strings.Join(words(rng, 6), " ")), true)
	}
	answers := make([]answer, requests)
	errs := make([]error, requests)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= requests {
					return
				}
				answers[i], errs[i] = stream(t.Context(), url, bodies[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("requests failed: %v", err)
	}
	var prompt, cached int
	var sum time.Duration
	counts := map[string]int{}
	var r result
	for i, a := range answers[warmup:] {
		prompt += a.prompt
		cached += a.cached
		sum += a.ttft
		counts[a.backend]++
		t := tenantOf[warmup+i]
		if r.placed[t] == nil {
			r.placed[t] = map[string]int{}
		}
		r.placed[t][a.backend]++
	}
	n := requests - warmup
	r.hitRate, r.meanTTFT, r.shares = float64(cached)/float64(prompt), sum/time.Duration(n), map[string]float64{}
	for b, c := range counts {
		r.shares[b] = float64(c) / float64(n)
	}
	return r
}

// TestPrefixRouting: with each backend's cache room for half of six
// tenants, the prefix strategy keeps each tenant where its system prompt is
// cached, so most prompt tokens are cache hits and answers start sooner,
// while round robin spreads every tenant over every backend and thrashes
// the caches; the prefix strategy still spreads the tenants.
func TestPrefixRouting(t *testing.T) {
	ts := seed
	prompts := make([]string, tenants)
	for i := range prompts {
		prompts[i] = tenantPrompt(ts, i)
	}
	// The cache is sized from the tenants' prompts as a backend counts
	// them: asked of a simulator without a cache.
	probe := startSim(t, 0)
	blocks := 0
	for _, p := range prompts {
		blocks += promptTokens(t, probe, p) / blockSize // only full blocks are cached
	}
	room := int(math.Ceil(cacheShare * float64(blocks)))
	t.Logf("cache room: %d blocks of %d tokens on each backend (%d blocks of system prompts in all)", room, blockSize, blocks)

	res := map[string]result{}
	var prefixGW string
	for _, strategy := range []string{"round_robin", "prefix"} {
		// Fresh backends for each strategy: empty caches.
		sims := []string{startSim(t, room), startSim(t, room), startSim(t, room)}
		gw := startVigil(t, strategy, sims)
		r := drive(t, gw, prompts)
		t.Logf("%-11s hit rate %.3f, mean TTFT %v, shares %v; each tenant's requests by backend %v",
			strategy, r.hitRate, r.meanTTFT.Round(100*time.Microsecond), r.shares, r.placed)
		res[strategy] = r
		if strategy == "prefix" {
			prefixGW = gw
		}
	}

	p, rr := res["prefix"], res["round_robin"]
	if p.hitRate < 0.8 || p.hitRate < rr.hitRate+0.3 {
		t.Errorf("prefix hit rate %.3f, want ≥ 0.8 and ≥ round robin's %.3f + 0.3", p.hitRate, rr.hitRate)
	}
	// The benchmark (test/bench/run -suite prefix) wants 0.25 over longer
	// runs. Here a busy 2-core CI machine adds the same scheduling delay
	// to every request: it weighs on the prefix strategy's mean of tens
	// of milliseconds far more than on round robin's of a hundred or
	// more, so 0.5 keeps the test green there and still fails a strategy
	// that does not follow the caches (about 1).
	if ratio := float64(p.meanTTFT) / float64(rr.meanTTFT); ratio > 0.5 {
		t.Errorf("prefix mean TTFT %v is %.2f × round robin's %v, want ≤ 0.5", p.meanTTFT, ratio, rr.meanTTFT)
	}
	for b, s := range p.shares {
		if s > 0.5 {
			t.Errorf("prefix: backend %s served %.1f %% of the requests, want ≤ 50 %%", b, 100*s)
		}
	}

	// Each backend is home to two of the six tenants, whichever way the
	// hash alone would have split them (bounded placement).
	homes := adminHomes(t, prefixGW)
	for b, n := range homes {
		if n != 2 {
			t.Errorf("prefix: homes by backend %v, want 2 each (%s has %d)", homes, b, n)
			break
		}
	}
	if len(homes) != 3 {
		t.Errorf("prefix: homes by backend %v, want 3 backends", homes)
	}

	t.Run("bad input", func(t *testing.T) { badInput(t, prefixGW) })
}

const adminToken = "prefix-test"

// adminHomes reads each backend's home count from /admin/prefix_cache.
func adminHomes(t *testing.T, gw string) map[string]int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, gw+"/admin/prefix_cache", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Homes    *int `json:"homes"`
		Backends map[string]struct {
			Homes *int `json:"homes"`
		} `json:"backends"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/admin/prefix_cache: %d, %v", resp.StatusCode, err)
	}
	out := map[string]int{}
	for name, b := range got.Backends {
		if b.Homes == nil {
			t.Fatalf("/admin/prefix_cache: no homes for %s", name)
		}
		out[name] = *b.Homes
	}
	if got.Homes == nil || *got.Homes != tenants {
		t.Errorf("/admin/prefix_cache: fleet homes %v, want %d", got.Homes, tenants)
	}
	return out
}

// badInput sends what a prefix index must survive: each gets an answer
// (the backend's own refusal, or a 2xx or 4xx of the gateway), never a 5xx
// of the gateway or a hang, and the gateway serves normally afterwards.
func badInput(t *testing.T, gw string) {
	big := strings.Repeat("lorem ipsum ", (1<<20)/12+1)
	cases := []struct{ name, body string }{
		{"empty prompt", `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":""}]}`},
		{"empty prompt, streamed", `{"model":"m","max_tokens":4,"stream":true,"messages":[{"role":"system","content":""},{"role":"user","content":""}]}`},
		{"1 MB prompt", chatBody(big, "hi", false)},
		{"1 MB prompt, streamed", chatBody(big, "hi", true)},
		{"non-UTF-8 content", "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"system\",\"content\":\"caf\xe9 \xff\xfe\xc3\"},{\"role\":\"user\",\"content\":\"\x80hi\"}]}"},
		{"messages not an array", `{"model":"m","max_tokens":4,"messages":{"role":"user","content":"hi"}}`},
		{"messages a string", `{"model":"m","max_tokens":4,"messages":"hi"}`},
		{"message without content", `{"model":"m","max_tokens":4,"messages":[{"role":"system"},{"role":"user","content":null}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := client.Post(gw+"/v1/chat/completions", "application/json", strings.NewReader(c.body))
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatalf("%s, body cut: %v", resp.Status, err)
			}
			// The simulators answer these with a 2xx or a 400 of their
			// own (their error rate is 0), so any 5xx is the gateway's.
			if resp.StatusCode >= 500 {
				t.Errorf("%s from the gateway (backend %q): %.300s", resp.Status, resp.Header.Get("X-Vigil-Backend"), b)
			}
			t.Logf("%s (backend %q): %.120s", resp.Status, resp.Header.Get("X-Vigil-Backend"), b)
		})
	}
	a, err := stream(t.Context(), gw, chatBody(tenantPrompt(seed, 0), "still there?", true))
	if err != nil {
		t.Fatalf("a normal request after the bad ones: %v", err)
	}
	if a.cached == 0 {
		t.Errorf("a normal request of tenant 1 after the bad ones went to %s and found nothing cached (prompt %d tokens): was the index lost?",
			a.backend, a.prompt)
	}
}
