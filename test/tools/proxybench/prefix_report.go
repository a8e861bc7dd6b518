package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The prefix suite's targets.
const (
	// targetTTFTRatio: the prefix strategy's mean TTFT at most this
	// fraction of round robin's in the same case.
	targetTTFTRatio = 0.25
	// targetHitRate: the prefix strategy's share of prompt tokens served
	// from a cache.
	targetHitRate = 0.80
	// targetMaxShare: no backend serves more under uniform tenants.
	targetMaxShare = 0.50
	// targetHotP90: the hot tenant's p90 TTFT at most this multiple of
	// its p90 in the uniform case.
	targetHotP90 = 2.0
	// targetReplicaPoints: two replicas' hit rate within this many
	// percentage points of one replica's.
	targetReplicaPoints = 5.0
)

// prefixResults is everything the prefix suite writes to prefix.json.
type prefixResults struct {
	Started     string             `json:"started"`
	WallSeconds float64            `json:"wall_seconds"`
	Command     string             `json:"command"`
	Machine     balanceMachine     `json:"machine"`
	Settings    prefixSettingsJSON `json:"settings"`
	Cases       []prefixCaseResult `json:"cases"`
	Checks      []prefixCheck      `json:"checks"`
	Notes       []string           `json:"notes,omitempty"`
}

// prefixSettingsJSON are the knobs a run used.
type prefixSettingsJSON struct {
	DurationS     float64 `json:"duration_s"`
	WarmupS       float64 `json:"warmup_s"`
	Clients       int     `json:"clients"`
	Cases         string  `json:"cases"`
	PrefixSet     string  `json:"prefix_set,omitempty"`
	Strategies    string  `json:"strategies,omitempty"`
	Tenants       int     `json:"tenants"`
	HotShare      float64 `json:"hot_share"`
	PromptTokens  []int   `json:"system_prompt_tokens"`
	Backends      int     `json:"backends"`
	TTFTMs        float64 `json:"ttft_ms"`
	PrefillPerTok float64 `json:"prefill_per_token_ms"`
	ITLMs         float64 `json:"itl_ms"`
	Tokens        int     `json:"tokens"`
	MaxNumSeqs    int     `json:"max_num_seqs"`
	BlockSize     int     `json:"block_size"`
	CacheBlocks   int     `json:"prefix_cache_blocks"`
	CacheShare    float64 `json:"cache_share"`
}

// prefixCaseResult is one case under its strategies.
type prefixCaseResult struct {
	ID       string       `json:"id"`
	Title    string       `json:"title"`
	Replicas int          `json:"replicas"`
	Runs     []*prefixRun `json:"runs"`
}

// prefixRun is one case under one strategy, over the requests sent in the
// measured part.
type prefixRun struct {
	Strategy      string             `json:"strategy"`
	Requests      int                `json:"requests"` // streamed content to the end
	Errors        int                `json:"errors"`
	ErrorExamples []string           `json:"error_examples,omitempty"`
	Counts        map[string]int     `json:"counts"`
	Shares        map[string]float64 `json:"shares"`
	TTFTMeanMs    float64            `json:"ttft_mean_ms"`
	TTFTP50Ms     float64            `json:"ttft_p50_ms"`
	TTFTP90Ms     float64            `json:"ttft_p90_ms"`
	// PromptTokens and CachedTokens add up the usage of the answers;
	// HitRate is their ratio.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	HitRate      float64 `json:"hit_rate"`
	// SimHitRate is the backends' own: vllm:prefix_cache_hits_total over
	// vllm:prefix_cache_queries_total, from the end of the warm-up to the
	// end of the load; nil when they export neither.
	SimHitRate *float64 `json:"sim_hit_rate"`
	// HotRequests and HotP90Ms are the hot tenant's (in every case, so
	// that the uniform case gives the reference).
	HotRequests int     `json:"hot_requests"`
	HotP90Ms    float64 `json:"hot_p90_ms"`
	// ColdRequests had less than half their prompt cached; ColdMeanMs and
	// WarmMeanMs are the mean TTFTs of either kind.
	ColdRequests int     `json:"cold_requests"`
	ColdMeanMs   float64 `json:"cold_mean_ms"`
	WarmMeanMs   float64 `json:"warm_mean_ms"`
	// Tenants is, for each backend, the number of tenants it served a
	// tenth or more of the requests of: where the strategy keeps them
	// (round robin: every tenant everywhere).
	Tenants map[string]int `json:"tenants"`
	// PeakWaiting is each backend's most requests waiting, polled every
	// 250 ms.
	PeakWaiting map[string]int64 `json:"peak_waiting"`
}

