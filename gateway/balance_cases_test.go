package gateway

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// The balancing cases (docs/balancing.md) with real simulators behind the gateway
// and clients streaming through it over HTTP: (a) a slow backend is
// avoided, (c) equal backends split evenly, (d) a slow backend that
// recovers gets its share back, (e) a node whose GPU is busy gets less than
// one whose GPU is idle. Case (b), fleet P99 TTFT with a queueing backend,
// is a figure of the balancing benchmark (test/bench/run -suite balance).

// Cases (a), (c) and (d) run in a synctest bubble, on an in-memory
// network: the simulators' latencies and the balancer's measurements of
// them are in the bubble's time, which a busy machine does not stretch, so
// that a pause of the machine cannot make an equal backend look slow.

// served is one answered request: when it ended and which backend served it.
type served struct {
	at      time.Time
	backend string
}

// drive streams chat completions through the gateway from clients
// concurrent goroutines until n requests are answered (n > 0) or stop is
// closed, and returns who served each.
func drive(t *testing.T, gw *testGateway, clients, n int, stop <-chan struct{}) []served {
	t.Helper()
	gwURL := gw.URL
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	if gw.net != nil {
		tr = gw.net.Transport()
	}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	var (
		mu    sync.Mutex
		out   []served
		left  atomic.Int64
		wg    sync.WaitGroup
		fails atomic.Int64
	)
	left.Store(int64(n))
	for c := range clients {
		wg.Go(func() {
			for i := 0; ; i++ {
				if n > 0 && left.Add(-1) < 0 {
					return
				}
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"model":"m1","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"client %d request %d"}]}`, c, i)
				resp, err := hc.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					fails.Add(1)
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "data: [DONE]") {
					fails.Add(1)
					continue
				}
				mu.Lock()
				out = append(out, served{time.Now(), resp.Header.Get("X-Vigil-Backend")})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if f := fails.Load(); f > 0 {
		t.Errorf("%d requests failed", f)
	}
	return out
}

// shareOf returns each backend's share of the requests.
func shareOf(reqs []served) map[string]float64 {
	m := map[string]float64{}
	for _, r := range reqs {
		m[r.backend] += 1 / float64(len(reqs))
	}
	return m
}

// startFleet starts one simulator per TTFT, each backend named b0, b1, …,
// and a gateway in front of them with the default balancer.
// All on the in-memory network n.
func startFleet(t *testing.T, n *testutil.Network, ttfts []time.Duration, mutate func(*config.Config)) (*testGateway, []*sim.Server) {
	t.Helper()
	var cfgs []config.Backend
	var sims []*sim.Server
	for i, ttft := range ttfts {
		s, u := startSimIn(t, n, "m1", func(k *sim.Knobs) { k.TTFT, k.ITL = ttft, 2*time.Millisecond })
		cfgs = append(cfgs, backend(fmt.Sprintf("b%d", i), u, "m1"))
		sims = append(sims, s)
	}
	return startGatewayIn(t, n, cfgs, mutate), sims
}

// TestBalanceSlowBackend (case a): of three backends, one answers its first
// token 10× later (200 ms against 20 ms); with 6 clients streaming, it
// serves under 5 % of 600 requests. Before the balancer has measured it, a
// few requests land there: that is how it is measured.
func TestBalanceSlowBackend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, _ := startFleet(t, &testutil.Network{}, []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}, nil)
		reqs := drive(t, gw, 6, 600, nil)
		s := shareOf(reqs)
		t.Logf("shares %v over %d requests", s, len(reqs))
		if s["b2"] >= 0.05 {
			t.Errorf("the 10× slower backend served %.1f %% of requests, want < 5 %%", 100*s["b2"])
		}
	})
}

