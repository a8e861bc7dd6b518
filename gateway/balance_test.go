package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/tracing/otlptest"
)

// testAgent is a node load agent served in-process: GET /v1/load answers
// the JSON of `vigil agent` (nodeload.Load), PUT /v1/load sets the values as
// `vigil agent --allow-override` does. Each GET is a new sample (a new
// time) unless the agent is frozen, as when its sampler stops.
type testAgent struct {
	*httptest.Server
	mu     sync.Mutex
	load   map[string]float64
	frozen time.Time // non-zero: every answer carries this sample time
}

func startAgent(t *testing.T) *testAgent {
	t.Helper()
	a := &testAgent{load: map[string]float64{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/load" {
			http.NotFound(w, r)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		switch r.Method {
		case http.MethodPut:
			var v map[string]float64
			if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for k, x := range v {
				a.load[k] = x
			}
		case http.MethodGet:
		default:
			http.Error(w, "method", http.StatusMethodNotAllowed)
			return
		}
		ts := time.Now()
		if !a.frozen.IsZero() {
			ts = a.frozen
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"cpu": a.load["cpu"], "mem": a.load["mem"], "gpu": a.load["gpu"], "gpu_mem": a.load["gpu_mem"],
			"has_gpu": true, "time": ts,
		})
	}))
	t.Cleanup(a.Close)
	return a
}

// set overrides the agent's values over HTTP.
func (a *testAgent) set(t *testing.T, v map[string]float64) {
	t.Helper()
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPut, a.URL+"/v1/load", strings.NewReader(string(b)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/load: %d", resp.StatusCode)
	}
}

func (a *testAgent) freeze() {
	a.mu.Lock()
	a.frozen = time.Now()
	a.mu.Unlock()
}

// setKnobs patches a simulator's knobs over HTTP.
func setKnobs(t *testing.T, simURL, knobs string) {
	t.Helper()
	if code, _, body := post(t, simURL+"/sim/knobs", knobs); code != http.StatusOK {
		t.Fatalf("POST /sim/knobs %s: %d %s", knobs, code, body)
	}
}

// loadedBackend is a simulator with an agent, at set loads.
type loadedBackend struct {
	name  string
	sim   string // URL
	agent *testAgent
	// The loads set: the agent's and the simulator's.
	cpu, mem, gpu, gpuMem float64
	waiting               int
	kv                    float64
}

// wantWeight computes a backend's dynamic weight (its node factor) from the
// loads set, by the formula the README documents, independently of package
// balance: base × (1 − the weighted mean of the fresh node signals).
// Waiting requests are not a node signal: they enter the cost.
func wantWeight(base float64, w config.LoadWeights, scores map[string]float64) float64 {
	weights := map[string]float64{"cpu": w.CPU, "mem": w.Mem, "gpu": w.GPU, "gpu_mem": w.GPUMem, "kv_cache": w.KVCache}
	var sum, wsum float64
	for k, v := range scores {
		sum += weights[k] * v
		wsum += weights[k]
	}
	load := 0.0
	if wsum > 0 {
		load = sum / wsum
	}
	return max(base*(1-load), base*0.01)
}

// wantShares computes the dynamic strategy's split among idle backends
// whose latency is unknown, by the documented cost, independently of
// package balance: every pair is drawn equally often and the backend with
// the lower (waiting + 1) / weight wins it (a tie goes either way).
func wantShares(weights []float64, waiting []int) []float64 {
	n := len(weights)
	out := make([]float64, n)
	pair := 1 / float64(n*(n-1)/2)
	for i := range n {
		for j := i + 1; j < n; j++ {
			ci, cj := float64(waiting[i]+1)/weights[i], float64(waiting[j]+1)/weights[j]
			switch {
			case ci < cj:
				out[i] += pair
			case cj < ci:
				out[j] += pair
			default:
				out[i] += pair / 2
				out[j] += pair / 2
			}
		}
	}
	return out
}

func (l *loadedBackend) scores(withAgent bool) map[string]float64 {
	m := map[string]float64{"kv_cache": l.kv}
	if withAgent {
		m["cpu"], m["mem"], m["gpu"], m["gpu_mem"] = l.cpu, l.mem, l.gpu, l.gpuMem
	}
	return m
}

