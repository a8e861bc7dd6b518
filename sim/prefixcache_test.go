package sim

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// cachingKnobs turns the prefix cache on with blocks of 4 tokens (16
// characters), small enough for short test prompts.
func cachingKnobs(blocks int) Knobs {
	k := DefaultKnobs()
	k.PrefixCacheBlocks, k.BlockSize, k.OutputTokens = blocks, 4, 2
	return k
}

// chatBody is a chat request with a system and a user message.
func chatBody(system, user string) string {
	return fmt.Sprintf(`{"messages":[{"role":"system","content":%q},{"role":"user","content":%q}],"max_tokens":1}`, system, user)
}

type chatUsage struct {
	Model string `json:"model"`
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// postChat sends body to /v1/chat/completions and returns the prompt
// tokens and cached tokens it reports (-1 when it reports no details).
func postChat(t *testing.T, url, body string) (prompt, cached int) {
	t.Helper()
	status, _, b := testutil.Post(t, url+"/v1/chat/completions", body)
	if status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, b)
	}
	u := decode[chatUsage](t, b).Usage
	if u.PromptTokensDetails == nil {
		return u.PromptTokens, -1
	}
	return u.PromptTokens, u.PromptTokensDetails.CachedTokens
}

// TestPrefixCacheSharedPrefix: a second request sharing a system prompt
// reuses the full blocks of the shared text; an identical one reuses all
// but the block of its last token; a different first message reuses
// nothing; the field is there, 0, on a first request.
func TestPrefixCacheSharedPrefix(t *testing.T) {
	_, ts := newTestServer(t, cachingKnobs(1024))
	system := strings.Repeat("You are terse. ", 7) // 105 characters: 6 whole blocks of 16
	if p, c := postChat(t, ts.URL, chatBody(system, "What is a KV cache?")); c != 0 || p != (105+19+3)/4 {
		t.Errorf("first request: prompt %d cached %d, want 31 and 0", p, c)
	}
	// The shared text is 105 characters (and "W"): 6 blocks of 16.
	if _, c := postChat(t, ts.URL, chatBody(system, "Why is the sky blue?")); c != 6*4 {
		t.Errorf("shared system prompt: cached %d, want 24", c)
	}
	// 64 characters are 16 tokens, 4 whole blocks, all cached: vLLM
	// computes the last token, so the last block is computed again.
	exact := chatBody(strings.Repeat("a", 48), strings.Repeat("b", 16))
	postChat(t, ts.URL, exact)
	if p, c := postChat(t, ts.URL, exact); p != 16 || c != 12 {
		t.Errorf("identical 16-token prompt: prompt %d cached %d, want 16 and 12", p, c)
	}
	// One more character: the last token is in a partial block, and the
	// four full blocks are all reused.
	longer := chatBody(strings.Repeat("a", 48), strings.Repeat("b", 17))
	if p, c := postChat(t, ts.URL, longer); p != 17 || c != 16 {
		t.Errorf("17-token prompt over a cached 16: prompt %d cached %d, want 17 and 16", p, c)
	}
	// A block's hash covers what comes before it: the cached prompt's
	// fourth block, sent first, is another block.
	if _, c := postChat(t, ts.URL, chatBody(strings.Repeat("b", 16), strings.Repeat("c", 17))); c != 0 {
		t.Errorf("a cached block's text at another position: cached %d, want 0", c)
	}
	// A changed first message changes every block after it.
	if _, c := postChat(t, ts.URL, chatBody("X"+system[1:], "Why is the sky blue?")); c != 0 {
		t.Errorf("changed first message: cached %d, want 0", c)
	}
}

// TestPrefixCacheOffUnchanged: with prefix_cache_blocks 0 the usage has no
// prompt_tokens_details, whatever was sent before.
func TestPrefixCacheOffUnchanged(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	body := chatBody(strings.Repeat("x", 80), "y")
	postChat(t, ts.URL, body)
	if _, c := postChat(t, ts.URL, body); c != -1 {
		t.Errorf("caching off: cached_tokens %d, want no prompt_tokens_details", c)
	}
}

