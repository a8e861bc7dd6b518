package main

// The prefix suite (-suite prefix): Vigil's balancing strategies side by
// side in front of simulated backends that keep vLLM's prefix cache
// (`vigil sim` with prefix_cache_blocks): a cold prompt pays its prefill
// per token, a prompt whose leading blocks a backend still holds pays only
// for the rest. Many tenants, each with a system prompt of its own, send
// streamed chat requests; a strategy that sends a tenant where its prefix
// is cached answers sooner and keeps the caches from thrashing. Three
// cases (uniform tenants, one hot tenant, two gateway replicas), each run
// once per strategy with fresh `vigil serve`s and emptied caches;
// prefix_report.go writes prefix.md, prefix.json and prefix.png.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

const suitePrefix = "prefix"

// prefixSettings are the prefix suite's knobs, set once from flags.
type prefixSettings struct {
	duration time.Duration // measured part of each run
	clients  int           // concurrent closed-loop clients, split among the replicas
	cases    string        // case ids, comma-separated
	// set is balancer.prefix settings for the gateways of the prefix
	// strategy, "key=value,..." (tuning without rebuilding Vigil).
	set string
	// strategies limits the strategies run, comma-separated (tuning:
	// round_robin and prefix alone take half the time); "" is all.
	strategies string
}

func (p prefixSettings) validate() error {
	var errs []error
	if p.duration < time.Second {
		errs = append(errs, errors.New("-prefix-duration must be at least 1s"))
	}
	if p.clients < 2 {
		errs = append(errs, errors.New("-prefix-clients must be at least 2 (the replicas case splits them)"))
	}
	if _, err := selectPrefixCases(p.cases); err != nil {
		errs = append(errs, err)
	}
	if _, err := prefixSetYAML(p.set); err != nil {
		errs = append(errs, err)
	}
	for s := range strings.SplitSeq(p.strategies, ",") {
		if s = strings.TrimSpace(s); s != "" && !slices.Contains(prefixStrategies, s) {
			errs = append(errs, fmt.Errorf("-prefix-strategies: want names among %s, got %q", strings.Join(prefixStrategies, ","), s))
		}
	}
	return errors.Join(errs...)
}

// The fleet: three backends with a small batch (prefixMaxSeqs), so that a
// backend has a real capacity and a hot tenant can overflow one. A request
// waits prefixTTFT plus prefixPerToken for every prompt token its backend
// does not hold in its cache: a cold system prompt of about 500 tokens
// costs about 515 ms, a warm one about 15 ms plus the user message's few
// tokens, 15 to 30 times less.
const (
	prefixTenants    = 12
	prefixTTFT       = 15 * time.Millisecond
	prefixPerToken   = time.Millisecond
	prefixITL        = 2 * time.Millisecond
	prefixOutTokens  = 8
	prefixMaxSeqs    = 4
	prefixBlockSize  = 16
	prefixBackends   = 3
	prefixWarmup     = 4 * time.Second
	prefixSeed       = 20261202
	prefixSystemMin  = 2000 // characters of a tenant's system prompt: about 500 tokens as the simulator counts
	prefixStrategyID = "prefix"
	// prefixCacheShare is each backend's cache room as a share of all
	// the tenants' system prompts (in blocks): a third, so that the
	// fleet holds every tenant only when each backend keeps its own
	// third, plus room for the few blocks unique to each request (the
	// user message's) that LRU keeps until they age out.
	prefixCacheShare = 0.4
	// hotTenant sends hotShare of the requests in the hot case; the
	// others share the rest evenly.
	hotTenant = 0
	hotShare  = 0.6
)

// prefixStrategies are the strategies compared, in the order of every
// table.
var prefixStrategies = []string{"round_robin", "least_request", "dynamic", prefixStrategyID}

// prefixCase is one situation the strategies are compared in.
type prefixCase struct {
	id, title  string
	replicas   int // gateways in front of the same backends; clients split among them
	hot        bool
	strategies []string
}

var prefixCases = []prefixCase{
	{id: "uniform", title: fmt.Sprintf("%d tenants, uniform", prefixTenants), replicas: 1, strategies: prefixStrategies},
	{id: "hot", title: fmt.Sprintf("%d tenants, t%d sends %.0f %% of the requests", prefixTenants, hotTenant+1, 100*hotShare),
		replicas: 1, hot: true, strategies: prefixStrategies},
	{id: "replicas", title: fmt.Sprintf("%d tenants, uniform, 2 Vigil replicas", prefixTenants), replicas: 2,
		strategies: []string{"round_robin", prefixStrategyID}},
}