// startLoaded starts three simulators, each with an agent, at three loads.
func startLoaded(t *testing.T) []*loadedBackend {
	t.Helper()
	bs := []*loadedBackend{
		{name: "idle", cpu: 0.1, mem: 0.2, gpu: 0.1, gpuMem: 0.5, waiting: 0, kv: 0.1},
		{name: "busy", cpu: 0.5, mem: 0.5, gpu: 0.6, gpuMem: 0.9, waiting: 8, kv: 0.5},
		{name: "full", cpu: 0.9, mem: 0.8, gpu: 0.95, gpuMem: 0.9, waiting: 24, kv: 0.6},
	}
	for _, b := range bs {
		_, b.sim = startSim(t, "m1", nil)
		b.agent = startAgent(t)
		b.agent.set(t, map[string]float64{"cpu": b.cpu, "mem": b.mem, "gpu": b.gpu, "gpu_mem": b.gpuMem})
		setKnobs(t, b.sim, fmt.Sprintf(`{"extra_waiting":%d,"kv_cache_usage":%v}`, b.waiting, b.kv))
	}
	return bs
}

func (l *loadedBackend) config() config.Backend {
	c := backend(l.name, l.sim, "m1")
	c.Agent, c.Metrics = l.agent.URL, l.sim+"/metrics"
	return c
}

// adminBackend is the part of an /admin/backends entry the tests read.
type adminBackend struct {
	Name      string             `json:"name"`
	Healthy   bool               `json:"healthy"`
	Weight    float64            `json:"weight"`
	Base      float64            `json:"base_weight"`
	Load      map[string]float64 `json:"load"`
	LoadBlend float64            `json:"load_blend"`
	Picks     int64              `json:"picks"`
	Cost      float64            `json:"cost"`
	Requests  *struct {
		Waiting float64 `json:"waiting"`
	} `json:"requests"`
	Health struct {
		Active              bool       `json:"active"`
		ConsecutiveFailures int64      `json:"consecutive_failures"`
		Ejected             bool       `json:"ejected"`
		EjectedUntil        *time.Time `json:"ejected_until"`
		FailedProbes        int64      `json:"failed_probes"`
	} `json:"health"`
}

func adminBackends(t *testing.T, gw *testGateway) map[string]adminBackend {
	t.Helper()
	code, body := gw.get(t, "/admin/backends")
	if code != http.StatusOK {
		t.Fatalf("/admin/backends: %d %s", code, body)
	}
	var l []adminBackend
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("/admin/backends: %v: %s", err, body)
	}
	m := map[string]adminBackend{}
	for _, b := range l {
		m[b.Name] = b
	}
	return m
}

// metricValue reads one sample from the gateway's /metrics.
func metricValue(t *testing.T, gw *testGateway, series string) float64 {
	t.Helper()
	_, body := gw.get(t, "/metrics")
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return math.NaN()
}

const splitTolerance = 0.05

