package sim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

func TestDeterminism(t *testing.T) {
	requests := []struct{ path, body string }{
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Why is the sky blue?"}],"max_tokens":8,"logprobs":true,"top_logprobs":3,"prompt_logprobs":2}`},
		{"/v1/chat/completions", `{"messages":[{"role":"user","content":"Why is the sky blue?"}],"max_tokens":8,"stream":true,"stream_options":{"include_usage":true},"logprobs":true}`},
		{"/v1/completions", `{"prompt":["Why is the sky blue?","Why not?"],"n":2,"max_tokens":5,"logprobs":2}`},
		{"/v1/completions", `{"prompt":"Why is the sky blue?","max_tokens":5,"stream":true}`},
		{"/v1/embeddings", `{"input":["Why is the sky blue?","Why not?"]}`},
		{"/generate", `{"inputs":"Why is the sky blue?","parameters":{"details":true,"top_n_tokens":2,"decoder_input_details":true}}`},
		{"/generate_stream", `{"inputs":"Why is the sky blue?","parameters":{"details":true,"max_new_tokens":4}}`},
	}
	k := DefaultKnobs()
	k.Noise = 0.2
	_, a := newTestServer(t, k)
	_, b := newTestServer(t, k) // another server, same seed
	other := newServerFor(t, New(Options{Seed: 43, Created: testCreated, Knobs: k}))
	for _, r := range requests {
		t.Run(r.path, func(t *testing.T) {
			_, _, first := testutil.Post(t, a.URL+r.path, r.body)
			_, _, again := testutil.Post(t, a.URL+r.path, r.body)
			_, _, elsewhere := testutil.Post(t, b.URL+r.path, r.body)
			if diff := cmp.Diff(string(first), string(again)); diff != "" {
				t.Errorf("same request, different bytes (-first +again):\n%s", diff)
			}
			if diff := cmp.Diff(string(first), string(elsewhere)); diff != "" {
				t.Errorf("same seed, different bytes (-a +b):\n%s", diff)
			}
			if _, _, seeded := testutil.Post(t, other.URL+r.path, r.body); bytes.Equal(first, seeded) {
				t.Errorf("seed 43 answered as seed 42")
			}
		})
	}
}

// TestNoiseKeepsTokens: backends that differ only by Noise generate the
// same tokens with different logprobs, as a quantized model and its
// reference would, which is what precision divergence compares.
func TestNoiseKeepsTokens(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"Compare the two."}],"max_tokens":50,"logprobs":true,"top_logprobs":5}`
	_, ref := newTestServer(t, DefaultKnobs())
	noisy := DefaultKnobs()
	noisy.Noise = 0.3
	_, quant := newTestServer(t, noisy)
	_, _, rb := testutil.Post(t, ref.URL+"/v1/chat/completions", body)
	_, _, qb := testutil.Post(t, quant.URL+"/v1/chat/completions", body)
	r, q := decode[wireChat](t, rb).Choices[0], decode[wireChat](t, qb).Choices[0]
	if r.Message.Content != q.Message.Content {
		t.Fatalf("noise changed the text:\n%q\n%q", r.Message.Content, q.Message.Content)
	}
	var delta float64
	for i, c := range q.Logprobs.Content {
		delta += math.Abs(r.Logprobs.Content[i].Logprob - c.Logprob)
		// Noise keeps a distribution: the listed tokens never hold more
		// than all the probability there is.
		mass := 0.0
		for _, a := range c.TopLogprobs {
			mass += math.Exp(a.Logprob)
		}
		if mass > 1+1e-9 {
			t.Fatalf("token %d: the top %d hold probability %v", i, len(c.TopLogprobs), mass)
		}
	}
	// The listed tokens move together back to their total probability, so
	// a dominant token's logprob moves by about its rivals' share of the
	// noise: here about 0.05 on average, against 0 without noise.
	if mean := delta / 50; mean < 0.02 {
		t.Errorf("mean |logprob delta| = %v with noise 0.3", mean)
	}
}

func meanLogprob(t *testing.T, url string) float64 {
	t.Helper()
	var sum float64
	n := 0
	for i := range 20 {
		_, _, body := testutil.Post(t, url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"prompt `+strconv.Itoa(i)+`"}],"max_tokens":20,"logprobs":true}`)
		for _, lp := range decode[wireChat](t, body).Choices[0].Logprobs.Content {
			sum += lp.Logprob
			n++
		}
	}
	return sum / float64(n)
}

