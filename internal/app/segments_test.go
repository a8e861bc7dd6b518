package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state/redistest"
	"github.com/vigil-gw/vigil/test/alertmanagertest"
)

// TestSegmentsBoundedNames: 10,000 distinct model names, all served (a
// backend with models: [] in front of a server that answers any name),
// amid steady traffic of one real model. The segments stay within
// analyzers.segments.max_models (and "other"), the real model has one,
// and every model label in /metrics and every segment series in the
// shared store (a real Redis) stays within the same bound.
func TestSegmentsBoundedNames(t *testing.T) {
	rs := redistest.Start(t)
	srv := httptest.NewServer(sim.New(sim.Options{Model: "real", Seed: 1, AnyModel: true,
		Knobs: sim.Knobs{OutputTokens: 2, Confidence: 0.8}}).Handler())
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
	cfg.State.Redis.URL = rs.URL()
	max := cfg.Analyzers.Segments.MaxModels
	a, url := startApp(t, cfg)

	const names = 10_000
	var wg sync.WaitGroup
	const workers = 8
	for w := range workers {
		wg.Go(func() {
			for i := w; i < names; i += workers {
				model := fmt.Sprintf("name-%05d", i)
				if i%4 == 0 {
					model = "real"
				}
				body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"q%d"}]}`, model, i)
				resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: HTTP %d", model, resp.StatusCode)
					return
				}
				if i%500 == 0 {
					a.pipeline.Evaluate() // rebalances, as every analyzers.interval
				}
			}
		})
	}
	wg.Wait()
	s := a.pipeline.Evaluate()
	a.pipeline.Flush(context.Background())

	segs := map[string]bool{}
	for _, g := range s.Segments {
		segs[g.Model] = true
	}
	if len(segs) > max+1 || !segs["real"] || !segs["other"] {
		t.Errorf("%d segments, want at most %d with real and other: %v", len(segs), max+1, segs)
	}

	// /metrics: the model labels of every family. The segments' are
	// within their bound; the gateway's own request metrics have theirs
	// (the first 64 names, then "other").
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	label := regexp.MustCompile(`^(\w+)\{(?:.*,)?(?:model|gen_ai_request_model)="([^"]*)"`)
	family := map[string]map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	lines := 0
	for sc.Scan() {
		lines++
		if m := label.FindStringSubmatch(sc.Text()); m != nil {
			name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")
			if family[name] == nil {
				family[name] = map[string]bool{}
			}
			family[name][m[2]] = true
		}
	}
	for name, vs := range family {
		bound := 65
		if strings.HasPrefix(name, "vigil_segment_") {
			bound = max + 1
		}
		if len(vs) > bound {
			t.Errorf("/metrics: %s has %d model values, want at most %d", name, len(vs), bound)
		}
	}
	if len(family["vigil_segment_requests"]) == 0 {
		t.Error("/metrics: no vigil_segment_requests series")
	}
	t.Logf("/metrics: %d lines, %d families with a model label", lines, len(family))

	// The shared store: the segment series, by name.
	opt, err := redis.ParseURL(rs.URL())
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	series := map[string]bool{}
	iter := rc.Scan(context.Background(), 0, "*{m/*", 1000).Iterator()
	for iter.Next(context.Background()) {
		k := iter.Val()
		series[k[strings.Index(k, "{")+1:strings.Index(k, "}")]] = true
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	models := map[string]bool{}
	for s := range series {
		models[strings.SplitN(s, "/", 3)[1]] = true
	}
	if len(models) > max+1 || !models["real"] {
		t.Errorf("the store holds series of %d segments, want at most %d with real: %v", len(models), max+1, models)
	}
	t.Logf("the store: %d segment series of %d segments", len(series), len(models))
}

// TestSegmentsReplicasAgree: two replicas share a real Redis; one sees
// only model x, the other only y. After the replicas exchange their
// windows, each keeps both segments, and each segment's windows count
// exactly the responses the two served, once.
func TestSegmentsReplicasAgree(t *testing.T) {
	rs := redistest.Start(t)
	srv := httptest.NewServer(sim.New(sim.Options{Model: "x", Seed: 1, AnyModel: true,
		Knobs: sim.Knobs{OutputTokens: 3, Confidence: 0.8}}).Handler())
	t.Cleanup(srv.Close)
	cfg := testConfig(srv.URL)
	cfg.State.Redis.URL = rs.URL()
	// One window holding everything, so that its count is the total.
	cfg.Analyzers.MinRequests, cfg.Analyzers.Window = 1_000_000, time.Hour
	a, aURL := startApp(t, cfg)
	b, bURL := startApp(t, cfg)
	send := func(url, model string, n int) {
		for i := range n {
			body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"logprobs":true,"messages":[{"role":"user","content":"q%d"}]}`, model, i)
			resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: HTTP %d", model, resp.StatusCode)
			}
		}
	}
	send(aURL, "x", 60)
	send(bURL, "y", 40)
	want := map[string]int64{"x": 60, "y": 40}
	ctx := context.Background()
	for _, r := range []*App{a, b} {
		testutil.WaitFor(t, "responses observed", func() bool {
			var n int64
			for _, g := range r.pipeline.Evaluate().Segments {
				n += g.Requests
			}
			return n == want["x"] || n == want["y"]
		})
	}
	// Each replica writes its windows; at a flush after the other's it
	// reads the other's segment counts, at the evaluation after that it
	// makes the other's segments, and at its next flush it reads their
	// series.
	for range 3 {
		for _, r := range []*App{a, b} {
			r.pipeline.Flush(ctx)
		}
		for _, r := range []*App{a, b} {
			r.pipeline.Evaluate()
		}
	}
	for i, r := range []*App{a, b} {
		got := map[string]int64{}
		for _, g := range r.pipeline.Evaluate().Segments {
			if g.Confidence != nil {
				got[g.Model] = g.Confidence.Responses
			}
			if g.Requests != want[g.Model] || g.Latency == nil || g.Latency.Responses != want[g.Model] {
				t.Errorf("replica %d, segment %s: %d requests, latency %+v; want %d of each", i, g.Model, g.Requests, g.Latency, want[g.Model])
			}
			if len(g.Backends) != 1 || g.Backends[0].Backend != "a" || g.Backends[0].Responses != want[g.Model] {
				t.Errorf("replica %d, segment %s: latency by backend %+v, want backend a with %d responses", i, g.Model, g.Backends, want[g.Model])
			}
		}
		if got["x"] != 60 || got["y"] != 40 {
			t.Errorf("replica %d: responses with logprobs by segment %v, want x 60 and y 40", i, got)
		}
	}
}

// twoModels is a gateway in front of a simulator of "big" (confidence
// 0.9) and one of "small" (0.55), logprobs injected into every request,
// alerting every period to a real Alertmanager, with windows of seconds.
type twoModels struct {
	*alertScenario
	sims  map[string]*sim.Server
	share atomic.Uint64 // float64 bits: the share of requests to big
}

func newTwoModels(t *testing.T, seed int64) *twoModels {
	am := alertmanagertest.Start(t)
	m := &twoModels{sims: map[string]*sim.Server{}}
	cfg := testConfig("")
	cfg.Backends = nil
	for _, model := range []string{"big", "small"} {
		k := sim.DefaultKnobs()
		k.TTFT, k.ITL, k.OutputTokens = 0, 0, 8
		k.Confidence = map[string]float64{"big": 0.9, "small": 0.55}[model]
		s := sim.New(sim.Options{Model: model, Seed: seed, Knobs: k})
		srv := httptest.NewServer(s.Handler())
		t.Cleanup(srv.Close)
		m.sims[model] = s
		cfg.Backends = append(cfg.Backends, config.Backend{Name: model, URL: srv.URL, Kind: "openai", Weight: 100, Models: []string{model}})
	}
	const period = 2 * time.Second
	cfg.Alerts.AlertmanagerURL, cfg.Alerts.Period = am.URL(), period
	an := &cfg.Analyzers
	an.Bucket, an.Window, an.MinRequests, an.Interval = time.Second, 10*time.Second, 40, time.Second
	an.Seed = seed
	an.Confidence.Inject.SampleRatio = 1
	if err := cfg.ValidateServe(); err != nil {
		t.Fatal(err)
	}
	a, url, _ := serveApp(t, cfg)
	m.alertScenario = &alertScenario{t: t, am: am, url: url, period: period, periods: a.pipeline.AlertPeriods}
	return m
}

// setShare sends the share big of the requests to big from now on.
func (m *twoModels) setShare(big float64) { m.share.Store(math.Float64bits(big)) }

// load sends chat requests from n clients, at most perPeriod in an alert
// period, each to big with the current share, until stop is closed.
func (m *twoModels) load(seed uint64, n, perPeriod int, stop <-chan struct{}) *sync.WaitGroup {
	rngs := make([]*rand.Rand, n)
	for w := range rngs {
		rngs[w] = rand.New(rand.NewPCG(seed, uint64(w)))
	}
	return m.pace(n, perPeriod, stop, func(w, i int) string {
		model := "small"
		if rngs[w].Float64() < math.Float64frombits(m.share.Load()) {
			model = "big"
		}
		return fmt.Sprintf(`{"model":%q,"max_tokens":8,"messages":[{"role":"user","content":"w%d q%d"}]}`, model, w, i)
	})
}

// pin pins the baseline through the admin API.
func (m *twoModels) pin() {
	m.t.Helper()
	resp, err := http.Post(m.url+"/admin/baseline", "application/json", nil)
	if err != nil {
		m.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.t.Fatalf("POST /admin/baseline: %d %s", resp.StatusCode, body)
	}
}

// TestSegmentsMixChangeThroughGateway: 80 % of the traffic to big, the
// baseline pinned, then 20 %: no model changed, and in three seeds no
// confidence or output alert goes pending or fires over 10 alert periods,
// though the fleet's mean logprob falls by more than a decay's minimum.
func TestSegmentsMixChangeThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: half a minute of traffic per seed")
	}
	for seed := range int64(3) {
		t.Run(fmt.Sprint("seed", seed+1), func(t *testing.T) {
			t.Parallel()
			m := newTwoModels(t, seed+1)
			m.setShare(0.8)
			stop := make(chan struct{})
			wg := m.load(uint64(seed+1), 4, 800, stop)
			defer func() { close(stop); wg.Wait() }()
			m.waitPeriods(4)
			m.pin()
			m.setShare(0.2)
			for range 10 {
				m.waitPeriods(1)
				for _, name := range []string{"VigilConfidenceDecay", "VigilOutputDrift"} {
					if as := m.vigilAlerts(name, nil); len(as) > 0 {
						t.Fatalf("%s after a mix change: %+v", name, as)
					}
				}
			}
			code, body := testutil.Get(t, m.url+"/admin/signals")
			var sig struct {
				Confidence struct {
					State string
					Drop  float64
				}
			}
			if err := json.Unmarshal(body, &sig); code != http.StatusOK || err != nil {
				t.Fatalf("GET /admin/signals: %d %v", code, err)
			}
			if sig.Confidence.State == "decay" || sig.Confidence.Drop < 0.05 {
				t.Errorf("fleet confidence %+v, want not decay, with the mix's drop (> 5%%) in its figures", sig.Confidence)
			}
			t.Logf("fleet confidence drop after the mix change: %.3f, state %s", sig.Confidence.Drop, sig.Confidence.State)
		})
	}
}

// TestSegmentsDecayThroughGateway: 90 % big, 10 % small, the baseline
// pinned; small's confidence falls from 0.55 to 0.40. VigilConfidenceDecay
// fires labelled model="small" within 10 alert periods and reaches
// Alertmanager so labelled; big's never fires.
func TestSegmentsDecayThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: half a minute of traffic")
	}
	m := newTwoModels(t, 1)
	m.setShare(0.9)
	stop := make(chan struct{})
	wg := m.load(1, 4, 800, stop)
	defer func() { close(stop); wg.Wait() }()
	m.waitPeriods(6)
	m.pin()
	k := m.sims["small"].Knobs()
	k.Confidence = 0.40
	m.sims["small"].SetKnobs(k)
	from := m.periods()
	want := map[string]string{"model": "small"}
	_, took := m.fires("VigilConfidenceDecay", want, from, 10)
	l := m.delivered("VigilConfidenceDecay", want)
	t.Logf("VigilConfidenceDecay{model=small} after %d alert periods: %v", took, l)
	if as := m.vigilAlerts("VigilConfidenceDecay", map[string]string{"model": "big"}); len(as) > 0 {
		t.Errorf("big's confidence alerted: %+v", as)
	}
}