// TestDynamicWeights: three simulators with different node loads (set on
// their agents) and server loads (waiting requests and KV-cache usage set
// with simulator knobs) get the weights the documented formula gives, and
// 10,000 picks (nothing in flight, no latency measured) split as the
// documented cost says: each pair drawn equally often, the lower
// (waiting + 1) / weight winning it.
//
// Tolerance: ±5 share points per backend. A share p over n = 10,000
// independent picks has a standard deviation of √(p(1−p)/n) ≤ 0.5 point, so
// 5 points is 10σ: the test fails on a wrong split, not on chance.
func TestDynamicWeights(t *testing.T) {
	bs := startLoaded(t)
	var cfgs []config.Backend
	for _, b := range bs {
		cfgs = append(cfgs, b.config())
	}
	gw := startGateway(t, cfgs, func(c *config.Config) { c.Balancer.ScrapeInterval = 100 * time.Millisecond })
	lb := config.Default().Balancer

	want := make([]float64, len(bs))
	waiting := make([]int, len(bs))
	for i, b := range bs {
		want[i] = wantWeight(100, lb.LoadWeights, b.scores(true))
		waiting[i] = b.waiting
	}
	// The waiting counts reach the balancer with the weights (same scrape).
	wantShare := wantShares(want, waiting)
	waitFor(t, "weights from the scraped loads", func() bool {
		snap := gw.Balancer().Snapshot()
		for i := range bs {
			if math.Abs(snap.Backends[i].Weight-want[i]) > 1e-9 {
				return false
			}
		}
		return true
	})

	counts := map[string]int{}
	const picks = 10000
	for range picks {
		b, err := gw.Balancer().Pick("m1", nil)
		if err != nil {
			t.Fatal(err)
		}
		counts[b.Name]++
	}
	for i, b := range bs {
		got, exp := float64(counts[b.name])/picks, wantShare[i]
		t.Logf("%s: weight %.2f, %d waiting, expected share %.4f, picked %.4f", b.name, want[i], b.waiting, exp, got)
		if math.Abs(got-exp) > splitTolerance {
			t.Errorf("%s: picked %.4f of %d, want %.4f ± %.2f", b.name, got, picks, exp, splitTolerance)
		}
	}

	// The admin API and /metrics show the same weights and the loads.
	adm := adminBackends(t, gw)
	for i, b := range bs {
		a := adm[b.name]
		if math.Abs(a.Weight-want[i]) > 1e-9 || a.Base != 100 {
			t.Errorf("%s: admin weight %v (base %v), want %v (base 100)", b.name, a.Weight, a.Base, want[i])
		}
		wantLoad := map[string]float64{
			"cpu": b.cpu, "mem": b.mem, "gpu": b.gpu, "gpu_mem": b.gpuMem,
			"queue": float64(b.waiting) / (float64(b.waiting) + 8), "kv_cache": b.kv,
		}
		for k, v := range wantLoad {
			if g, ok := a.Load[k]; !ok || math.Abs(g-v) > 1e-9 {
				t.Errorf("%s: load.%s = %v (present %v), want %v", b.name, k, g, ok, v)
			}
		}
		if a.Requests == nil || a.Requests.Waiting != float64(b.waiting) {
			t.Errorf("%s: requests %+v, want %d waiting", b.name, a.Requests, b.waiting)
		}
		if m := metricValue(t, gw, `vigil_backend_weight{backend="`+b.name+`"}`); math.Abs(m-want[i]) > 1e-6 {
			t.Errorf("%s: vigil_backend_weight %v, want %v", b.name, m, want[i])
		}
	}
}

// TestStaleSignalsIgnored: an agent whose sampler stops (it keeps answering
// the same sample) or that cannot be reached drops out of the blend after
// balancer.stale_after, and the weight falls back to the other signals.
func TestStaleSignalsIgnored(t *testing.T) {
	bs := startLoaded(t)
	var cfgs []config.Backend
	for _, b := range bs {
		cfgs = append(cfgs, b.config())
	}
	const staleAfter = 500 * time.Millisecond
	gw := startGateway(t, cfgs, func(c *config.Config) {
		c.Balancer.ScrapeInterval = 50 * time.Millisecond
		c.Balancer.StaleAfter = staleAfter
	})
	lb := config.Default().Balancer
	weightIs := func(i int, w float64) func() bool {
		return func() bool { return math.Abs(gw.Balancer().Snapshot().Backends[i].Weight-w) < 1e-9 }
	}
	fresh := func(i int) float64 {
		return wantWeight(100, lb.LoadWeights, bs[i].scores(true))
	}
	noAgent := func(i int) float64 {
		return wantWeight(100, lb.LoadWeights, bs[i].scores(false))
	}
	for i := range bs {
		waitFor(t, bs[i].name+"'s weight with every signal", weightIs(i, fresh(i)))
	}

	// "full" stops sampling: after stale_after its weight is computed from
	// the server's signals alone (queue and kv_cache), a higher weight.
	bs[2].agent.freeze()
	frozenAt := time.Now()
	waitFor(t, "full's weight without its stale agent", weightIs(2, noAgent(2)))
	if el := time.Since(frozenAt); el < staleAfter-100*time.Millisecond {
		t.Errorf("agent signals dropped after %v, before stale_after %v", el, staleAfter)
	}
	// "busy"'s agent goes away: the same.
	bs[1].agent.Close()
	waitFor(t, "busy's weight without its unreachable agent", weightIs(1, noAgent(1)))
	if w := gw.Balancer().Snapshot().Backends[0].Weight; math.Abs(w-fresh(0)) > 1e-9 {
		t.Errorf("idle's weight changed to %v, want %v", w, fresh(0))
	}
	adm := adminBackends(t, gw)
	if _, ok := adm["full"].Load["cpu"]; ok {
		t.Errorf("admin shows a stale cpu load for full: %v", adm["full"].Load)
	}
	if _, ok := adm["full"].Load["queue"]; !ok {
		t.Errorf("admin lacks full's fresh queue load: %v", adm["full"].Load)
	}
	if m := metricValue(t, gw, `vigil_balancer_scrape_errors_total{backend="busy",source="agent"}`); !(m >= 1) {
		t.Errorf("scrape errors of busy's agent: %v, want >= 1", m)
	}
}