// TestBalanceEqualBackends (case c): three equal backends each serve within
// ±5 share points of an even share of 1,200 requests from 6 clients.
//
// Why this holds without luck: with 6 requests in flight over 3 backends,
// the in-flight count in the cost keeps the backends within about one
// request of each other (join the shorter of two queues); what moves the
// split is latency noise, one slow answer (a pause of the machine) raising
// a backend's peak EWMA until about ten normal answers forgive it. A run
// here was 0.5 points off at most (test/bench/run -suite balance measures
// longer runs against the ±5 % relative target).
func TestBalanceEqualBackends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gw, _ := startFleet(t, &testutil.Network{}, []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}, nil)
		reqs := drive(t, gw, 6, 1200, nil)
		s := shareOf(reqs)
		t.Logf("shares %v over %d requests", s, len(reqs))
		for _, b := range []string{"b0", "b1", "b2"} {
			if math.Abs(s[b]-1.0/3) > 0.05 {
				t.Errorf("%s served %.2f %%, want 33.33 %% ± 5 points", b, 100*s[b])
			}
		}
	})
}

// TestBalanceSlowBackendRecovers (case d): a backend 10× slower is avoided,
// over the second half of its 3 s of slowness under 10 % of the requests;
// once it is fast again (its TTFT set back with the simulator's knobs) it
// gets its share back, over the last 2 s at least 80 % of an even share,
// within 30 s, with the default latency decay (10 s).
//
// Why 10 %: a balancer blind to latency sends the slow backend its even
// share, a third (round robin exactly: 35 of 104 requests when tried; at
// random, over those ~100 requests, within 4.6 points of a third, one
// standard deviation). The dynamic cost sends it nothing once it is
// measured, until its estimate has decayed below the others' (in flight +
// 1) × 20 ms, 60 to 80 ms with 2 or 3 in flight on each: at the earliest
// 10 s × ln(200 ms / 80 ms) ≈ 9 s after it was last used, far beyond the
// 3 s. What it gets is the few requests that measured it, in the first
// half (0 of ~350 in the second, in runs here). 10 % is five standard
// deviations below a third, and room for a request or two that a decayed
// estimate lets through.
func TestBalanceSlowBackendRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test runs 10 to 40 s of the bubble's time")
	}
	// A share measured over windows, and under the race detector the
	// runtime crashed in it in two runs of ./gateway in a row and once in
	// six runs of it alone (SIGSEGV at address 0 in runtime.(*timer).modify,
	// from the time.AfterFunc(-1) that httputil.ReverseProxy arms for each
	// streamed answer, run at once inside the bubble): a fault of the
	// runtime, not a race, which its thousands of streams in bubble time
	// make likely. It runs in test/run's pass without the race detector.
	testutil.SkipStatisticalUnderRace(t)
	synctest.Test(t, func(t *testing.T) {
		gw, sims := startFleet(t, &testutil.Network{}, []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond}, nil)
		stop := make(chan struct{})
		var (
			reqs []served
			done = make(chan struct{})
		)
		// The simulators' own counts of requests received: the slow
		// backend's, and the fleet's.
		counts := func() (own, all int64) {
			for i, s := range sims {
				n := s.Stats().Requests
				all += n
				if i == 2 {
					own = n
				}
			}
			return own, all
		}
		go func() {
			defer close(done)
			reqs = drive(t, gw, 6, 0, stop)
		}()
		// The slow backend is measured, then avoided: its share over the
		// second half of the slow phase.
		const slow = 3 * time.Second
		time.Sleep(slow / 2)
		own0, all0 := counts()
		time.Sleep(slow / 2)
		own1, all1 := counts()
		slowShare := float64(own1-own0) / float64(max(all1-all0, 1))
		t.Logf("while slow, %v to %v: share %.3f (%d of %d requests)", slow/2, slow, slowShare, own1-own0, all1-all0)
		if slowShare >= 0.1 || all1-all0 < 50 {
			t.Errorf("while 10× slower, %v to %v, the backend got %d of %d requests (%.1f %%), want under 10 %% of at least 50: it was not avoided",
				slow/2, slow, own1-own0, all1-all0, 100*slowShare)
		}
		k := sims[2].Knobs()
		k.TTFT = 20 * time.Millisecond
		sims[2].SetKnobs(k)
		recovered := time.Now()

		// Over each 2 s, the recovered backend's share of the fleet's
		// requests.
		const window = 2 * time.Second
		var back time.Duration
		prevOwn, prevAll := counts()
		for time.Since(recovered) < 40*time.Second {
			time.Sleep(window)
			own, all := counts()
			share := float64(own-prevOwn) / float64(max(all-prevAll, 1))
			t.Logf("%5.1fs after recovery: share %.3f over the last %v", time.Since(recovered).Seconds(), share, window)
			prevOwn, prevAll = own, all
			if share >= 0.8/3 {
				back = time.Since(recovered)
				break
			}
		}
		close(stop)
		<-done
		if back == 0 || back > 30*time.Second {
			t.Errorf("the recovered backend's share did not reach 80 %% of even within 30 s (reached after %v; 0: never in 40 s)", back)
		}
		t.Logf("share back after %v; %d requests in all", back, len(reqs))
	})
}