// selectPrefixCases returns the cases named in list, in suite order.
func selectPrefixCases(list string) ([]prefixCase, error) {
	return selectByID(list, prefixCases, func(c prefixCase) string { return c.id }, "-prefix-cases")
}

// prefixSetYAML turns "key=value,..." into the YAML lines of
// balancer.prefix; "" when set is empty.
func prefixSetYAML(set string) (string, error) {
	var b strings.Builder
	for kv := range strings.SplitSeq(set, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" || strings.ContainsAny(k+v, ":\n#{}[]") {
			return "", fmt.Errorf("-prefix-set: want key=value pairs, comma-separated, got %q", kv)
		}
		fmt.Fprintf(&b, "    %s: %s\n", k, v)
	}
	if b.Len() == 0 {
		return "", nil
	}
	return "  prefix:\n" + b.String(), nil
}

// tenantPrompt is tenant t's system prompt: seeded words after a line
// that names the tenant, so that prompts differ from their first
// characters on, as real tenants' do.
func tenantPrompt(t int) string {
	rng := rand.New(rand.NewPCG(prefixSeed, uint64(t)))
	var b strings.Builder
	fmt.Fprintf(&b, "You are the assistant of tenant %d (%s). ", t+1, strings.Join(words(rng, 3), " "))
	for b.Len() < prefixSystemMin {
		s := words(rng, 8+rng.IntN(10))
		s[0] = strings.ToUpper(s[0][:1]) + s[0][1:]
		b.WriteString(strings.Join(s, " "))
		b.WriteString(". ")
	}
	return strings.TrimSpace(b.String())
}

// vocabulary is what prompts and user messages are made of.
var vocabulary = strings.Fields(`account answer billing cache cluster customer deploy error gateway invoice
latency model network order policy queue refund region request return routing schedule service shipping
support ticket token upgrade usage warranty always never kindly politely briefly clearly escalate explain
confirm verify check summarize apologize include mention avoid before after unless within every each`)

func words(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = vocabulary[rng.IntN(len(vocabulary))]
	}
	return out
}

// tenantBody is a streamed chat request of a tenant's system prompt and a
// user message, asking for usage at the end of the stream (where
// cached_tokens comes back).
func tenantBody(system, user string) string {
	b, _ := json.Marshal(map[string]any{
		"model": simModel,
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
		"max_tokens":     prefixOutTokens,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	})
	return string(b)
}

// prefixSource is the case's load: client i sends to replica i mod n,
// picks each request's tenant with a generator seeded by its number (every
// strategy sees the same sequence) and asks a short question of its own.
func prefixSource(cs prefixCase, urls []string, prompts []string) requestSource {
	return func(i int) func() request {
		rng := rand.New(rand.NewPCG(prefixSeed, uint64(1000+i)))
		url := urls[i%len(urls)]
		n := 0
		return func() request {
			n++
			t := pickTenant(rng, cs.hot)
			user := fmt.Sprintf("Client %d, question %d: %s?", i+1, n, strings.Join(words(rng, 6), " "))
			return request{url: url, body: tenantBody(prompts[t], user), tenant: t}
		}
	}
}

// pickTenant draws a tenant: uniformly, or in the hot case hotTenant with
// hotShare and the others evenly.
func pickTenant(rng *rand.Rand, hot bool) int {
	if !hot {
		return rng.IntN(prefixTenants)
	}
	if rng.Float64() < hotShare {
		return hotTenant
	}
	t := rng.IntN(prefixTenants - 1)
	if t >= hotTenant {
		t++
	}
	return t
}

// promptTokens asks a backend how many prompt tokens a chat request of
// messages counts (usage.prompt_tokens of a one-token answer), the
// simulator's own tokenizer being what its cache counts in.
func promptTokens(ctx context.Context, simURL string, messages []map[string]string) (int, error) {
	body, _ := json.Marshal(map[string]any{"model": simModel, "messages": messages, "max_tokens": 1})
	var resp struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := postJSON(ctx, simURL+chatPath, string(body), &resp); err != nil {
		return 0, err
	}
	if resp.Usage.PromptTokens <= 0 {
		return 0, errors.New("the simulator reported no prompt_tokens")
	}
	return resp.Usage.PromptTokens, nil
}

// prefixFleet is the simulated backends and what the suite measured of the
// tenants' prompts.
type prefixFleet struct {
	*fleet
	prompts      []string
	promptTokens []int // system prompt alone, as the simulator counts
	cacheBlocks  int   // each backend's prefix_cache_blocks
	// redis is the host:port of the redis-server that replicas share
	// state through, as a deployment of several gateways does; "" when
	// no case has replicas.
	redis string
}