// TestPrefixCacheLRU: the cache never holds more than its capacity, and
// evicts the least recently used blocks first.
func TestPrefixCacheLRU(t *testing.T) {
	const capacity = 8
	c := newPrefixCache()
	c.syncLocked(capacity, 4)
	prompt := func(i int) promptText { return promptText{text: fmt.Sprintf("%-32d", i)} } // 8 tokens, 2 blocks
	for i := range 50 {
		c.lookup(0, prompt(i), 8, true)
		if n := len(c.blocks); n > capacity || c.held.Load() != int64(n) {
			t.Fatalf("after prompt %d: %d blocks (held %d), capacity %d", i, n, c.held.Load(), capacity)
		}
	}
	// The last four prompts fill the cache; the one before was evicted.
	// Their lookups touch them, so look the newest up first.
	for i := 49; i >= 46; i-- {
		if got := c.lookup(0, promptText{text: fmt.Sprintf("%-32d", i) + "z"}, 9, true); got != 8 {
			t.Errorf("prompt %d: cached %d, want 8 (still held)", i, got)
		}
	}
	if got := c.lookup(0, promptText{text: fmt.Sprintf("%-32d", 45) + "z"}, 9, true); got != 0 {
		t.Errorf("prompt 45: cached %d, want 0 (evicted)", got)
	}

	// A prompt longer than the cache keeps its first blocks, which any
	// prompt sharing its start needs, not its last.
	c.reset()
	long := promptText{text: strings.Repeat("0123456789abcdef", 20)} // 80 tokens, 20 blocks
	c.lookup(0, long, 80, true)
	if got := c.lookup(0, long, 80, true); got != capacity*4 {
		t.Errorf("a 20-block prompt in an 8-block cache: cached %d, want %d", got, capacity*4)
	}

	// Eviction takes a prompt's last blocks before its first ones.
	small := newPrefixCache()
	small.syncLocked(4, 4)
	p := promptText{text: strings.Repeat("0123456789abcdef", 4) + "+"} // 17 tokens, 4 blocks
	small.lookup(0, p, 17, true)
	small.lookup(0, promptText{text: strings.Repeat("z", 16)}, 4, true) // evicts one block
	if got := small.lookup(0, p, 17, true); got != 12 {
		t.Errorf("a 4-block prompt after one eviction: cached %d, want 12 (its first 3 blocks)", got)
	}

	// Through the server: usage on /metrics stays within 1.
	s, ts := newTestServer(t, cachingKnobs(capacity))
	for i := range 20 {
		postChat(t, ts.URL, chatBody(fmt.Sprintf("%-40d", i), "q"))
		if n := s.cache.held.Load(); n > capacity {
			t.Fatalf("after request %d: %d blocks held, capacity %d", i, n, capacity)
		}
	}
	if got := metricValue(t, ts.URL, "vllm:kv_cache_usage_perc"); got != 1 {
		t.Errorf("vllm:kv_cache_usage_perc with a full cache = %v, want 1", got)
	}
}

// metricValue reads the value of the first series of name on /metrics.
func metricValue(t *testing.T, url, name string) float64 {
	t.Helper()
	_, body := testutil.Get(t, url+"/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+"{"); ok {
			_, v, _ := strings.Cut(rest, "} ")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", name, line)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s:\n%s", name, body)
	return 0
}

// TestPrefixCacheMetrics: queries count every prompt token looked up,
// hits the cached ones; a prompt_logprobs request neither reads nor
// counts, but its blocks are cached.
func TestPrefixCacheMetrics(t *testing.T) {
	_, ts := newTestServer(t, cachingKnobs(1024))
	body := chatBody(strings.Repeat("m", 60), "abcd") // 16 tokens
	postChat(t, ts.URL, body)
	postChat(t, ts.URL, body)
	if q, h := metricValue(t, ts.URL, "vllm:prefix_cache_queries_total"), metricValue(t, ts.URL, "vllm:prefix_cache_hits_total"); q != 32 || h != 12 {
		t.Errorf("queries %v hits %v, want 32 and 12", q, h)
	}
	// prompt_logprobs: computed whole, not counted, yet cached for others.
	withLogprobs := strings.Replace(chatBody(strings.Repeat("p", 60), "abcd"), `"max_tokens":1`, `"max_tokens":1,"prompt_logprobs":0`, 1)
	if _, c := postChat(t, ts.URL, withLogprobs); c != 0 {
		t.Errorf("prompt_logprobs request: cached %d, want 0", c)
	}
	if q := metricValue(t, ts.URL, "vllm:prefix_cache_queries_total"); q != 32 {
		t.Errorf("queries after a prompt_logprobs request = %v, want 32 (not counted)", q)
	}
	if _, c := postChat(t, ts.URL, chatBody(strings.Repeat("p", 60), "abcd")); c != 12 {
		t.Errorf("after a prompt_logprobs request of the same prompt: cached %d, want 12", c)
	}
}

// TestPrefixCacheTTFT: the first token waits ttft plus prefill_per_token
// for every uncached prompt token, in the request's max_num_seqs slot, so
// a request queued behind it waits for its prefill too. Synctest's clock
// makes the delays exact.
func TestPrefixCacheTTFT(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := cachingKnobs(1024)
		k.TTFT, k.PrefillPerToken, k.MaxNumSeqs = 10*time.Millisecond, time.Millisecond, 1
		s := New(Options{Seed: 42, Created: testCreated, Knobs: k})
		n := &testutil.Network{}
		url := n.Serve(t, s.Handler())
		client := n.Client()
		post := func(body string) time.Duration {
			start := time.Now()
			resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("POST: %v", err)
				return 0
			}
			resp.Body.Close()
			return time.Since(start)
		}
		body := chatBody(strings.Repeat("t", 240), "0123456789abcdef") // 64 tokens
		if got, want := post(body), 10*time.Millisecond+64*time.Millisecond; got != want {
			t.Errorf("cold 64-token prompt: %v, want %v", got, want)
		}
		// 60 tokens cached (the last block is computed): 4 to prefill.
		if got, want := post(body), 10*time.Millisecond+4*time.Millisecond; got != want {
			t.Errorf("warm 64-token prompt: %v, want %v", got, want)
		}

		// Two cold requests at once on one slot: the second waits for the
		// first one's prefill.
		var wg sync.WaitGroup
		times := make([]time.Duration, 2)
		for i := range 2 {
			wg.Go(func() { times[i] = post(chatBody(strings.Repeat(string(rune('a'+i)), 240), "0123456789abcdef")) })
			synctest.Wait() // the first holds the slot before the second arrives
		}
		wg.Wait()
		if want := 74 * time.Millisecond; times[0] != want || times[1] != 2*want {
			t.Errorf("two cold requests on one slot: %v, want %v and %v", times, want, 2*want)
		}
	})
	if got := prefillTime(time.Hour, 1<<40); got != time.Duration(1<<63-1) {
		t.Errorf("prefillTime saturates: got %v", got)
	}
}