// TestBalanceBusyGPU (case e): two backends whose agents report the same
// CPU and memory but GPU utilization 0.95 and 0.2: the busy node serves
// less, and its weight, the seed's base × (1 − load), shows in
// vigil_backend_weight and /admin/backends.
func TestBalanceBusyGPU(t *testing.T) {
	var cfgs []config.Backend
	gpus := []float64{0.95, 0.2}
	for i, gpu := range gpus {
		_, u := startSim(t, "m1", func(k *sim.Knobs) { k.TTFT, k.ITL = 20*time.Millisecond, 2*time.Millisecond })
		a := startAgent(t)
		a.set(t, map[string]float64{"cpu": 0.3, "mem": 0.4, "gpu": gpu, "gpu_mem": 0.5})
		c := backend(fmt.Sprintf("b%d", i), u, "m1")
		c.Agent = a.URL
		cfgs = append(cfgs, c)
	}
	gw := startGateway(t, cfgs, func(c *config.Config) { c.Balancer.ScrapeInterval = 100 * time.Millisecond })
	lw := config.Default().Balancer.LoadWeights
	want := make([]float64, len(gpus))
	for i, gpu := range gpus {
		want[i] = wantWeight(100, lw, map[string]float64{"cpu": 0.3, "mem": 0.4, "gpu": gpu, "gpu_mem": 0.5})
	}
	waitFor(t, "weights from the agents", func() bool {
		snap := gw.Balancer().Snapshot()
		return math.Abs(snap.Backends[0].Weight-want[0]) < 1e-9 && math.Abs(snap.Backends[1].Weight-want[1]) < 1e-9
	})
	reqs := drive(t, gw, 4, 400, nil)
	s := shareOf(reqs)
	t.Logf("weights %.1f (GPU 0.95) and %.1f (GPU 0.2); shares %v", want[0], want[1], s)
	if !(s["b0"] < s["b1"]) {
		t.Errorf("the GPU-0.95 node served %.1f %%, the GPU-0.2 node %.1f %%: want less", 100*s["b0"], 100*s["b1"])
	}
	adm := adminBackends(t, gw)
	var n0 int64
	for _, r := range reqs {
		if r.backend == "b0" {
			n0++
		}
	}
	if p0, p1 := adm["b0"].Picks, adm["b1"].Picks; p0+p1 != int64(len(reqs)) || p0 != n0 {
		t.Errorf("/admin/backends picks %d and %d, want the %d requests as served", p0, p1, len(reqs))
	}
	if c0, c1 := adm["b0"].Cost, adm["b1"].Cost; !(c0 > 0 && c1 > 0) {
		t.Errorf("/admin/backends cost %v and %v, want > 0", c0, c1)
	}
	for i := range gpus {
		name := fmt.Sprintf("b%d", i)
		if a := adm[name]; math.Abs(a.Weight-want[i]) > 1e-9 {
			t.Errorf("%s: /admin/backends weight %v, want %v", name, a.Weight, want[i])
		}
		if m := metricValue(t, gw, `vigil_backend_weight{backend="`+name+`"}`); math.Abs(m-want[i]) > 1e-6 {
			t.Errorf("%s: vigil_backend_weight %v, want %v", name, m, want[i])
		}
	}
}
