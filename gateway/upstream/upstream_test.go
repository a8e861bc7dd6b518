package upstream

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

func TestParseServerMetrics(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name, text string
		want       *ServerLoad
	}{
		{"vllm", `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 5
vllm:num_requests_running{engine="1",model_name="m"} 3
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0 1764400000000
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.7
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99
vllm:num_requests_waiting_by_reason{reason="x"} 100
`, &ServerLoad{Waiting: 2, Running: 8, KVCache: 0.6, PrefixQueries: nan, PrefixHits: nan}},
		{"older vllm", `vllm:num_requests_waiting{model_name="a b}\"c"} 4
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
`, &ServerLoad{Waiting: 4, Running: nan, KVCache: 0.25, PrefixQueries: nan, PrefixHits: nan}},
		{"tgi", "tgi_queue_size 7\ntgi_batch_current_size 12\ntgi_request_count 100\n",
			&ServerLoad{Waiting: 7, Running: 12, KVCache: nan, PrefixQueries: nan, PrefixHits: nan}},
		{"clamped usage", "vllm:kv_cache_usage_perc 1.5\n", &ServerLoad{Waiting: nan, Running: nan, KVCache: 1, PrefixQueries: nan, PrefixHits: nan}},
		// vLLM's counters as prometheus_client exposes them (_total, with
		// _created beside), summed over engines.
		{"prefix cache", `# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200.0
vllm:prefix_cache_queries_total{engine="1",model_name="m"} 800.0
vllm:prefix_cache_queries_created{engine="0",model_name="m"} 1.7644e+09
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 200.0
vllm:num_requests_running{engine="0",model_name="m"} 1
`, &ServerLoad{Waiting: nan, Running: 1, KVCache: nan, PrefixQueries: 2000, PrefixHits: 800}},
		// Without the suffix (a text exposition written by hand, or an
		// exporter that strips it), and nothing else: still a reading.
		{"prefix cache, bare names", "vllm:prefix_cache_queries 50\nvllm:prefix_cache_hits 5\n",
			&ServerLoad{Waiting: nan, Running: nan, KVCache: nan, PrefixQueries: 50, PrefixHits: 5}},
		{"older vllm prefix cache", "vllm:gpu_prefix_cache_queries_total 10\nvllm:gpu_prefix_cache_hits_total 4\nvllm:num_requests_waiting 0\n",
			&ServerLoad{Waiting: 0, Running: nan, KVCache: nan, PrefixQueries: 10, PrefixHits: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServerMetrics([]byte(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ParseServerMetrics([]byte("process_cpu_seconds_total 3\n")); err != ErrNoLoadMetrics {
		t.Errorf("no load series: %v, want ErrNoLoadMetrics", err)
	}
}

func TestParseAgentLoad(t *testing.T) {
	nan := math.NaN()
	ts := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name, json string
		want       *AgentLoad
	}{
		{"gpu node", `{"cpu":0.25,"mem":0.5,"gpu":0.75,"gpu_mem":0.9,"has_gpu":true,"time":"2026-11-29T10:00:00Z"}`,
			&AgentLoad{CPU: 0.25, Mem: 0.5, GPU: 0.75, GPUMem: 0.9, Sampled: ts}},
		{"no gpu", `{"cpu":0.25,"mem":0.5,"gpu":0,"gpu_mem":0,"has_gpu":false}`,
			&AgentLoad{CPU: 0.25, Mem: 0.5, GPU: nan, GPUMem: nan}},
		{"partial and out of range", `{"cpu":1.5,"mem":-1}`,
			&AgentLoad{CPU: 1, Mem: 0, GPU: nan, GPUMem: nan}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAgentLoad([]byte(tt.json))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateNaNs()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ParseAgentLoad([]byte(`[1]`)); err == nil {
		t.Error("invalid JSON accepted")
	}
}

// TestScraperAgesRepeatedSamples: an agent that answers the same sample
// again keeps the sample's first-seen time, so it goes stale. It runs on
// the bubble's clock, so that the second scrape is surely later.
func TestScraperAgesRepeatedSamples(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := `{"cpu":0.5,"mem":0.5,"has_gpu":false,"time":"2026-11-29T10:00:00Z"}`
		var n testutil.Network
		agent := n.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/load" {
				http.NotFound(w, r)
				return
			}
			w.Write([]byte(body))
		}))
		p, err := NewPool([]config.Backend{{Name: "a", URL: "http://127.0.0.1:1", Agent: agent, Weight: 1}}, config.Default().Health, config.Default().Balancer.LatencyDecay)
		if err != nil {
			t.Fatal(err)
		}
		client := n.Client()
		defer client.CloseIdleConnections()
		s := &Scraper{Pool: p, Client: client}
		s.ScrapeAll(context.Background())
		first := p.Backends()[0].AgentLoad()
		if first == nil || first.CPU != 0.5 {
			t.Fatalf("first scrape: %+v", first)
		}
		time.Sleep(10 * time.Millisecond)
		s.ScrapeAll(context.Background())
		if again := p.Backends()[0].AgentLoad(); !again.AsOf.Equal(first.AsOf) {
			t.Errorf("the same sample got a new age: %v then %v", first.AsOf, again.AsOf)
		}
	})
}