// prefixCheck is one target's verdict; Evaluated is false when a case it
// needs did not run.
type prefixCheck struct {
	Case      string `json:"case"`
	Target    string `json:"target"`
	Measured  string `json:"measured"`
	Evaluated bool   `json:"evaluated"`
	Pass      bool   `json:"pass"`
}

func newPrefixResults(c config, began time.Time, f *prefixFleet) *prefixResults {
	m := machineInfo(c)
	r := &prefixResults{
		Started: began.UTC().Format(time.RFC3339),
		Command: os.Getenv("BENCH_COMMAND"),
		Machine: balanceMachine{CPU: m.CPU, Cores: m.Cores, MemGiB: m.MemGiB, Kernel: m.Kernel, Go: m.Go, Vigil: m.Vigil,
			LoadBefore: loadAvg()},
		Settings: prefixSettingsJSON{
			DurationS: c.prefix.duration.Seconds(), WarmupS: prefixWarmup.Seconds(), Clients: c.prefix.clients,
			Cases: c.prefix.cases, PrefixSet: c.prefix.set, Strategies: c.prefix.strategies, Tenants: prefixTenants, HotShare: hotShare,
			PromptTokens: f.promptTokens, Backends: len(f.sims), TTFTMs: ms(prefixTTFT), PrefillPerTok: ms(prefixPerToken),
			ITLMs: ms(prefixITL), Tokens: prefixOutTokens, MaxNumSeqs: prefixMaxSeqs, BlockSize: prefixBlockSize,
			CacheBlocks: f.cacheBlocks, CacheShare: prefixCacheShare,
		},
	}
	if r.Command == "" {
		r.Command = "proxybench " + strings.Join(os.Args[1:], " ")
	}
	return r
}

// finish adds what is known only at the end: the load average, wall time,
// the verdicts and notes.
func (r *prefixResults) finish(began time.Time) {
	r.Machine.LoadAfter = loadAvg()
	r.WallSeconds = time.Since(began).Seconds()
	r.Checks = r.checks()
	for _, pc := range r.Cases {
		for _, run := range pc.Runs {
			if run.Errors > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("case %s, %s: %d request(s) failed, e.g. %s.", pc.ID, run.Strategy,
					run.Errors, strings.Join(run.ErrorExamples, "; ")))
			}
			if run.Requests > 0 && run.PromptTokens == 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("case %s, %s: no answer reported usage: is stream_options.include_usage passed through?",
					pc.ID, run.Strategy))
			}
		}
	}
}

// run returns the case's run of strategy, nil when there is none.
func (r *prefixResults) run(caseID, strategy string) *prefixRun {
	for _, pc := range r.Cases {
		if pc.ID != caseID {
			continue
		}
		for _, run := range pc.Runs {
			if run.Strategy == strategy && run.Requests > 0 {
				return run
			}
		}
	}
	return nil
}