// startPrefixFleet starts the backends on free ports, waits until each
// serves, and sizes their caches from the tenants' prompts.
func startPrefixFleet(ctx context.Context, c config, ps *procs) (*prefixFleet, error) {
	ports, err := freePorts(prefixBackends)
	if err != nil {
		return nil, err
	}
	env := cleanEnv()
	f := &prefixFleet{fleet: &fleet{}}
	for i, addr := range ports {
		name := fmt.Sprintf("b%d", i+1)
		// The cache is off until reset sizes it: the token counts are
		// asked of a backend first.
		sim, err := ps.start("sim-"+name, c.vigil, []string{"sim", "--listen", addr, "--model", simModel,
			"--ttft", prefixTTFT.String(), "--itl", prefixITL.String(), "--output-tokens", fmt.Sprint(prefixOutTokens),
			"--max-num-seqs", fmt.Sprint(prefixMaxSeqs), "--prefill-per-token", prefixPerToken.String(),
			"--block-size", fmt.Sprint(prefixBlockSize), "--prefix-cache-blocks", "0"}, env, nil)
		if err != nil {
			return nil, err
		}
		if err := sim.waitReady(10*time.Second, func() bool { return httpOK("http://" + addr + "/health") }); err != nil {
			return nil, err
		}
		f.names = append(f.names, name)
		f.sims = append(f.sims, "http://"+addr)
	}
	f.prompts = make([]string, prefixTenants)
	f.promptTokens = make([]int, prefixTenants)
	errs := make([]error, prefixTenants)
	var wg sync.WaitGroup
	for t := range prefixTenants {
		f.prompts[t] = tenantPrompt(t)
		wg.Go(func() {
			f.promptTokens[t], errs[t] = promptTokens(ctx, f.sims[0], []map[string]string{{"role": "system", "content": f.prompts[t]}})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("asking the simulator for the prompts' token counts: %w", err)
	}
	blocks := 0
	for _, n := range f.promptTokens {
		blocks += n / prefixBlockSize // only full blocks are cached
	}
	f.cacheBlocks = int(math.Ceil(prefixCacheShare * float64(blocks)))
	return f, nil
}

// reset gives every backend the suite's knobs and an empty cache.
func (f *prefixFleet) reset(ctx context.Context) error {
	for i := range f.sims {
		if err := f.setKnobs(ctx, i, fmt.Sprintf(`{"ttft":%q,"itl":%q,"output_tokens":%d,"max_num_seqs":%d,"prefill_per_token":%q,"block_size":%d,"prefix_cache_blocks":%d}`,
			prefixTTFT, prefixITL, prefixOutTokens, prefixMaxSeqs, prefixPerToken, prefixBlockSize, f.cacheBlocks)); err != nil {
			return err
		}
		if err := send(ctx, http.MethodPost, f.sims[i]+"/sim/cache/reset", "{}"); err != nil {
			return err
		}
	}
	return nil
}

// cacheCounters sums the backends' prefix cache counters (tokens queried
// and found); ok is false when a backend exports none.
func (f *prefixFleet) cacheCounters() (queries, hits float64, ok bool) {
	ok = true
	for _, u := range f.sims {
		m, err := scrape(u + "/metrics")
		if err != nil {
			return 0, 0, false
		}
		q, hasQ := m["vllm:prefix_cache_queries_total"]
		h, hasH := m["vllm:prefix_cache_hits_total"]
		ok = ok && hasQ && hasH
		queries += q
		hits += h
	}
	return queries, hits, ok
}

// prefixGatewayConf is `vigil serve` for one run: every backend with its
// metrics endpoint, the strategy under test (with set's balancer.prefix
// settings for the prefix strategy) and nothing that costs CPU the
// backends could use.
func prefixGatewayConf(listen string, f *prefixFleet, strategy, set, redisPrefix string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %s\nbackends:\n", listen)
	for i := range f.sims {
		fmt.Fprintf(&b, "  - name: %s\n    url: %s\n    kind: openai\n    models: [%s]\n    metrics: %s/metrics\n",
			f.names[i], f.sims[i], simModel, f.sims[i])
	}
	fmt.Fprintf(&b, "balancer:\n  strategy: %s\n", strategy)
	if strategy == prefixStrategyID {
		b.WriteString(set)
	}
	if redisPrefix != "" {
		fmt.Fprintf(&b, "state:\n  redis:\n    url: redis://%s/0\n    prefix: %s\n", f.redis, redisPrefix)
	}
	b.WriteString(quietConf)
	return b.String()
}

// runPrefix runs the prefix suite and writes its report. An error means
// the harness failed; targets missed are a report, not an error.
func runPrefix(ctx context.Context, c config) error {
	began := time.Now()
	cases, err := selectPrefixCases(c.prefix.cases)
	if err != nil {
		return err
	}
	set, err := prefixSetYAML(c.prefix.set)
	if err != nil {
		return err
	}
	if err := clearReport(c, "prefix"); err != nil {
		return err
	}
	dir, cleanup, err := workDir(c)
	if err != nil {
		return err
	}
	defer cleanup()

	phase("starting %d simulated backends (vigil sim) with prefix caches", prefixBackends)
	ps := &procs{dir: dir}
	defer ps.stopAll()
	f, err := startPrefixFleet(ctx, c, ps)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(cases, func(cs prefixCase) bool { return cs.replicas > 1 }) {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		rd, err := ps.start("redis", c.redis, []string{"--port", portOf(ports[0]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no"}, cleanEnv(), nil)
		if err != nil {
			return err
		}
		if err := rd.waitReady(10*time.Second, func() bool { return tcpUp(ports[0]) }); err != nil {
			return err
		}
		f.redis = ports[0]
	}
	res := newPrefixResults(c, began, f)
	fmt.Printf("   %d tenants, system prompts of %d–%d tokens; each backend's cache holds %d blocks of %d tokens\n",
		prefixTenants, slices.Min(f.promptTokens), slices.Max(f.promptTokens), f.cacheBlocks, prefixBlockSize)
	for _, cs := range cases {
		pc := prefixCaseResult{ID: cs.id, Title: cs.title, Replicas: cs.replicas}
		phase("case %s: %s", cs.id, cs.title)
		for _, strategy := range cs.strategies {
			if c.prefix.strategies != "" && !slices.Contains(strings.Split(c.prefix.strategies, ","), strategy) {
				continue
			}
			r, err := runPrefixCase(ctx, c, f, dir, cs, strategy, set)
			if err != nil {
				return fmt.Errorf("case %s, %s: %w", cs.id, strategy, err)
			}
			pc.Runs = append(pc.Runs, r)
			fmt.Printf("   %-13s %5d requests (%d errors)  TTFT mean %4.0f  p50 %4.0f  p90 %4.0f ms  hit rate %s (sims %s)  %s  tenants %s  t%d p90 %.0f ms\n",
				strategy, r.Requests, r.Errors, r.TTFTMeanMs, r.TTFTP50Ms, r.TTFTP90Ms, pct(r.HitRate), simRate(r),
				sharesOf(r.Shares, f.names), tenantsText(r, f.names), hotTenant+1, r.HotP90Ms)
		}
		res.Cases = append(res.Cases, pc)
	}
	res.finish(began)
	if err := res.write(c.out); err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.markdownTable())
	fmt.Println()
	res.printChecks(os.Stdout)
	fmt.Printf("\nwrote prefix.md, prefix.json, prefix.png in %s/ in %s\n", c.out, time.Since(began).Round(time.Second))
	return nil
}

// runPrefixCase runs one case under one strategy: waits until the
// backends are idle, resets their knobs and caches, starts the case's
// gateways, loads them and stops them.
func runPrefixCase(ctx context.Context, c config, f *prefixFleet, dir string, cs prefixCase, strategy, set string) (*prefixRun, error) {
	if err := f.drain(ctx); err != nil {
		return nil, err
	}
	if err := f.reset(ctx); err != nil {
		return nil, err
	}
	ports, err := freePorts(cs.replicas)
	if err != nil {
		return nil, err
	}
	gw := &lab{ps: &procs{dir: dir}}
	defer gw.ps.stopAll()
	// Replicas share state through Redis, each run under its own key
	// prefix so that no run inherits another's prefix homes.
	redisPrefix := ""
	if cs.replicas > 1 {
		redisPrefix = fmt.Sprintf("bench-%s-%s-%d", cs.id, strategy, time.Now().UnixNano())
	}
	var urls []string
	for i, addr := range ports {
		name := fmt.Sprintf("vigil-%s-%s-%d", cs.id, strategy, i+1)
		if _, err := gw.startVigil(c, dir, name, addr, prefixGatewayConf(addr, f, strategy, set, redisPrefix), cleanEnv(), false); err != nil {
			return nil, err
		}
		// /readyz answers once one backend is healthy; a strategy that
		// places tenants by where they went first must see all three.
		if err := allHealthy("http://"+addr, len(f.sims)); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		urls = append(urls, "http://"+addr+chatPath)
	}

	r := &prefixRun{Strategy: strategy, PeakWaiting: map[string]int64{}}
	load := startLoad(ctx, c.prefix.clients, prefixSource(cs, urls, f.prompts))
	defer load.stop()
	measured := prefixWarmup + c.prefix.duration
	var q0, h0 float64
	counted := false
	for ctx.Err() == nil && load.elapsed() < measured {
		sleep(ctx, 250*time.Millisecond)
		for i := range f.sims {
			if s, err := f.stats(ctx, i); err == nil {
				r.PeakWaiting[f.names[i]] = max(r.PeakWaiting[f.names[i]], s.Waiting)
			}
		}
		if !counted && load.elapsed() >= prefixWarmup {
			q0, h0, counted = f.cacheCounters()
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	samples := load.stop()
	r.summarize(samples, f.names, prefixWarmup, measured)
	if q1, h1, ok := f.cacheCounters(); ok && counted && q1 > q0 {
		rate := (h1 - h0) / (q1 - q0)
		r.SimHitRate = &rate
	}
	return r, nil
}

// allHealthy waits until the gateway at base reports n backends healthy
// (vigil_backend_healthy on its /metrics), for 10 s at most.
func allHealthy(base string, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		text, err := httpBody(base + "/metrics")
		up := 0
		for line := range strings.SplitSeq(text, "\n") {
			if strings.HasPrefix(line, "vigil_backend_healthy{") && strings.HasSuffix(line, " 1") {
				up++
			}
		}
		if err == nil && up == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d backends healthy after 10 s (%v)", up, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// summarize fills r from the samples sent in [from, to).
func (r *prefixRun) summarize(samples []sample, names []string, from, to time.Duration) {
	r.Counts = map[string]int{}
	r.Shares = map[string]float64{}
	for _, n := range names {
		r.Counts[n] = 0
	}
	var all, hot, cold, warm []time.Duration
	byTenant := map[int]map[string]int{} // tenant → backend → requests
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		if s.err != "" {
			r.Errors++
			if len(r.ErrorExamples) < 3 && !slices.Contains(r.ErrorExamples, s.err) {
				r.ErrorExamples = append(r.ErrorExamples, s.err)
			}
			continue
		}
		r.Requests++
		r.Counts[s.backend]++
		if byTenant[s.tenant] == nil {
			byTenant[s.tenant] = map[string]int{}
		}
		byTenant[s.tenant][s.backend]++
		r.PromptTokens += int64(s.prompt)
		r.CachedTokens += int64(s.cached)
		all = append(all, s.ttft)
		if s.tenant == hotTenant {
			hot = append(hot, s.ttft)
		}
		// Cold: less than half the prompt came from the cache.
		if 2*s.cached < s.prompt {
			cold = append(cold, s.ttft)
		} else {
			warm = append(warm, s.ttft)
		}
	}
	for n, c := range r.Counts {
		if r.Requests > 0 {
			r.Shares[n] = float64(c) / float64(r.Requests)
		}
	}
	r.Tenants = map[string]int{}
	for _, n := range names {
		r.Tenants[n] = 0
	}
	for _, counts := range byTenant {
		total := 0
		for _, c := range counts {
			total += c
		}
		for b, c := range counts {
			if 10*c >= total {
				r.Tenants[b]++
			}
		}
	}
	if r.PromptTokens > 0 {
		r.HitRate = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	r.TTFTMeanMs = meanMs(all)
	slices.Sort(all)
	slices.Sort(hot)
	r.TTFTP50Ms = ms(percentile(all, 0.50))
	r.TTFTP90Ms = ms(percentile(all, 0.90))
	r.HotRequests = len(hot)
	r.HotP90Ms = ms(percentile(hot, 0.90))
	r.ColdRequests = len(cold)
	r.ColdMeanMs, r.WarmMeanMs = meanMs(cold), meanMs(warm)
}

func meanMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(sum) / float64(len(ds))
}

// sharesOf lists shares in the order of names.
func sharesOf(shares map[string]float64, names []string) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %s", n, pct(shares[n])))
	}
	return strings.Join(parts, " · ")
}

// tenantsText lists how many tenants each backend served a tenth or more
// of, in the order of names.
func tenantsText(r *prefixRun, names []string) string {
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d", n, r.Tenants[n]))
	}
	return strings.Join(parts, " · ")
}

// simRate is the sims' own hit rate of a run, "—" when they export none.
func simRate(r *prefixRun) string {
	if r.SimHitRate == nil {
		return "—"
	}
	return pct(*r.SimHitRate)
}

// postJSON POSTs a JSON body and decodes a 200 answer into v.
func postJSON(ctx context.Context, url, body string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := controlClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