// TestKilledBackendNoClientError: with one backend dead from the start and
// another killed halfway, every non-streaming request still succeeds
// (retries on the others), and so do streams, whose failures come before
// their first byte.
func TestKilledBackendNoClientError(t *testing.T) {
	_, url1 := startSim(t, "m1", nil)
	sim2 := sim.New(sim.Options{Model: "m1", Seed: 42, Knobs: sim.Knobs{TTFT: time.Millisecond}})
	srv2 := httptest.NewServer(sim2.Handler())
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	gw := startGateway(t, []config.Backend{backend("a", url1, "m1"), backend("b", srv2.URL, "m1"), backend("dead", deadURL, "m1")}, nil)

	served := map[string]int{}
	send := func(i int) {
		stream := i%4 == 3
		body := fmt.Sprintf(`{"model":"m1","max_tokens":4,"stream":%t,"messages":[{"role":"user","content":"hi %d"}]}`, stream, i)
		code, hdr, resp := post(t, gw.URL+"/v1/chat/completions", body)
		if code != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, code, resp)
		}
		if stream && !strings.Contains(string(resp), "data: [DONE]") {
			t.Fatalf("request %d: incomplete stream %q", i, resp)
		}
		served[hdr.Get("X-Vigil-Backend")]++
	}
	for i := range 40 {
		send(i)
	}
	srv2.Close() // "b" dies
	for i := 40; i < 80; i++ {
		send(i)
	}
	if served["dead"] != 0 {
		t.Errorf("the dead backend served %d requests", served["dead"])
	}
	if retries := metricValue(t, gw, `vigil_retries_total{reason="connect"}`); !(retries >= 1) {
		t.Errorf("vigil_retries_total{connect} = %v, want >= 1", retries)
	}
	// How often the dead backend was tried depends on timing (its error
	// rate makes it costly after the first failure, before the passive
	// ejection's three); that it was tried and counted does not.
	adm := adminBackends(t, gw)
	if d := adm["dead"]; d.Health.ConsecutiveFailures < 1 {
		t.Errorf("dead backend: %+v, want >= 1 consecutive failure", d.Health)
	}
	t.Logf("served: %v; retries %v", served, metricValue(t, gw, `vigil_retries_total{reason="connect"}`))
}

// TestRetry5xx: a 5xx answer before anything reached the client is retried
// on another backend, with the same body bytes; with retries.attempts 1 it
// passes through.
func TestRetry5xx(t *testing.T) {
	var bodies sync.Map
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store("bad", string(b))
		http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	_, good := startSim(t, "m1", nil)
	spy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies.Store("good", string(b))
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		proxyTo(w, r, good)
	}))
	defer spy.Close()
	body := `{"model":"m1", "messages":[{"role":"user","content":"hi"}],  "max_tokens":3}`
	for _, attempts := range []int{3, 1} {
		t.Run(fmt.Sprintf("attempts=%d", attempts), func(t *testing.T) {
			gw := startGateway(t, []config.Backend{backend("bad", failing.URL), backend("good", spy.URL)}, func(c *config.Config) {
				c.Balancer.Strategy = "round_robin"
				c.Retries.Attempts = attempts
				c.Health.Failures = 0
			})
			codes := map[int]int{}
			for range 6 {
				code, hdr, resp := post(t, gw.URL+"/v1/chat/completions", body)
				codes[code]++
				if code == http.StatusServiceUnavailable && string(resp) != "{\"error\":\"overloaded\"}\n" {
					t.Errorf("the backend's 503 changed: %q", resp)
				}
				if code == 200 && hdr.Get("X-Vigil-Backend") != "good" {
					t.Errorf("200 from %q", hdr.Get("X-Vigil-Backend"))
				}
			}
			if attempts == 3 && codes[200] != 6 {
				t.Errorf("statuses %v, want every request to succeed on retry", codes)
			}
			if attempts == 1 && (codes[200] != 3 || codes[503] != 3) {
				t.Errorf("statuses %v, want round robin to give 3 × 200 and 3 × 503", codes)
			}
			for _, k := range []string{"bad", "good"} {
				if b, _ := bodies.Load(k); b != body {
					t.Errorf("%s got body %q, want the client's bytes", k, b)
				}
			}
			waitFor(t, "access log", func() bool { return len(gw.access.lines(t)) == 6 })
			retried := 0
			for _, l := range gw.access.lines(t) {
				if l["attempts"] == 2.0 {
					retried++
				}
			}
			if want := map[int]int{3: 3, 1: 0}[attempts]; retried != want {
				t.Errorf("%d requests logged 2 attempts, want %d", retried, want)
			}
		})
	}
}