// checks evaluates the targets from the cases that ran.
func (r *prefixResults) checks() []prefixCheck {
	var out []prefixCheck
	add := func(caseID, target string, eval func() (string, bool, bool)) {
		m, ok, evaluated := eval()
		out = append(out, prefixCheck{Case: caseID, Target: target, Measured: m, Evaluated: evaluated, Pass: evaluated && ok})
	}
	uni := r.run("uniform", prefixStrategyID)
	for _, pc := range r.Cases {
		p, rr := r.run(pc.ID, prefixStrategyID), r.run(pc.ID, "round_robin")
		if p == nil {
			continue
		}
		if rr != nil {
			add(pc.ID, fmt.Sprintf("prefix mean TTFT ≤ %g × round_robin's", targetTTFTRatio), func() (string, bool, bool) {
				x := ratio(p.TTFTMeanMs, rr.TTFTMeanMs)
				return fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×)", p.TTFTMeanMs, rr.TTFTMeanMs, x), x <= targetTTFTRatio, true
			})
		}
		add(pc.ID, fmt.Sprintf("prefix hit rate ≥ %.0f %%", 100*targetHitRate), func() (string, bool, bool) {
			m := fmt.Sprintf("%s (the sims' counters: %s)", pct(p.HitRate), simRate(p))
			if rr != nil {
				m += fmt.Sprintf("; round_robin %s", pct(rr.HitRate))
			}
			return m, p.HitRate >= targetHitRate, true
		})
		switch pc.ID {
		case "uniform":
			add(pc.ID, fmt.Sprintf("prefix: no backend serves > %.0f %% of requests", 100*targetMaxShare), func() (string, bool, bool) {
				top, name := 0.0, ""
				for n, s := range p.Shares {
					if s > top || (s == top && n < name) {
						top, name = s, n
					}
				}
				return fmt.Sprintf("largest %s %s", name, pct(top)), top <= targetMaxShare, true
			})
		case "hot":
			add(pc.ID, fmt.Sprintf("prefix: t%d's p90 TTFT ≤ %g × its p90 in the uniform case", hotTenant+1, targetHotP90), func() (string, bool, bool) {
				if uni == nil {
					return "needs the uniform case", false, false
				}
				x := ratio(p.HotP90Ms, uni.HotP90Ms)
				return fmt.Sprintf("%.0f ms vs %.0f ms (%.2f×)", p.HotP90Ms, uni.HotP90Ms, x), x <= targetHotP90, true
			})
		case "replicas":
			add(pc.ID, fmt.Sprintf("prefix: hit rate within %g points of one replica's", targetReplicaPoints), func() (string, bool, bool) {
				if uni == nil {
					return "needs the uniform case", false, false
				}
				d := 100 * (p.HitRate - uni.HitRate)
				return fmt.Sprintf("%s vs %s (%+.1f points)", pct(p.HitRate), pct(uni.HitRate), d), math.Abs(d) <= targetReplicaPoints, true
			})
		}
	}
	return out
}

// verdict is a check's PASS, FAIL or "—" when not evaluated.
func (c prefixCheck) verdict() string {
	if !c.Evaluated {
		return "—"
	}
	return passWord(c.Pass)
}