// TestPrefixCacheKnobs: capacity and block size change at run time (a
// smaller capacity evicts, another block size empties the cache), 0 turns
// caching off, and POST /sim/cache/reset empties it.
func TestPrefixCacheKnobs(t *testing.T) {
	s, ts := newTestServer(t, cachingKnobs(100))
	for i := range 10 {
		postChat(t, ts.URL, chatBody(fmt.Sprintf("%-64d", i), "")) // 4 blocks each
	}
	if n := s.cache.held.Load(); n != 40 {
		t.Fatalf("%d blocks held, want 40", n)
	}
	if status, _, b := testutil.Post(t, ts.URL+"/sim/knobs", `{"prefix_cache_blocks":12}`); status != http.StatusOK {
		t.Fatalf("POST /sim/knobs: %d %s", status, b)
	}
	if n := s.cache.held.Load(); n != 12 {
		t.Errorf("after capacity 12: %d blocks held", n)
	}
	// The newest prompt stays, whole.
	if _, c := postChat(t, ts.URL, chatBody(fmt.Sprintf("%-64d", 9), "x")); c != 16 {
		t.Errorf("newest prompt after shrinking: cached %d, want 16", c)
	}
	testutil.Post(t, ts.URL+"/sim/knobs", `{"block_size":8}`)
	if n := s.cache.held.Load(); n != 0 {
		t.Errorf("after a block size change: %d blocks held, want 0", n)
	}
	body := chatBody(strings.Repeat("k", 64), "x") // 17 tokens: 2 blocks of 8
	postChat(t, ts.URL, body)
	if _, c := postChat(t, ts.URL, body); c != 16 {
		t.Errorf("blocks of 8: cached %d, want 16", c)
	}
	if status, _, _ := testutil.Post(t, ts.URL+"/sim/cache/reset", ``); status != http.StatusOK {
		t.Errorf("POST /sim/cache/reset: %d", status)
	}
	if _, c := postChat(t, ts.URL, body); c != 0 {
		t.Errorf("after /sim/cache/reset: cached %d, want 0", c)
	}
	testutil.Post(t, ts.URL+"/sim/knobs", `{"prefix_cache_blocks":0}`)
	if _, c := postChat(t, ts.URL, body); c != -1 || s.cache.held.Load() != 0 {
		t.Errorf("caching off: cached %d, %d blocks held; want no details and none", c, s.cache.held.Load())
	}
}