// proxyTo forwards r to base (a test helper, not the gateway's proxy).
func proxyTo(w http.ResponseWriter, r *http.Request, base string) {
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, base+r.URL.Path, r.Body)
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// TestPassiveEjection, without active checks: health.failures consecutive
// failures eject a backend (/readyz follows when it was the last one), it
// comes back after the back-off on probation — one more failure ejects it
// again for twice as long — and a success ends the probation.
// TestEjectionProbed has the active checks' probes readmit.
func TestPassiveEjection(t *testing.T) {
	s, url := startSim(t, "m1", func(k *sim.Knobs) { k.ErrorRate = 1 })
	const backoff = 400 * time.Millisecond
	gw := startGateway(t, []config.Backend{backend("a", url, "m1")}, func(c *config.Config) {
		c.Health.Failures, c.Health.Backoff, c.Health.MaxBackoff = 3, backoff, 10*backoff
	})
	chat := `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`
	ready := func() int { code, _ := testutil.Get(t, gw.URL+"/readyz"); return code }
	expect := func(want int) {
		t.Helper()
		if code, _, body := post(t, gw.URL+"/v1/chat/completions", chat); code != want {
			t.Fatalf("status %d, want %d: %s", code, want, body)
		}
	}

	expect(500)
	expect(500)
	if a := adminBackends(t, gw)["a"]; a.Health.ConsecutiveFailures != 2 || a.Health.EjectedUntil != nil || !a.Healthy {
		t.Fatalf("after 2 failures: %+v", a)
	}
	expect(500) // the third ejects
	ejectedAt := time.Now()
	a := adminBackends(t, gw)["a"]
	if a.Healthy || a.Health.EjectedUntil == nil || !a.Health.Active {
		t.Fatalf("after 3 failures: %+v, want ejected", a)
	}
	// The ejection started between the request and ejectedAt.
	if d := a.Health.EjectedUntil.Sub(ejectedAt); d > backoff || d < backoff/4 {
		t.Errorf("ejected for %v, want about %v", d, backoff)
	}
	until := *a.Health.EjectedUntil
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d while the only backend is ejected, want 503", code)
	}
	expect(503)

	// After the back-off it is back, on probation.
	waitFor(t, "re-admission after the back-off", func() bool { return ready() == http.StatusOK })
	if now := time.Now(); now.Before(until) {
		t.Errorf("re-admitted %v before the back-off ended", until.Sub(now))
	}
	expect(500) // one failure ejects it again, for twice as long
	again := time.Now()
	a = adminBackends(t, gw)["a"]
	if a.Health.EjectedUntil == nil {
		t.Fatalf("a failure on probation did not eject: %+v", a)
	}
	if d := a.Health.EjectedUntil.Sub(again); d > 2*backoff || d < 2*backoff-3*backoff/4 {
		t.Errorf("second ejection lasts %v, want about %v", d, 2*backoff)
	}

	// The backend recovers and is back after its second back-off.
	s.SetKnobs(sim.Knobs{TTFT: time.Millisecond})
	waitFor(t, "re-admission after the second back-off", func() bool { return ready() == http.StatusOK })
	expect(200)
	if a := adminBackends(t, gw)["a"]; a.Health.ConsecutiveFailures != 0 || a.Health.EjectedUntil != nil {
		t.Errorf("after a success: %+v", a.Health)
	}
	if n := metricValue(t, gw, `vigil_backend_ejections_total{backend="a"}`); n != 2 {
		t.Errorf("vigil_backend_ejections_total = %v, want 2", n)
	}
}

