package main

// The balance suite (-suite balance): Vigil's balancing
// strategies side by side against simulated backends (`vigil sim`), each
// with a load agent (`vigil agent --allow-override`) whose readings are
// pinned, under closed-loop streaming load. Five cases, each run once per
// strategy with a fresh `vigil serve`; balance_load.go drives the load,
// balance_report.go writes balance.md, balance.json and balance.png.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"time"
)

const suiteBalance = "balance"

// balanceSettings are the balance suite's knobs, set once from flags.
type balanceSettings struct {
	// duration is the measured part of each run; case d's slow phase
	// lasts twice as long.
	duration time.Duration
	clients  int    // concurrent closed-loop clients
	cases    string // case ids, comma-separated
}

func (b balanceSettings) validate() error {
	var errs []error
	if b.duration < time.Second {
		errs = append(errs, errors.New("-balance-duration must be at least 1s"))
	}
	if b.clients < 1 {
		errs = append(errs, errors.New("-balance-clients must be at least 1"))
	}
	if _, err := selectCases(b.cases); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// The fleet's pace: every backend answers a streamed request of
// balanceTokens tokens after fastTTFT, then a token every simITL, so that
// a request takes about 35 ms and the load generator reaches a few hundred
// requests a second on two cores. The slow backend of cases a and d takes
// slowTTFT, ten times as long.
const (
	simModel      = "sim-model"
	fastTTFT      = 20 * time.Millisecond
	slowTTFT      = 200 * time.Millisecond
	simITL        = 2 * time.Millisecond
	balanceTokens = 8
	simMaxSeqs    = 64
	// balanceWarmup is load before each run's measured part, not counted:
	// the dynamic balancer scrapes agents and metrics every 2 s by
	// default and needs a reading or two before its weights mean anything.
	balanceWarmup = 3 * time.Second
	// pinnedLoad is what every agent reports for CPU, memory, GPU and GPU
	// memory unless a case says otherwise.
	pinnedLoad = 0.3
	// shareWindow is the sliding window of case d's share; recoveryCap is
	// how long after the recovery case d waits for the share to come back
	// before it gives up; recoveredShare is the fraction of an even share
	// that counts as recovered.
	shareWindow    = 5 * time.Second
	recoveryCap    = 40 * time.Second
	recoveredShare = 0.8
)

// balanceBody is a short streamed chat request; the gateway asks the
// backend for usage on its own (usage.inject) and strips it again.
var balanceBody = fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"Say hello."}],"max_tokens":%d,"stream":true}`, simModel, balanceTokens)

// strategies are the balancer.strategy values compared in every case, in
// the order of every table.
var strategies = []string{"dynamic", "round_robin", "least_request"}

// fleet is the simulated backends and their agents, started once for the
// suite and reset before every run.
type fleet struct {
	names  []string // b1, b2, ...
	sims   []string // base URLs
	agents []string // base URLs
}

// startFleet starts n simulators and n agents on free ports and waits
// until each serves.
func startFleet(c config, ps *procs, n int) (*fleet, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	env := cleanEnv()
	f := &fleet{}
	for i := range n {
		name := fmt.Sprintf("b%d", i+1)
		simAddr, agentAddr := ports[2*i], ports[2*i+1]
		sim, err := ps.start("sim-"+name, c.vigil, []string{"sim", "--listen", simAddr, "--model", simModel,
			"--ttft", fastTTFT.String(), "--itl", simITL.String(), "--output-tokens", fmt.Sprint(balanceTokens),
			"--max-num-seqs", fmt.Sprint(simMaxSeqs)}, env, nil)
		if err != nil {
			return nil, err
		}
		if err := sim.waitReady(10*time.Second, func() bool { return httpOK("http://" + simAddr + "/health") }); err != nil {
			return nil, err
		}
		agent, err := ps.start("agent-"+name, c.vigil, []string{"agent", "--allow-override", "--listen", agentAddr}, env, nil)
		if err != nil {
			return nil, err
		}
		if err := agent.waitReady(10*time.Second, func() bool { return httpOK("http://" + agentAddr + "/healthz") }); err != nil {
			return nil, err
		}
		f.names = append(f.names, name)
		f.sims = append(f.sims, "http://"+simAddr)
		f.agents = append(f.agents, "http://"+agentAddr)
	}
	return f, nil
}

// reset gives every backend the fleet's pace and pins every agent to
// pinnedLoad, undoing whatever the previous run's case changed.
func (f *fleet) reset(ctx context.Context) error {
	for i := range f.sims {
		if err := f.setKnobs(ctx, i, fmt.Sprintf(`{"ttft":%q,"itl":%q,"output_tokens":%d,"max_num_seqs":%d}`,
			fastTTFT, simITL, balanceTokens, simMaxSeqs)); err != nil {
			return err
		}
		if err := f.pin(ctx, i, pinnedLoad); err != nil {
			return err
		}
	}
	return nil
}

// setKnobs changes backend i's simulator knobs (POST /sim/knobs; JSON as
// sim.Knobs reads it).
func (f *fleet) setKnobs(ctx context.Context, i int, body string) error {
	return send(ctx, http.MethodPost, f.sims[i]+"/sim/knobs", body)
}

// pin makes backend i's agent report pinnedLoad for CPU, memory and GPU
// memory, and gpu for GPU utilization.
func (f *fleet) pin(ctx context.Context, i int, gpu float64) error {
	return send(ctx, http.MethodPut, f.agents[i]+"/v1/load",
		fmt.Sprintf(`{"cpu":%g,"mem":%g,"gpu":%g,"gpu_mem":%g}`, pinnedLoad, pinnedLoad, gpu, pinnedLoad))
}

// simStats is the part of GET /sim/stats the suite reads.
type simStats struct {
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
}

// stats reads backend i's request counters.
func (f *fleet) stats(ctx context.Context, i int) (simStats, error) {
	var s simStats
	err := getJSON(ctx, f.sims[i]+"/sim/stats", "", &s)
	return s, err
}

// drain waits until no backend has a request running or waiting, so that
// a run does not start with the previous one's queue.
func (f *fleet) drain(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		busy := ""
		for i := range f.sims {
			s, err := f.stats(ctx, i)
			if err != nil {
				return err
			}
			if s.Running+s.Waiting > 0 {
				busy = fmt.Sprintf("%s: %d running, %d waiting", f.names[i], s.Running, s.Waiting)
				break
			}
		}
		if busy == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backends still busy 30 s after the load stopped (%s)", busy)
		}
		if sleep(ctx, 100*time.Millisecond); ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// balanceCase is one situation the strategies are compared in.
type balanceCase struct {
	id, title string
	backends  int
	// target is the case's target, as the report states it.
	target string
	// setup changes the fleet from its reset state before the gateway
	// starts.
	setup func(ctx context.Context, f *fleet) error
	// recovery makes the run case d's: a slow phase, then the slow
	// backend recovered, instead of a steady run.
	recovery bool
	// figure is the case's figure for one run, and how it reads.
	figure func(r *balanceRun) (float64, string)
	// check evaluates the target from the case's runs, by strategy.
	check func(runs map[string]*balanceRun) (string, bool)
}

// The slow (or queueing) backend of cases a, b and d is the last one.
const odd = "b3"

var balanceCases = []balanceCase{
	{
		id: "a", title: "3 backends, b3's TTFT 10× the others'", backends: 3,
		target: "dynamic: b3 serves < 5 % of requests",
		setup: func(ctx context.Context, f *fleet) error {
			return f.setKnobs(ctx, 2, fmt.Sprintf(`{"ttft":%q}`, slowTTFT))
		},
		figure: func(r *balanceRun) (float64, string) {
			return r.Shares[odd], fmt.Sprintf("b3 %s", pct(r.Shares[odd]))
		},
		check: func(runs map[string]*balanceRun) (string, bool) {
			s := runs["dynamic"].Shares[odd]
			return "b3 " + pct(s), runs["dynamic"].Requests > 0 && s < 0.05
		},
	},
	{
		id: "b", title: "3 backends, b3 with max_num_seqs 1 (a queue forms there)", backends: 3,
		target: "P99 TTFT: dynamic ≤ 0.5 × round_robin",
		setup: func(ctx context.Context, f *fleet) error {
			return f.setKnobs(ctx, 2, `{"max_num_seqs":1}`)
		},
		figure: func(r *balanceRun) (float64, string) {
			return r.TTFTP99Ms, fmt.Sprintf("P99 %.0f ms; b3 queue ≤ %d", r.TTFTP99Ms, r.PeakWaiting[odd])
		},
		check: func(runs map[string]*balanceRun) (string, bool) {
			d, rr := runs["dynamic"].TTFTP99Ms, runs["round_robin"].TTFTP99Ms
			return fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×)", d, rr, ratio(d, rr)),
				runs["dynamic"].Requests > 0 && runs["round_robin"].Requests > 0 && d <= 0.5*rr
		},
	},
	{
		id: "c", title: "3 equal backends", backends: 3,
		target: "dynamic: every backend within ±5 % (relative) of an even share",
		setup:  func(context.Context, *fleet) error { return nil },
		figure: func(r *balanceRun) (float64, string) {
			d := maxDeviation(r)
			return d, fmt.Sprintf("max deviation %s", pct(d))
		},
		check: func(runs map[string]*balanceRun) (string, bool) {
			d := maxDeviation(runs["dynamic"])
			return "max deviation " + pct(d), runs["dynamic"].Requests > 0 && d <= 0.05
		},
	},
	{
		id: "d", title: "3 backends, b3's TTFT 10× for a while, then recovered", backends: 3,
		target: fmt.Sprintf("dynamic: b3 loses traffic while slow (share over the last %g s under %.0f %% of an even share) and wins it back (≥ %.0f %%) ≤ 30 s after recovery",
			shareWindow.Seconds(), 100*recoveredShare, 100*recoveredShare),
		setup: func(ctx context.Context, f *fleet) error {
			return f.setKnobs(ctx, 2, fmt.Sprintf(`{"ttft":%q}`, slowTTFT))
		},
		recovery: true,
		figure: func(r *balanceRun) (float64, string) {
			rc := r.Recovery
			if rc == nil {
				return 0, "—"
			}
			if rc.Seconds == nil {
				return rc.CapS, fmt.Sprintf("not within %.0f s (b3 %s before)", rc.CapS, pct(rc.ShareBefore))
			}
			return *rc.Seconds, fmt.Sprintf("%.1f s (b3 %s before)", *rc.Seconds, pct(rc.ShareBefore))
		},
		check: func(runs map[string]*balanceRun) (string, bool) {
			rc := runs["dynamic"].Recovery
			switch {
			case rc == nil:
				return "no measurement", false
			case rc.ShareBefore >= recoveredShare/float64(len(runs["dynamic"].Shares)):
				// Recovering from nothing proves nothing: the target
				// is about winning traffic back.
				return fmt.Sprintf("nothing to recover: b3 kept %s while slow", pct(rc.ShareBefore)), false
			case rc.Seconds == nil:
				return fmt.Sprintf("not within %.0f s", rc.CapS), false
			}
			return fmt.Sprintf("%.1f s (b3 %s before)", *rc.Seconds, pct(rc.ShareBefore)), *rc.Seconds <= 30
		},
	},
	{
		id: "e", title: "2 backends, GPU busy 0.95 on b1, 0.2 on b2 (CPU, memory equal)", backends: 2,
		target: "dynamic: b1 serves less than b2",
		setup: func(ctx context.Context, f *fleet) error {
			return errors.Join(f.pin(ctx, 0, 0.95), f.pin(ctx, 1, 0.2))
		},
		figure: func(r *balanceRun) (float64, string) {
			return r.Shares["b1"], fmt.Sprintf("b1 %s, b2 %s; weight %s / %s", pct(r.Shares["b1"]), pct(r.Shares["b2"]),
				weightPair(r.Weights, r.AdminWeights, "b1"), weightPair(r.Weights, r.AdminWeights, "b2"))
		},
		check: func(runs map[string]*balanceRun) (string, bool) {
			r := runs["dynamic"]
			return fmt.Sprintf("b1 %s vs b2 %s", pct(r.Shares["b1"]), pct(r.Shares["b2"])),
				r.Requests > 0 && r.Shares["b1"] < r.Shares["b2"]
		},
	},
}

// selectCases returns the cases named in list (ids, comma-separated), in
// suite order.
func selectCases(list string) ([]balanceCase, error) {
	return selectByID(list, balanceCases, func(c balanceCase) string { return c.id }, "-balance-cases")
}

// selectByID returns the items of all named in list (ids, comma-separated),
// in all's order; an unknown id, or none at all, is an error naming flag.
func selectByID[T any](list string, all []T, id func(T) string, flag string) ([]T, error) {
	want := map[string]bool{}
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v != "" {
			want[v] = true
		}
	}
	var out []T
	ids := make([]string, len(all))
	for i, c := range all {
		ids[i] = id(c)
		if want[ids[i]] {
			out = append(out, c)
			delete(want, ids[i])
		}
	}
	if len(want) > 0 || len(out) == 0 {
		return nil, fmt.Errorf("%s: want ids among %s, got %q", flag, strings.Join(ids, ","), list)
	}
	return out, nil
}

// gatewayConf is `vigil serve` for one run: the first n backends with
// their agents and metrics endpoints, the strategy under test, and nothing
// that needs another service or costs CPU the backends could use
// (analyzers, span export, access log); the balancer's other settings are
// the defaults.
func gatewayConf(listen string, f *fleet, n int, strategy string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nbackends:\n", listen)
	for i := range n {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kind: openai\n    models: [%s]\n    agent: %s\n    metrics: %s/metrics\n",
			f.names[i], f.sims[i], simModel, f.agents[i], f.sims[i])
	}
	fmt.Fprintf(&b, "balancer:\n  strategy: %s\n", strategy)
	b.WriteString(quietConf)
	return b.String()
}

// runBalance runs the balance suite and writes its report. An error means
// the harness failed; targets missed are a report, not an error.
func runBalance(ctx context.Context, c config) error {
	began := time.Now()
	cases, err := selectCases(c.balance.cases)
	if err != nil {
		return err
	}
	if err := clearReport(c, "balance"); err != nil {
		return err
	}
	dir, cleanup, err := workDir(c)
	if err != nil {
		return err
	}
	defer cleanup()

	n := 0
	for _, cs := range cases {
		n = max(n, cs.backends)
	}
	phase("starting %d simulated backends (vigil sim) and their agents (vigil agent)", n)
	ps := &procs{dir: dir}
	defer ps.stopAll()
	f, err := startFleet(c, ps, n)
	if err != nil {
		return err
	}
	res := newBalanceResults(c, began)
	for _, cs := range cases {
		cr := caseResult{ID: cs.id, Title: cs.title, Target: cs.target, Backends: f.names[:cs.backends]}
		runs := map[string]*balanceRun{}
		phase("case %s: %s", cs.id, cs.title)
		for _, strategy := range strategies {
			r, err := runCase(ctx, c, f, dir, cs, strategy)
			if err != nil {
				return fmt.Errorf("case %s, %s: %w", cs.id, strategy, err)
			}
			r.Figure, r.Shown = cs.figure(r)
			runs[strategy] = r
			cr.Runs = append(cr.Runs, r)
			fmt.Printf("   %-13s %5d requests (%d errors)  %s  TTFT p50 %5.0f ms  p99 %5.0f ms  %s\n",
				strategy, r.Requests, r.Errors, sharesText(r, cr.Backends), r.TTFTP50Ms, r.TTFTP99Ms, r.Shown)
		}
		cr.Shown, cr.Pass = cs.check(runs)
		fmt.Printf("   target: %s: %s %s\n", cs.target, cr.Shown, passWord(cr.Pass))
		res.Cases = append(res.Cases, cr)
	}
	res.finish(began)
	if err := res.write(c.out); err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.markdownTable())
	fmt.Println()
	res.printChecks(os.Stdout)
	files := "balance.md, balance.json"
	if res.hasTimeline() {
		files += ", balance.png"
	}
	fmt.Printf("\nwrote %s in %s/ in %s\n", files, c.out, time.Since(began).Round(time.Second))
	return nil
}

// runCase runs one case under one strategy: resets the fleet, applies the
// case, starts a gateway of its own, loads it, reads its weights and
// stops it.
func runCase(ctx context.Context, c config, f *fleet, dir string, cs balanceCase, strategy string) (*balanceRun, error) {
	if err := f.drain(ctx); err != nil {
		return nil, err
	}
	if err := f.reset(ctx); err != nil {
		return nil, err
	}
	if err := cs.setup(ctx, f); err != nil {
		return nil, err
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	gw := &lab{ps: &procs{dir: dir}}
	defer gw.ps.stopAll()
	name := fmt.Sprintf("vigil-%s-%s", cs.id, strategy)
	if _, err := gw.startVigil(c, dir, name, ports[0], gatewayConf(ports[0], f, cs.backends, strategy), cleanEnv(), false); err != nil {
		return nil, err
	}
	base := "http://" + ports[0]

	r := &balanceRun{Strategy: strategy, PeakWaiting: map[string]int64{}}
	load := startLoad(ctx, c.balance.clients, func(int) func() request {
		return func() request { return request{url: base + chatPath, body: balanceBody} }
	})
	defer load.stop()
	measured := balanceWarmup + c.balance.duration
	slowUntil := balanceWarmup + 2*c.balance.duration
	var recoveredAt time.Duration // case d: since the load began; 0 before
	for ctx.Err() == nil {
		sleep(ctx, 250*time.Millisecond)
		for i := range cs.backends {
			if s, err := f.stats(ctx, i); err == nil {
				r.PeakWaiting[f.names[i]] = max(r.PeakWaiting[f.names[i]], s.Waiting)
			}
		}
		now := load.elapsed()
		if !cs.recovery {
			if now >= measured {
				break
			}
			continue
		}
		if recoveredAt == 0 {
			if now >= slowUntil {
				if err := f.setKnobs(ctx, 2, fmt.Sprintf(`{"ttft":%q}`, fastTTFT)); err != nil {
					return nil, err
				}
				recoveredAt = load.elapsed()
			}
			continue
		}
		// Stop a second after the share came back as far as the
		// samples so far tell (requests still in flight are missing, so
		// this errs late), or at the cap; the report computes the
		// recovery anew from every sample.
		if t, ok := recoveryTime(load.snapshot(), odd, cs.backends, recoveredAt); (ok && now >= recoveredAt+t+time.Second) || now >= recoveredAt+recoveryCap {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// The weights as the run leaves them, before the load stops.
	r.Weights, err = backendWeights(base)
	if err != nil {
		return nil, fmt.Errorf("gateway /metrics: %w", err)
	}
	r.AdminWeights, err = adminWeights(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("gateway /admin/backends: %w", err)
	}
	samples := load.stop()
	from, to := balanceWarmup, measured
	if cs.recovery {
		to = time.Duration(1<<63 - 1)
	}
	r.summarize(samples, f.names[:cs.backends], from, to)
	if cs.recovery {
		r.Recovery = newRecovery(samples, odd, cs.backends, recoveredAt, balanceWarmup)
	}
	return r, nil
}

// backendWeights reads vigil_backend_weight of every backend from the
// gateway's /metrics.
func backendWeights(base string) (map[string]float64, error) {
	text, err := httpBody(base + "/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, `vigil_backend_weight{backend="`)
		if !ok {
			continue
		}
		name, rest, ok := strings.Cut(rest, `"}`)
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(strings.TrimSpace(rest), &v); err == nil {
			out[name] = v
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no vigil_backend_weight series")
	}
	return out, nil
}