// markdownTable is the headline table: case × strategy.
func (r *prefixResults) markdownTable() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| case | strategy | requests (errors) | TTFT mean / p50 / p90 | cold requests: TTFT | warm: TTFT | hit rate (usage) | hit rate (sims) | share by backend | tenants by backend | t%d: requests, p90 TTFT | most waiting |\n",
		hotTenant+1)
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, pc := range r.Cases {
		for _, run := range pc.Runs {
			names := sortedKeys(run.Shares)
			var qs []string
			for _, n := range names {
				qs = append(qs, fmt.Sprintf("%s %d", n, run.PeakWaiting[n]))
			}
			fmt.Fprintf(&b, "| %s | %s | %s (%d) | %.0f / %.0f / %.0f ms | %s: %.0f ms | %.0f ms | %s | %s | %s | %s | %d, %.0f ms | %s |\n",
				pc.ID, run.Strategy, thousands(float64(run.Requests)), run.Errors, run.TTFTMeanMs, run.TTFTP50Ms, run.TTFTP90Ms,
				pct(float64(run.ColdRequests)/math.Max(1, float64(run.Requests))), run.ColdMeanMs, run.WarmMeanMs,
				pct(run.HitRate), simRate(run), sharesOf(run.Shares, names), tenantsText(run, names), run.HotRequests, run.HotP90Ms,
				strings.Join(qs, " · "))
		}
	}
	return b.String()
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// markdown is the whole of prefix.md.
func (r *prefixResults) markdown() string {
	var b strings.Builder
	s, m := r.Settings, r.Machine
	b.WriteString("# Prefix-aware balancing\n\n")
	fmt.Fprintf(&b, "`%s`; %s; %d cores (%s), %d GiB, Linux %s, load average %s before, %s after; %s, %s; wall time %s.\n\n",
		r.Command, r.Started, m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadBefore, m.LoadAfter, orDash(m.Vigil), m.Go,
		(time.Duration(r.WallSeconds) * time.Second).String())
	lo, hi := 0, 0
	if len(s.PromptTokens) > 0 {
		lo, hi = s.PromptTokens[0], s.PromptTokens[0]
		for _, n := range s.PromptTokens {
			lo, hi = min(lo, n), max(hi, n)
		}
	}
	fmt.Fprintf(&b, "Backends: %d `vigil sim`, TTFT %g ms + %g ms per prompt token not in the prefix cache, ITL %g ms, %d tokens, "+
		"max_num_seqs %d; prefix cache of %d blocks of %d tokens each (%.0f %% of all the tenants' system prompts). "+
		"Load: %d closed-loop clients (split evenly among the replicas), %d tenants with seeded system prompts of %d–%d tokens "+
		"(as the simulator counts them), each request a tenant's system prompt and a short user message of its own, streamed "+
		"(`max_tokens` %d, `stream_options.include_usage`); the hot case's t%d sends %.0f %% of the requests. TTFT is from sending "+
		"to the first SSE event with content; hit rate is Σ `cached_tokens` / Σ `prompt_tokens` of the answers' usage, and the "+
		"sims' `vllm:prefix_cache_hits_total` / `vllm:prefix_cache_queries_total` over the same time as a cross-check; a cold "+
		"request had less than half its prompt cached; tenants by backend counts the tenants a backend served a tenth or more of "+
		"the requests of. Each run has `vigil serve`s of their own (the balancer's defaults but "+
		"`balancer.strategy`%s; analyzers, span export and access log off) and emptied caches: %g s of load not counted, then %g s "+
		"measured.\n\n",
		s.Backends, s.TTFTMs, s.PrefillPerTok, s.ITLMs, s.Tokens, s.MaxNumSeqs, s.CacheBlocks, s.BlockSize, 100*s.CacheShare,
		s.Clients, s.Tenants, lo, hi, s.Tokens, hotTenant+1, 100*s.HotShare, setText(s.PrefixSet), s.WarmupS, s.DurationS)
	b.WriteString(r.markdownTable())
	b.WriteString("\n## Targets\n\n| case | target | measured | |\n|---|---|---|---|\n")
	for _, c := range r.Checks {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", c.Case, c.Target, c.Measured, c.verdict())
	}
	b.WriteString("\n`prefix.png`: mean TTFT and hit rate by case and strategy.\n")
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func setText(set string) string {
	if set == "" {
		return ""
	}
	return fmt.Sprintf(", and balancer.prefix `%s` for the prefix strategy", set)
}

// printChecks prints the PASS/FAIL lines.
func (r *prefixResults) printChecks(w io.Writer) {
	fmt.Fprintln(w, "targets:")
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  %-8s %-4s %s: %s\n", c.Case, c.verdict(), c.Target, c.Measured)
	}
}

// write writes prefix.md, prefix.json and prefix.png into dir.
func (r *prefixResults) write(dir string) error {
	if err := writeReport(dir, "prefix", r.markdown(), r); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "prefix.png"))
}

// plot draws two bar charts, mean TTFT and hit rate, grouped by case, a
// bar per strategy.
func (r *prefixResults) plot(path string) error {
	var cases []string
	for _, pc := range r.Cases {
		cases = append(cases, pc.ID)
	}
	bars := func(title, ylabel string, value func(*prefixRun) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		var series []plotter.Values
		for _, strategy := range prefixStrategies {
			var v plotter.Values
			for _, id := range cases {
				x := 0.0
				if run := r.run(id, strategy); run != nil {
					x = value(run)
				}
				v = append(v, x)
			}
			series = append(series, v)
		}
		if err := addBars(p, 100, series, prefixStrategies); err != nil {
			return nil, err
		}
		p.Legend.Top = true
		p.NominalX(cases...)
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Min = 0
		p.Y.Max *= 1.45 // room for the legend
		p.Add(plotter.NewGrid())
		return p, nil
	}
	ttft, err := bars("mean TTFT", "ms", func(run *prefixRun) float64 { return run.TTFTMeanMs })
	if err != nil {
		return err
	}
	hits, err := bars("prefix cache hit rate (usage)", "%", func(run *prefixRun) float64 { return 100 * run.HitRate })
	if err != nil {
		return err
	}
	return writeGrid(path, 12*vg.Centimeter, [][]*plot.Plot{{ttft, hits}})
}