// TestRoundRobin: an even rotation, whatever the loads.
func TestRoundRobin(t *testing.T) {
	var cfgs []config.Backend
	for _, n := range []string{"a", "b", "c"} {
		_, url := startSim(t, "m1", nil)
		cfgs = append(cfgs, backend(n, url, "m1"))
	}
	cfgs[0].Weight = 1000 // ignored by round robin
	gw := startGateway(t, cfgs, func(c *config.Config) { c.Balancer.Strategy = "round_robin" })
	counts := map[string]int{}
	var order []string
	for range 30 {
		_, hdr, _ := post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
		counts[hdr.Get("X-Vigil-Backend")]++
		order = append(order, hdr.Get("X-Vigil-Backend"))
	}
	if counts["a"] != 10 || counts["b"] != 10 || counts["c"] != 10 {
		t.Errorf("round robin counts %v, want 10 each", counts)
	}
	for i := 3; i < len(order); i++ {
		if order[i] != order[i-3] {
			t.Fatalf("not a rotation: %v", order)
		}
	}
}

// TestLeastRequest: requests go to the backend with the fewest in flight.
func TestLeastRequest(t *testing.T) {
	var cfgs []config.Backend
	for _, n := range []string{"a", "b", "c"} {
		_, url := startSim(t, "m1", func(k *sim.Knobs) { k.TTFT = time.Minute }) // requests hang
		cfgs = append(cfgs, backend(n, url, "m1"))
	}
	cfgs[0].Weight = 1000 // ignored by least request
	gw := startGateway(t, cfgs, func(c *config.Config) { c.Balancer.Strategy = "least_request" })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	inflight := func() (total int64, each []int64) {
		for _, b := range gw.Pool().Backends() {
			each = append(each, b.Inflight())
			total += b.Inflight()
		}
		return total, each
	}
	// Six requests sent one after another, each once the previous one is in
	// flight, land two on each backend, whatever the base weights: at no
	// point may a backend hold more than its even share, rounded up.
	for i := 1; i <= 6; i++ {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/chat/completions",
				strings.NewReader(`{"model":"m1","messages":[{"role":"user","content":"x"}]}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		waitFor(t, fmt.Sprintf("%d requests in flight", i), func() bool { n, _ := inflight(); return n == int64(i) })
		_, each := inflight()
		for j, n := range each {
			if n > int64((i+2)/3) {
				t.Fatalf("after %d requests backend %d has %d in flight: %v", i, j, n, each)
			}
		}
	}
}

// TestStreamBreakSDK: a stream that breaks after its first chunk makes the
// OpenAI Go SDK return an error (ssestream.StreamError), never a clean end.
func TestStreamBreakSDK(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read all the request: a close with unread input would be a reset,
		// which can discard what was sent before it, however long one waits.
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
		w.(http.Flusher).Flush()
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer be.Close()
	gw := startGateway(t, []config.Backend{backend("a", be.URL)}, nil)
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "m1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	var content string
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			content += c.Choices[0].Delta.Content
		}
	}
	err := stream.Err()
	var se *ssestream.StreamError
	if !errors.As(err, &se) {
		t.Fatalf("stream.Err() = %v (%T), want *ssestream.StreamError", err, err)
	}
	if content != "Hel" || !strings.Contains(se.Message, "upstream_stream_broken") {
		t.Errorf("content %q, error %q", content, se.Message)
	}
}

// TestRetryBeforeFirstByteStreaming: a stream whose backend refuses the
// connection is retried, and the client gets a whole stream.
func TestRetryBeforeFirstByteStreaming(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	var hits atomic.Int64
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer flaky.Close()
	gw := startGateway(t, []config.Backend{backend("flaky", flaky.URL, "m1"), backend("ok", url, "m1")},
		func(c *config.Config) { c.Balancer.Strategy = "round_robin" })
	for range 4 {
		resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m1","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		done := false
		for sc.Scan() {
			done = done || sc.Text() == "data: [DONE]"
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !done {
			t.Errorf("status %d, complete %v", resp.StatusCode, done)
		}
	}
	if hits.Load() == 0 {
		t.Error("the flaky backend was never tried")
	}
}

// TestTraceRetries: each attempt is its own inference span under the server
// span; the failed one carries the backend's status and error.type, and
// each backend got the traceparent of its own attempt's span.
func TestTraceRetries(t *testing.T) {
	var badTP, goodTP atomic.Value
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badTP.Store(r.Header.Get("Traceparent"))
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer bad.Close()
	_, simURL := startSim(t, "m1", nil)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		goodTP.Store(r.Header.Get("Traceparent"))
		proxyTo(w, r, simURL)
	}))
	defer good.Close()
	// Round robin starts at the second backend: the first request goes to
	// "good", the second starts at "bad" and is retried on "good".
	gw, rcv, p := tracedGateway(t, []config.Backend{backend("bad", bad.URL, "m1"), backend("good", good.URL, "m1")},
		func(c *config.Config) { c.Balancer.Strategy = "round_robin" })
	post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	post(t, gw.URL+"/v1/chat/completions", `{"model":"m1","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	p.Shutdown(context.Background())
	spans := rcv.WaitFor(t, 7, 5*time.Second) // 2 × (server, preprocess) + 3 inference
	var infer []otlptest.Span
	for _, s := range spans {
		if s.Name == "chat m1" {
			infer = append(infer, s)
		}
	}
	if len(infer) != 3 {
		t.Fatalf("%d inference spans, want 3", len(infer))
	}
	var failed, retried *otlptest.Span
	for i := range infer {
		switch s := &infer[i]; {
		case s.Attributes["vigil.backend"] == "bad":
			failed = s
		case s.Attributes["vigil.attempt"] == int64(2):
			retried = s
		}
	}
	if failed == nil || retried == nil {
		t.Fatalf("inference spans %+v", infer)
	}
	if failed.StatusCode != "error" || failed.Attributes["error.type"] != string(exchange.ClassUpstream5xx) ||
		failed.Attributes["http.response.status_code"] != int64(500) || failed.Attributes["vigil.retried"] != true {
		t.Errorf("failed attempt's span: %+v", failed)
	}
	if retried.StatusCode == "error" || retried.Attributes["vigil.backend"] != "good" || retried.ParentSpanID != failed.ParentSpanID {
		t.Errorf("retried attempt's span: %+v", retried)
	}
	if tp, _ := badTP.Load().(string); !strings.Contains(tp, "-"+failed.SpanID+"-") {
		t.Errorf("bad backend's traceparent %q, want span %s", tp, failed.SpanID)
	}
	if tp, _ := goodTP.Load().(string); !strings.Contains(tp, "-"+retried.SpanID+"-") {
		t.Errorf("good backend's traceparent %q, want span %s", tp, retried.SpanID)
	}
}

// TestRetryManyAttempts: attempts past the first, whose reader the call
// keeps inline, replay the same body bytes too.
func TestRetryManyAttempts(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	_, good := startSim(t, "m1", nil)
	backends := []config.Backend{backend("good", good)}
	for i := range 4 {
		backends = append(backends, backend(fmt.Sprintf("bad%d", i), failing.URL))
	}
	gw := startGateway(t, backends, func(c *config.Config) {
		c.Balancer.Strategy = "round_robin"
		c.Retries.Attempts = len(backends)
		c.Health.Failures = 0
	})
	body := `{"model":"m1","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	for range len(backends) {
		if code, _, resp := post(t, gw.URL+"/v1/chat/completions", body); code != http.StatusOK {
			t.Fatalf("status %d: %s", code, resp)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 4 {
		t.Errorf("%d failed attempts, want a request retried past 3 attempts", len(seen))
	}
	for _, b := range seen {
		if b != body {
			t.Errorf("a failing backend got %q, want the client's bytes", b)
		}
	}
	waitFor(t, "access log", func() bool { return len(gw.access.lines(t)) == len(backends) })
	most := 0.0
	for _, l := range gw.access.lines(t) {
		most = max(most, l["attempts"].(float64))
	}
	if most < 4 {
		t.Errorf("at most %v attempts logged, want more than 3", most)
	}
}