// adminWeights reads every backend's weight from GET /admin/backends.
func adminWeights(ctx context.Context, base string) (map[string]float64, error) {
	var list []struct {
		Name   string  `json:"name"`
		Weight float64 `json:"weight"`
	}
	if err := getJSON(ctx, base+"/admin/backends", adminToken, &list); err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, b := range list {
		out[b.Name] = b.Weight
	}
	return out, nil
}

// send makes a request with a JSON body and wants a 2xx answer.
func send(ctx context.Context, method, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return nil
}

// getJSON GETs url, with a bearer token unless it is empty, into v.
func getJSON(ctx context.Context, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	return json.Unmarshal(b, v)
}

// controlClient makes the suite's own requests (knobs, pins, stats,
// weights), apart from the load's connections.
var controlClient = &http.Client{Timeout: 5 * time.Second}

// maxDeviation is the largest relative distance of a backend's share from
// an even share.
func maxDeviation(r *balanceRun) float64 {
	if len(r.Shares) == 0 {
		return 0
	}
	even := 1 / float64(len(r.Shares))
	var d float64
	for _, s := range r.Shares {
		d = max(d, math.Abs(s-even)/even)
	}
	return d
}

// weightPair shows a backend's weight from /metrics and, when it differs,
// from /admin/backends.
func weightPair(metrics, admin map[string]float64, name string) string {
	m, a := metrics[name], admin[name]
	if math.Abs(m-a) < 0.05 {
		return fmt.Sprintf("%.0f", m)
	}
	return fmt.Sprintf("%.0f (admin %.0f)", m, a)
}

// sharesText lists the backends' shares in order.
func sharesText(r *balanceRun, names []string) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, pct(r.Shares[n])))
	}
	return strings.Join(parts, " · ")
}

// pct formats a share as a percentage.
func pct(x float64) string { return fmt.Sprintf("%.1f %%", 100*x) }