// TestPrefixCacheResponsesAndMessages: the Responses API reports cached
// tokens in input_tokens_details, the Messages API in
// cache_read_input_tokens with input_tokens the uncached rest.
func TestPrefixCacheResponsesAndMessages(t *testing.T) {
	_, ts := newTestServer(t, cachingKnobs(1024))
	instructions := strings.Repeat("i", 64)
	for i, want := range []int{0, 16} {
		status, _, b := testutil.Post(t, ts.URL+"/v1/responses",
			fmt.Sprintf(`{"instructions":%q,"input":"question %d","max_output_tokens":1,"store":false}`, instructions, i))
		if status != http.StatusOK {
			t.Fatalf("responses: %d %s", status, b)
		}
		u := decode[struct {
			Usage struct {
				InputTokens        int `json:"input_tokens"`
				InputTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"input_tokens_details"`
			} `json:"usage"`
		}](t, b).Usage
		if u.InputTokensDetails.CachedTokens != want || u.InputTokens != 19 {
			t.Errorf("responses request %d: input %d cached %d, want 19 and %d", i, u.InputTokens, u.InputTokensDetails.CachedTokens, want)
		}
	}
	for i, want := range []int{0, 16} {
		status, _, b := testutil.Post(t, ts.URL+"/v1/messages",
			fmt.Sprintf(`{"model":"sim-model","max_tokens":1,"system":%q,"messages":[{"role":"user","content":"question %d"}]}`, strings.Repeat("s", 64), i))
		if status != http.StatusOK {
			t.Fatalf("messages: %d %s", status, b)
		}
		u := decode[struct {
			Usage struct {
				InputTokens   int  `json:"input_tokens"`
				CacheRead     *int `json:"cache_read_input_tokens"`
				CacheCreation *int `json:"cache_creation_input_tokens"`
			} `json:"usage"`
		}](t, b).Usage
		if u.CacheRead == nil || u.CacheCreation == nil || *u.CacheRead != want || *u.CacheCreation != 0 || u.InputTokens+*u.CacheRead != 19 {
			t.Errorf("messages request %d: %s, want cache_read_input_tokens %d, cache_creation_input_tokens 0, input_tokens %d", i, b, want, 19-want)
		}
	}
	// Streamed, message_start carries the same usage.
	status, _, b := testutil.Post(t, ts.URL+"/v1/messages",
		fmt.Sprintf(`{"model":"sim-model","max_tokens":1,"stream":true,"system":%q,"messages":[{"role":"user","content":"question 0"}]}`, strings.Repeat("s", 64)))
	if status != http.StatusOK || !strings.Contains(string(b), `"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":16,"output_tokens":0}`) {
		t.Errorf("streamed messages: %d %s", status, b)
	}
}

// TestLoRAModules: /v1/models lists the adapters after the base model, as
// vLLM does; requests may name them and are answered under their name,
// with cache blocks apart from the base model's; other names are 404.
func TestLoRAModules(t *testing.T) {
	s := New(Options{Model: "base", Seed: 42, Created: testCreated, Knobs: cachingKnobs(1024), LoRAModules: []string{"sql-lora", "", "sql-lora", "chat-lora"}})
	ts := newServerFor(t, s)
	_, b := testutil.Get(t, ts.URL+"/v1/models")
	models := decode[struct {
		Data []struct {
			ID          string  `json:"id"`
			Root        string  `json:"root"`
			Parent      *string `json:"parent"`
			MaxModelLen *int    `json:"max_model_len"`
			Permission  []any   `json:"permission"`
		} `json:"data"`
	}](t, b).Data
	if len(models) != 3 || models[0].ID != "base" || models[0].Parent != nil {
		t.Fatalf("/v1/models: %s", b)
	}
	for i, name := range []string{"sql-lora", "chat-lora"} {
		m := models[i+1]
		if m.ID != name || m.Parent == nil || *m.Parent != "base" || m.Root != "/adapters/"+name || m.MaxModelLen != nil || len(m.Permission) != 1 {
			t.Errorf("adapter %d: %+v, want %s with parent base", i, m, name)
		}
	}

	withModel := func(model string) string {
		return strings.Replace(chatBody(strings.Repeat("l", 64), "x"), `{`, `{"model":"`+model+`",`, 1)
	}
	postChat(t, ts.URL, withModel("base"))
	status, _, b := testutil.Post(t, ts.URL+"/v1/chat/completions", withModel("sql-lora"))
	got := decode[chatUsage](t, b)
	if status != http.StatusOK || got.Model != "sql-lora" || got.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("adapter request after the base model's: %d %s, want model sql-lora, 0 cached", status, b)
	}
	if _, c := postChat(t, ts.URL, withModel("sql-lora")); c != 16 {
		t.Errorf("adapter's second request: cached %d, want 16", c)
	}
	status, _, b = testutil.Post(t, ts.URL+"/v1/messages", `{"model":"chat-lora","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	if status != http.StatusOK || !strings.Contains(string(b), `"model":"chat-lora"`) {
		t.Errorf("messages naming an adapter: %d %s", status, b)
	}
	status, _, b = testutil.Post(t, ts.URL+"/v1/chat/completions", withModel("other-lora"))
	if status != http.StatusNotFound || !strings.Contains(string(b), "The model `other-lora` does not exist.") {
		t.Errorf("unknown model: %d %s", status, b)
	}
}