func TestKnobsChangeLogprobs(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	// 400 tokens each. At confidence 0.8 the mean logprob is about -0.24,
	// at 0.3 about -1.3; the thresholds sit far from both.
	high := meanLogprob(t, ts.URL)
	if high < -0.35 || high > -0.15 {
		t.Errorf("mean logprob at confidence 0.8 = %v, want about -0.24", high)
	}
	status, _, body := testutil.Post(t, ts.URL+"/sim/knobs", `{"confidence":0.3}`)
	if status != http.StatusOK {
		t.Fatalf("POST /sim/knobs: %d %s", status, body)
	}
	low := meanLogprob(t, ts.URL)
	if low > -1.0 {
		t.Errorf("mean logprob at confidence 0.3 = %v, want about -1.3 (was %v at 0.8)", low, high)
	}

	testutil.Post(t, ts.URL+"/sim/knobs", `{"confidence":1}`)
	if got := meanLogprob(t, ts.URL); got != 0 {
		t.Errorf("mean logprob at confidence 1 = %v, want 0", got)
	}
	// A certain model stays certain under noise: its logits' noise cannot
	// move a token that holds all the probability.
	testutil.Post(t, ts.URL+"/sim/knobs", `{"noise":0.5}`)
	if got := meanLogprob(t, ts.URL); got < -1e-6 {
		t.Errorf("mean logprob at confidence 1 with noise 0.5 = %v, want 0", got)
	}
	// A less certain one loses some confidence.
	testutil.Post(t, ts.URL+"/sim/knobs", `{"confidence":0.8,"noise":0}`)
	clean := meanLogprob(t, ts.URL)
	testutil.Post(t, ts.URL+"/sim/knobs", `{"noise":1}`)
	if got := meanLogprob(t, ts.URL); got > clean-0.05 {
		t.Errorf("mean logprob at confidence 0.8 with noise 1 = %v, without %v: want clearly lower", got, clean)
	}
}