// TestPassiveBackoff: ejection after Failures consecutive failures, back-off
// doubling per ejection up to the cap, failures while ejected not extending
// it, the back-off's end not readmitting by itself, and a success clearing
// all.
func TestPassiveBackoff(t *testing.T) {
	h := config.Default().Health
	h.Failures, h.Backoff, h.MaxBackoff = 3, time.Second, 3*time.Second
	p, err := NewPool([]config.Backend{{Name: "a", URL: "http://h:1", Weight: 1}}, h, config.Default().Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	b := p.Backends()[0]
	t0 := time.Now()
	for i := range 2 {
		if ej, _ := b.RecordFailure(t0); ej {
			t.Fatalf("ejected after %d failures", i+1)
		}
	}
	ej, until := b.RecordFailure(t0)
	if !ej || until.Sub(t0) != time.Second {
		t.Fatalf("third failure: ejected %v until +%v, want true, +1s", ej, until.Sub(t0))
	}
	if ej, _ := b.RecordFailure(t0.Add(500 * time.Millisecond)); ej {
		t.Error("a failure while ejected ejected again")
	}
	if ej, _ := b.RecordFailure(until.Add(time.Millisecond)); ej || !b.Ejected() {
		t.Error("a failure after the back-off's end, with no probe yet, ejected again or readmitted")
	}
	// Probation: once readmitted (by a probe), the next failure ejects at
	// once, for 2s, then 3s (the cap).
	for _, want := range []time.Duration{2 * time.Second, 3 * time.Second, 3 * time.Second} {
		t0 = until.Add(time.Millisecond)
		if !b.readmit() {
			t.Fatal("readmit found the backend not ejected")
		}
		ej, until = b.RecordFailure(t0)
		if !ej || until.Sub(t0) != want {
			t.Errorf("on probation: ejected %v for %v, want %v", ej, until.Sub(t0), want)
		}
	}
	if !b.RecordSuccess(until.Add(time.Millisecond)) {
		t.Error("a success did not readmit")
	}
	if b.ConsecutiveFailures() != 0 || !b.EjectedUntil().IsZero() || !b.Healthy() {
		t.Errorf("after a success: failures %d, ejected until %v", b.ConsecutiveFailures(), b.EjectedUntil())
	}
	if ej, _ := b.RecordFailure(time.Now()); ej {
		t.Error("one failure after a success ejected")
	}
}

// TestNewPoolDecayFromConfig: the latency estimates decay with the
// configured time constant, and NewPool refuses a missing one rather than
// putting a value of its own in its place.
func TestNewPoolDecayFromConfig(t *testing.T) {
	d := config.Default()
	p, err := NewPool([]config.Backend{{Name: "a", URL: "http://h:1", Weight: 1}}, d.Health, d.Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := time.Duration(p.decay), d.Balancer.LatencyDecay; got != want {
		t.Errorf("decay %v, want balancer.latency_decay %v", got, want)
	}
	for _, bad := range []time.Duration{0, -time.Second} {
		if _, err := NewPool(nil, d.Health, bad); err == nil || !strings.Contains(err.Error(), "balancer.latency_decay") {
			t.Errorf("NewPool(decay %v) error %v, want one naming balancer.latency_decay", bad, err)
		}
	}
}

// TestPeakEWMA: a slower answer replaces the estimate at once, faster ones
// are blended in by the time since the previous observation, and without
// observations the estimate decays toward zero with the decay time.
func TestPeakEWMA(t *testing.T) {
	const tau = 10 * time.Second
	p, err := NewPool([]config.Backend{{Name: "a", URL: "http://h:1", Weight: 1}}, config.Default().Health, tau)
	if err != nil {
		t.Fatal(err)
	}
	b := p.Backends()[0]
	t0 := time.Unix(1764400000, 0)
	if v, at := b.Latency(t0); !math.IsNaN(v) || !at.IsZero() {
		t.Fatalf("before any observation: %v %v, want NaN and zero", v, at)
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	b.ObserveLatency(100*time.Millisecond, t0)
	b.ObserveLatency(time.Second, t0.Add(time.Millisecond)) // the peak
	if v, at := b.Latency(t0.Add(time.Millisecond)); !near(v, 1) || !at.Equal(t0.Add(time.Millisecond)) {
		t.Errorf("after a 1 s answer: %v at %v, want 1 s at once", v, at)
	}
	// Ten seconds later a 100 ms answer: 1·e⁻¹ + 0.1·(1 − e⁻¹).
	t1 := t0.Add(time.Millisecond + tau)
	b.ObserveLatency(100*time.Millisecond, t1)
	want := math.Exp(-1) + 0.1*(1-math.Exp(-1))
	if v, _ := b.Latency(t1); !near(v, want) {
		t.Errorf("after a faster answer: %v, want %v", v, want)
	}
	// A millisecond later another: at least a tenth of the way (minBlend),
	// not the 0.01 % that e^(−1ms/τ) gives.
	b.ObserveLatency(100*time.Millisecond, t1.Add(time.Millisecond))
	want = 0.9*want + 0.1*0.1
	t1 = t1.Add(time.Millisecond)
	if v, _ := b.Latency(t1); !near(v, want) {
		t.Errorf("after a second faster answer: %v, want %v", v, want)
	}
	// Idle for two decay times: × e⁻².
	if v, _ := b.Latency(t1.Add(2 * tau)); !near(v, want*math.Exp(-2)) {
		t.Errorf("idle: %v, want %v", v, want*math.Exp(-2))
	}
	// A late observation (an older timestamp) does not move time back.
	b.ObserveLatency(50*time.Millisecond, t0)
	if _, at := b.Latency(t1); !at.Equal(t1) {
		t.Errorf("last observation %v, want %v", at, t1)
	}
}