func TestKnobsAPI(t *testing.T) {
	s, ts := newTestServer(t, DefaultKnobs())
	status, body := testutil.Get(t, ts.URL+"/sim/knobs")
	want := `{"ttft":"0s","prefill_per_token":"0s","itl":"0s","stall":"0s","stall_after":0,"error_rate":0,"hang":false,"max_model_len":0,"confidence":0.8,"noise":0,"output_tokens":32,"max_num_seqs":64,"extra_waiting":0,"kv_cache_usage":0,"prefix_cache_blocks":0,"block_size":16}`
	if status != http.StatusOK || string(body) != want {
		t.Errorf("GET /sim/knobs: %d %s", status, body)
	}

	for _, method := range []string{http.MethodPost, http.MethodPatch} {
		req, _ := http.NewRequest(method, ts.URL+"/sim/knobs", strings.NewReader(`{"ttft":"50ms","itl":12.5,"error_rate":0.1}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", method, resp.StatusCode)
		}
	}
	wantKnobs := DefaultKnobs()
	wantKnobs.TTFT, wantKnobs.ITL, wantKnobs.ErrorRate = 50*time.Millisecond, 12500*time.Microsecond, 0.1
	if diff := cmp.Diff(wantKnobs, s.Knobs()); diff != "" {
		t.Errorf("knobs after partial update (-want +got):\n%s", diff)
	}

	tests := []struct{ body, message string }{
		{`{"error_rate":1.5}`, "error_rate: must be in [0, 1], got 1.5"},
		{`{"confidence":0}`, "confidence: must be in (0, 1], got 0"},
		{`{"ttft":"-1s"}`, "ttft: must not be negative, got -1s"},
		{`{"itl":"fast"}`, `itl: want a Go duration such as "50ms" or a number of milliseconds, got "fast"`},
		{`{"max_num_seqs":0,"output_tokens":0}`, "output_tokens: must be in [1, 65536], got 0\nmax_num_seqs: must be at least 1, got 0"},
		{`{"noise":"x"}`, "noise: expected a number, got JSON string"},
		{`{"temperature":1}`, "temperature: unknown knob"},
		{`[]`, "knobs: expected a JSON object"},
		{`{"stall":"-2s","stall_after":-1}`, "stall: must not be negative, got -2s\nstall_after: must not be negative, got -1"},
		{`{"stall":"soon"}`, `stall: want a Go duration such as "50ms" or a number of milliseconds, got "soon"`},
		{`{"stall_after":"3"}`, "stall_after: expected an integer, got JSON string"},
		{`{"extra_waiting":-1,"kv_cache_usage":2}`, "extra_waiting: must not be negative, got -1\nkv_cache_usage: must be in [0, 1] (0 means measured), got 2"},
		{`{"prefill_per_token":"-1ms","prefix_cache_blocks":-1,"block_size":0}`, "prefill_per_token: must not be negative, got -1ms\nprefix_cache_blocks: must be in [0, 1048576] (0 means no prefix caching), got -1\nblock_size: must be in [1, 4096], got 0"},
		{`{"prefill_per_token":"slow"}`, `prefill_per_token: want a Go duration such as "50ms" or a number of milliseconds, got "slow"`},
		{`{"block_size":"16"}`, "block_size: expected an integer, got JSON string"},
		{`{"prefix_cache_blocks":1048577}`, "prefix_cache_blocks: must be in [0, 1048576] (0 means no prefix caching), got 1048577"},
	}
	for _, tt := range tests {
		status, _, body := testutil.Post(t, ts.URL+"/sim/knobs", tt.body)
		got := decode[struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}](t, body)
		if status != http.StatusBadRequest || got.Error.Message != tt.message {
			t.Errorf("POST %s: %d %q, want 400 %q", tt.body, status, got.Error.Message, tt.message)
		}
	}
	if diff := cmp.Diff(wantKnobs, s.Knobs()); diff != "" {
		t.Errorf("a refused update changed the knobs (-want +got):\n%s", diff)
	}
}

func TestKnobsJSONRoundTrip(t *testing.T) {
	k := Knobs{TTFT: 80 * time.Millisecond, ITL: 15 * time.Millisecond, Stall: 1500 * time.Millisecond, StallAfter: 12,
		ErrorRate: 0.05, MaxModelLen: 8192,
		Confidence: 0.7, Noise: 0.1, OutputTokens: 64, MaxNumSeqs: 16, ExtraWaiting: 3, KVCacheUsage: 0.25,
		PrefillPerToken: 250 * time.Microsecond, PrefixCacheBlocks: 4096, BlockSize: 32}
	b, err := k.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var got Knobs
	if err := got.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	if err := k.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestNewAndSetKnobsDefaults(t *testing.T) {
	s := New(Options{})
	if diff := cmp.Diff(DefaultKnobs(), s.Knobs()); diff != "" {
		t.Errorf("zero Options (-want +got):\n%s", diff)
	}
	s.SetKnobs(Knobs{ErrorRate: 7, Confidence: -1, TTFT: -time.Second, Noise: math.NaN(), Stall: -time.Second, StallAfter: -3})
	want := DefaultKnobs()
	want.ErrorRate, want.Confidence = 1, 1e-6
	if diff := cmp.Diff(want, s.Knobs()); diff != "" {
		t.Errorf("SetKnobs clamps (-want +got):\n%s", diff)
	}
}

var gaugeRE = regexp.MustCompile(`(?m)^(vllm:[a-z_]+)\{model_name="sim-model"\} (\S+)$`)

func gauges(t *testing.T, url string) map[string]float64 {
	t.Helper()
	_, body := testutil.Get(t, url+"/metrics")
	out := map[string]float64{}
	for _, m := range gaugeRE.FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("metric %q: %v", m[0], err)
		}
		out[m[1]] = v
	}
	return out
}

// openStream starts a streaming request and returns once its first event
// arrived, with a reader for the rest.
func openStream(t *testing.T, ctx context.Context, url, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	return resp, r
}

func TestMetricsReflectLoad(t *testing.T) {
	s, ts := newTestServer(t, Knobs{ITL: 20 * time.Millisecond, MaxNumSeqs: 1})
	if g := gauges(t, ts.URL); g["vllm:num_requests_running"] != 0 || g["vllm:kv_cache_usage_perc"] != 0 {
		t.Fatalf("idle gauges: %v", g)
	}
	// 400 characters: 100 prompt tokens; 50 tokens at 20ms keep it running
	// for a second.
	body := `{"messages":[{"role":"user","content":"` + strings.Repeat("abcd", 100) + `"}],"max_tokens":50,"stream":true}`
	resp, _ := openStream(t, context.Background(), ts.URL+"/v1/chat/completions", body)

	g := gauges(t, ts.URL)
	if g["vllm:num_requests_running"] != 1 {
		t.Errorf("running = %v during a stream, want 1", g["vllm:num_requests_running"])
	}
	// The cache holds the prompt and the tokens so far (the first token may
	// be sent a moment before it is counted).
	if kv := g["vllm:kv_cache_usage_perc"]; kv < 100.0/kvCacheTokens || kv > 151.0/kvCacheTokens {
		t.Errorf("kv_cache_usage_perc = %v, want between 100 and 151 tokens of %d", kv, kvCacheTokens)
	}

	// A second request waits behind max_num_seqs=1.
	done := make(chan int)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":1}`))
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	testutil.WaitFor(t, "a waiting request", func() bool { return s.Stats().Waiting == 1 })
	if g := gauges(t, ts.URL); g["vllm:num_requests_waiting"] != 1 {
		t.Errorf("waiting gauge = %v, want 1", g["vllm:num_requests_waiting"])
	}
	// Raising max_num_seqs admits it at once.
	testutil.Post(t, ts.URL+"/sim/knobs", `{"max_num_seqs":2}`)
	if status := <-done; status != http.StatusOK {
		t.Errorf("queued request: status %d", status)
	}

	// Hanging up ends the stream and frees its slot and cache.
	resp.Body.Close()
	testutil.WaitFor(t, "an idle server", func() bool { return s.Stats().Running == 0 })
	if g := gauges(t, ts.URL); g["vllm:num_requests_running"] != 0 || g["vllm:num_requests_waiting"] != 0 || g["vllm:kv_cache_usage_perc"] != 0 {
		t.Errorf("gauges after the load: %v", g)
	}

	// The load knobs set what a balancer reads without real requests.
	testutil.Post(t, ts.URL+"/sim/knobs", `{"extra_waiting":12,"kv_cache_usage":0.75}`)
	g = gauges(t, ts.URL)
	if g["vllm:num_requests_waiting"] != 12 || g["vllm:kv_cache_usage_perc"] != 0.75 || g["vllm:gpu_cache_usage_perc"] != 0.75 {
		t.Errorf("gauges with extra_waiting 12, kv_cache_usage 0.75: %v", g)
	}
}

func TestCancellation(t *testing.T) {
	tests := []struct {
		name, path, body string
		stream           bool
	}{
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":100,"stream":true}`, true},
		{"completions stream", "/v1/completions", `{"prompt":"x","max_tokens":100,"stream":true}`, true},
		{"generate_stream", "/generate_stream", `{"inputs":"x","parameters":{"max_new_tokens":100}}`, true},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":100}`, false},
		{"generate", "/generate", `{"inputs":"x","parameters":{"max_new_tokens":100}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newTestServer(t, Knobs{ITL: 10 * time.Millisecond})
			ctx, cancel := context.WithCancel(context.Background())
			if tt.stream {
				resp, _ := openStream(t, ctx, ts.URL+tt.path, tt.body)
				defer resp.Body.Close()
				cancel()
			} else {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+tt.path, strings.NewReader(tt.body))
				errc := make(chan error, 1)
				go func() {
					_, err := http.DefaultClient.Do(req)
					errc <- err
				}()
				testutil.WaitFor(t, "a running request", func() bool { return s.Stats().Running == 1 })
				cancel()
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Errorf("client error %v, want context.Canceled", err)
				}
			}
			testutil.WaitFor(t, "the cancellation", func() bool { return s.Stats().Cancelled == 1 })
			testutil.WaitFor(t, "the slot back", func() bool { return s.Stats().Running == 0 })
			if got := s.Stats(); got.Requests != 1 || got.Errors != 0 || got.Waiting != 0 {
				t.Errorf("stats %+v", got)
			}
		})
	}
}

func TestCancelWhileWaiting(t *testing.T) {
	s, ts := newTestServer(t, Knobs{TTFT: time.Second, MaxNumSeqs: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := `{"prompt":"x","max_tokens":1}`
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testutil.WaitFor(t, "the first request running", func() bool { return s.Stats().Running == 1 })
	waitCtx, cancelWait := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(waitCtx, http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(body))
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testutil.WaitFor(t, "the second request waiting", func() bool { return s.Stats().Waiting == 1 })
	cancelWait()
	testutil.WaitFor(t, "the waiting request cancelled", func() bool {
		st := s.Stats()
		return st.Cancelled == 1 && st.Waiting == 0
	})
	cancel()
	testutil.WaitFor(t, "an idle server", func() bool { return s.Stats().Running == 0 })
}

func TestLatency(t *testing.T) {
	const ttft, itl = 40 * time.Millisecond, 10 * time.Millisecond
	_, ts := newTestServer(t, Knobs{TTFT: ttft, ITL: itl})
	start := time.Now()
	resp, rest := openStream(t, context.Background(), ts.URL+"/v1/chat/completions",
		`{"messages":[{"role":"user","content":"x"}],"max_tokens":5,"stream":true}`)
	defer resp.Body.Close()
	if got := time.Since(start); got < ttft {
		t.Errorf("first event after %v, want at least TTFT %v", got, ttft)
	}
	for {
		if _, err := rest.ReadString('\n'); err != nil {
			break
		}
	}
	if got, want := time.Since(start), ttft+4*itl; got < want {
		t.Errorf("stream took %v, want at least TTFT + 4 ITL = %v", got, want)
	}

	start = time.Now()
	testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":5}`)
	if got, want := time.Since(start), ttft+4*itl; got < want {
		t.Errorf("non-streaming took %v, want at least %v", got, want)
	}
}

func TestConcurrentLoad(t *testing.T) {
	s, ts := newTestServer(t, Knobs{ITL: time.Millisecond, MaxNumSeqs: 4})
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			path, body := "/v1/chat/completions", `{"messages":[{"role":"user","content":"q`+strconv.Itoa(i)+`"}],"max_tokens":5,"stream":true}`
			if i%2 == 1 {
				path, body = "/generate", `{"inputs":"q`+strconv.Itoa(i)+`","parameters":{"max_new_tokens":5}}`
			}
			resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
		if i == 16 {
			s.SetKnobs(Knobs{ITL: time.Millisecond, MaxNumSeqs: 2})
		}
	}
	wg.Wait()
	if got := s.Stats(); got != (Stats{Requests: 32}) {
		t.Errorf("stats after the load: %+v", got)
	}
}

func TestStatsEndpoint(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
	testutil.Post(t, ts.URL+"/v1/completions", `{}`)
	_, body := testutil.Get(t, ts.URL+"/sim/stats")
	if want := `{"requests":2,"running":0,"waiting":0,"cancelled":0,"errors":1,"hanging":0}`; string(body) != want {
		t.Errorf("GET /sim/stats = %s, want %s", body, want)
	}
}

func TestVocabularyUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range vocab {
		if seen[w] {
			t.Errorf("%q twice: legacy top_logprobs are keyed by token text", w)
		}
		seen[w] = true
	}
}

// FuzzHandlers feeds arbitrary bodies to every POST route: no panic, and
// an answer in the route's format.
func FuzzHandlers(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"logprobs":true,"top_logprobs":2,"prompt_logprobs":1,"n":2}`,
		`{"prompt":[[1,2],[3]],"max_tokens":2,"logprobs":3,"prompt_logprobs":2}`,
		`{"input":["a",""],"encoding_format":"base64","dimensions":3}`,
		`{"inputs":"x","parameters":{"max_new_tokens":2,"details":true,"top_n_tokens":5,"decoder_input_details":true}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"\u00e9\u4e16"}]}],"stream":true,"stream_options":{}}`,
		`{"prompt":"` + "\xff\xfe" + `"}`, `null`, `[]`, `{"max_tokens":-1}`, `{"n":1e9}`,
	} {
		f.Add(seed)
	}
	s := New(Options{Knobs: Knobs{MaxModelLen: 64, OutputTokens: 4}})
	h := s.Handler()
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/generate", "/generate_stream"} {
			req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			switch rec.Code {
			case http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity, http.StatusRequestEntityTooLarge:
			default:
				t.Errorf("%s %q: status %d", path, body, rec.Code)
			}
		}
	})
}
