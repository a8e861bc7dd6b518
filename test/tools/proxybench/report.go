package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// results is everything a run writes to results.json.
type results struct {
	Started     string                    `json:"started"`
	WallSeconds float64                   `json:"wall_seconds"`
	Machine     machine                   `json:"machine"`
	Settings    settings                  `json:"settings"`
	Targets     []targetSummary           `json:"targets"`
	Checks      []check                   `json:"checks"`
	Rounds      []map[string]*roundTarget `json:"rounds"`
	Profiles    []string                  `json:"profiles,omitempty"`
	Notes       []string                  `json:"notes,omitempty"`
}

// settings are the knobs a run used.
type settings struct {
	Rounds         int     `json:"rounds"`
	DurationS      float64 `json:"duration_s"`
	WarmupS        float64 `json:"warmup_s"`
	Rates          []int   `json:"rates"`
	Streams        int     `json:"streams"`
	Chunks         int     `json:"chunks"`
	GapMs          float64 `json:"gap_ms"`
	WrkThreads     int     `json:"wrk_threads"`
	WrkConnections int     `json:"wrk_connections"`
}

func settingsOf(c config) settings {
	return settings{
		Rounds: c.rounds, DurationS: c.duration.Seconds(), WarmupS: c.warmup.Seconds(), Rates: c.rates,
		Streams: c.streams, Chunks: c.chunks, GapMs: ms(c.gap), WrkThreads: c.wrkThreads, WrkConnections: c.wrkConns,
	}
}

// targetSummary holds a target's medians over rounds. Added latencies and
// ratios are computed per round (against direct and nginx of the same
// round), then their median taken.
type targetSummary struct {
	Name      string        `json:"name"`
	MaxRPS    float64       `json:"max_rps"`
	VsNginx   float64       `json:"vs_nginx"`
	VsGoProxy float64       `json:"vs_go_proxy"`
	WrkErrors int64         `json:"wrk_errors"`
	Rates     []rateSummary `json:"rates"`
	// CPUUsPerReq is taken at the highest fixed rate.
	CPUUsPerReq     float64 `json:"cpu_us_per_req"`
	StreamTTFTP50Ms float64 `json:"stream_ttft_p50_ms"`
	// StreamAddedTTFTMs is the TTFT p50 minus direct's; 0 for direct.
	StreamAddedTTFTMs float64 `json:"stream_added_ttft_p50_ms"`
	GapP50Ms          float64 `json:"gap_p50_ms"`
	GapP99Ms          float64 `json:"gap_p99_ms"`
	Coalesced         float64 `json:"coalesced"`
	// GapsKept: every stream came whole and its chunks as far apart as
	// direct's (see gapsKept).
	GapsKept      bool  `json:"gaps_kept"`
	StreamErrors  int   `json:"stream_errors"`
	RSSIdleBytes  int64 `json:"rss_idle_bytes"`
	RSSAfterBytes int64 `json:"rss_after_bytes"`
	// Requests counts the requests answered over the run, warm-up
	// included (profiling runs excluded).
	Requests int64 `json:"requests"`
}

// rateSummary holds a target's medians at one fixed rate.
type rateSummary struct {
	Rate           int                `json:"rate"`
	P50Ms          float64            `json:"p50_ms"`
	P99Ms          float64            `json:"p99_ms"`
	AddedP50Ms     float64            `json:"added_p50_ms"`
	AddedP99Ms     float64            `json:"added_p99_ms"`
	CPUUsPerReq    float64            `json:"cpu_us_per_req"`
	AuxCPUUsPerReq map[string]float64 `json:"aux_cpu_us_per_req,omitempty"`
	Errors         int                `json:"errors"`
}

// check is one of the proxy suite's targets for one Vigil configuration.
type check struct {
	Name      string  `json:"name"`
	Target    string  `json:"target"`
	Value     float64 `json:"value"`
	Shown     string  `json:"shown"`
	Now       string  `json:"now"`
	NowPass   bool    `json:"now_pass"`
	Goal      string  `json:"goal"`
	GoalPass  bool    `json:"goal_pass"`
	Reference string  `json:"reference,omitempty"`
}

// gapsKept reports whether streams through a proxy kept the backend's
// pacing, from medians over rounds: every stream whole, no more chunks
// coalesced (read together with the one before) than direct's plus five
// points, and the median gap within a quarter of the backend's gap of
// direct's. A proxy that buffers coalesces most chunks; on a busy machine a
// few coalesce anyway, direct included.
func gapsKept(t, d targetSummary, gap time.Duration) bool {
	return t.StreamErrors == 0 &&
		t.Coalesced <= d.Coalesced+0.05 &&
		math.Abs(t.GapP50Ms-d.GapP50Ms) <= ms(gap)/4
}

func (r *results) summarize(c config, rssIdle, rssAfter map[string]int64, requests map[string]int64) {
	for _, name := range targetNames {
		s := targetSummary{Name: name, RSSIdleBytes: rssIdle[name], RSSAfterBytes: rssAfter[name], Requests: requests[name]}
		var rps, vs, vsGo, ttft, added, gp50, gp99, coal []float64
		for _, rd := range r.Rounds {
			t, d, n, g := rd[name], rd[direct], rd[nginx], rd[goProxy]
			rps = append(rps, t.Wrk.RPS)
			if n.Wrk.RPS > 0 {
				vs = append(vs, t.Wrk.RPS/n.Wrk.RPS)
			}
			if g != nil && g.Wrk.RPS > 0 {
				vsGo = append(vsGo, t.Wrk.RPS/g.Wrk.RPS)
			}
			s.WrkErrors += t.Wrk.Errors
			s.StreamErrors += t.Stream.Errors
			ttft = append(ttft, t.Stream.TTFTP50Ms)
			added = append(added, t.Stream.TTFTP50Ms-d.Stream.TTFTP50Ms)
			gp50 = append(gp50, t.Stream.GapP50Ms)
			gp99 = append(gp99, t.Stream.GapP99Ms)
			coal = append(coal, t.Stream.Coalesced)
		}
		s.MaxRPS, s.VsNginx, s.VsGoProxy = median(rps), median(vs), median(vsGo)
		s.StreamTTFTP50Ms, s.StreamAddedTTFTMs = median(ttft), median(added)
		if name == direct {
			s.StreamAddedTTFTMs = 0
		}
		s.GapP50Ms, s.GapP99Ms, s.Coalesced = median(gp50), median(gp99), median(coal)
		// Direct is the reference: kept unless its own streams broke.
		s.GapsKept = s.StreamErrors == 0
		if name != direct && len(r.Targets) > 0 {
			s.GapsKept = gapsKept(s, r.Targets[0], c.gap)
		}
		for i, rate := range c.rates {
			rs := rateSummary{Rate: rate}
			var p50, p99, a50, a99, cpu []float64
			aux := map[string][]float64{}
			for _, rd := range r.Rounds {
				t, d := rd[name].Rates[i], rd[direct].Rates[i]
				p50, p99 = append(p50, t.P50Ms), append(p99, t.P99Ms)
				a50, a99 = append(a50, t.P50Ms-d.P50Ms), append(a99, t.P99Ms-d.P99Ms)
				cpu = append(cpu, t.CPUUsPerReq)
				for k, v := range t.AuxCPUUsPerReq {
					aux[k] = append(aux[k], v)
				}
				rs.Errors += t.Errors
			}
			rs.P50Ms, rs.P99Ms, rs.AddedP50Ms, rs.AddedP99Ms, rs.CPUUsPerReq = median(p50), median(p99), median(a50), median(a99), median(cpu)
			for k, v := range aux {
				if rs.AuxCPUUsPerReq == nil {
					rs.AuxCPUUsPerReq = map[string]float64{}
				}
				rs.AuxCPUUsPerReq[k] = median(v)
			}
			s.Rates = append(s.Rates, rs)
		}
		s.CPUUsPerReq = s.Rates[len(s.Rates)-1].CPUUsPerReq
		r.Targets = append(r.Targets, s)
	}
	r.Checks = r.checks(c)
}

func (r *results) target(name string) targetSummary {
	for _, t := range r.Targets {
		if t.Name == name {
			return t
		}
	}
	return targetSummary{}
}

// checks evaluates the proxy suite's targets, both levels, for vigil-full (which
// they are set for) and vigil-min (for reference).
func (r *results) checks(c config) []check {
	ng, gp := r.target(nginx), r.target(goProxy)
	top := len(c.rates) - 1
	rate := c.rates[top]
	var out []check
	for _, name := range []string{vigilFull, vigilMin} {
		t := r.target(name)
		// The request path against net/http's own bare proxy, the ceiling
		// of this stack: vigil-full within a tenth of it, vigil-min above
		// it (it is expected to skip work go-proxy does not).
		minVsGo := 0.9
		if name == vigilMin {
			minVsGo = 1.2
		}
		goTarget := fmt.Sprintf("≥ %g× go-proxy", minVsGo)
		out = append(out,
			check{
				Name: "max throughput vs go-proxy", Target: name, Value: t.VsGoProxy, Shown: fmt.Sprintf("%.2f×", t.VsGoProxy),
				Now: goTarget, NowPass: t.VsGoProxy >= minVsGo, Goal: goTarget, GoalPass: t.VsGoProxy >= minVsGo,
				Reference: fmt.Sprintf("go-proxy %s req/s", thousands(gp.MaxRPS)),
			},
			check{
				Name:   fmt.Sprintf("added p99 at %d req/s vs go-proxy", rate),
				Target: name, Value: t.Rates[top].AddedP99Ms,
				Shown:     fmt.Sprintf("%s ms", signed(t.Rates[top].AddedP99Ms, 2)),
				Now:       "≤ go-proxy + 0.5 ms",
				NowPass:   t.Rates[top].AddedP99Ms <= gp.Rates[top].AddedP99Ms+0.5,
				Goal:      "≤ go-proxy + 0.5 ms",
				GoalPass:  t.Rates[top].AddedP99Ms <= gp.Rates[top].AddedP99Ms+0.5,
				Reference: fmt.Sprintf("go-proxy %s ms", signed(gp.Rates[top].AddedP99Ms, 2)),
			},
			check{
				Name: "stream: added TTFT p50 vs go-proxy", Target: name, Value: t.StreamAddedTTFTMs,
				Shown:     fmt.Sprintf("%s ms", signed(t.StreamAddedTTFTMs, 3)),
				Now:       "≤ go-proxy + 0.1 ms",
				NowPass:   t.StreamAddedTTFTMs <= gp.StreamAddedTTFTMs+0.1,
				Goal:      "≤ go-proxy + 0.1 ms",
				GoalPass:  t.StreamAddedTTFTMs <= gp.StreamAddedTTFTMs+0.1,
				Reference: fmt.Sprintf("go-proxy %s ms", signed(gp.StreamAddedTTFTMs, 3)),
			},
		)
		out = append(out,
			check{
				Name: "max throughput vs nginx", Target: name, Value: t.VsNginx, Shown: fmt.Sprintf("%.2f×", t.VsNginx),
				Now: "≥ 0.5×", NowPass: t.VsNginx >= 0.5, Goal: "≥ 0.8×", GoalPass: t.VsNginx >= 0.8,
			},
			check{
				Name:   fmt.Sprintf("added p99 at %d req/s", rate),
				Target: name, Value: t.Rates[top].AddedP99Ms,
				Shown:     fmt.Sprintf("%s ms", signed(t.Rates[top].AddedP99Ms, 2)),
				Now:       "≤ nginx + 1 ms",
				NowPass:   t.Rates[top].AddedP99Ms <= ng.Rates[top].AddedP99Ms+1,
				Goal:      "≤ nginx + 0.3 ms",
				GoalPass:  t.Rates[top].AddedP99Ms <= ng.Rates[top].AddedP99Ms+0.3,
				Reference: fmt.Sprintf("nginx %s ms", signed(ng.Rates[top].AddedP99Ms, 2)),
			},
			check{
				Name: "stream: added TTFT p50", Target: name, Value: t.StreamAddedTTFTMs,
				Shown: fmt.Sprintf("%s ms", signed(t.StreamAddedTTFTMs, 3)),
				Now:   "≤ 0.25 ms", NowPass: t.StreamAddedTTFTMs <= 0.25,
				Goal: "≤ 0.25 ms", GoalPass: t.StreamAddedTTFTMs <= 0.25,
			},
			check{
				Name: "stream: chunk gaps kept", Target: name, Value: t.Coalesced,
				Shown: yesNo(t.GapsKept),
				Now:   "yes", NowPass: t.GapsKept,
				Goal: "yes", GoalPass: t.GapsKept,
			},
			check{
				Name:   fmt.Sprintf("CPU per request at %d req/s", rate),
				Target: name, Value: t.CPUUsPerReq,
				Shown: fmt.Sprintf("%.0f µs (%.1f× nginx)", t.CPUUsPerReq, ratio(t.CPUUsPerReq, ng.CPUUsPerReq)),
				Now:   "≤ 2× nginx", NowPass: t.CPUUsPerReq <= 2*ng.CPUUsPerReq,
				Goal: "≤ 2× nginx", GoalPass: t.CPUUsPerReq <= 2*ng.CPUUsPerReq,
				Reference: fmt.Sprintf("nginx %.0f µs", ng.CPUUsPerReq),
			},
		)
	}
	return out
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// median returns the median of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// signed formats x with an explicit sign and prec decimals.
func signed(x float64, prec int) string {
	s := fmt.Sprintf("%+.*f", prec, x)
	if strings.Trim(s, "+-0.") == "" {
		return "+" + strings.TrimLeft(s, "+-")
	}
	return s
}

// thousands formats n as 12,345.
func thousands(n float64) string {
	s := fmt.Sprintf("%.0f", n)
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// markdownTable is the headline table: peers as rows, rates and added latencies as columns.
func (r *results) markdownTable() string {
	var b strings.Builder
	b.WriteString("| | max req/s | vs nginx |")
	for _, rate := range r.Settings.Rates {
		fmt.Fprintf(&b, " added p50 / p99 at %d req/s |", rate)
	}
	top := r.Settings.Rates[len(r.Settings.Rates)-1]
	fmt.Fprintf(&b, " CPU per request at %d req/s | stream: added TTFT p50 | chunk gaps kept | RSS idle → after |\n", top)
	b.WriteString("|---|---|---|")
	for range r.Settings.Rates {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %s | %.2f× |", t.Name, thousands(t.MaxRPS), t.VsNginx)
		for _, rs := range t.Rates {
			if t.Name == direct {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %s / %s ms |", signed(rs.AddedP50Ms, 2), signed(rs.AddedP99Ms, 2))
		}
		if t.Name == direct {
			fmt.Fprintf(&b, " — | — | %s | — |\n", yesNo(t.GapsKept))
			continue
		}
		fmt.Fprintf(&b, " %.0f µs | %s ms | %s | %s → %s |\n", t.CPUUsPerReq, signed(t.StreamAddedTTFTMs, 3),
			yesNo(t.GapsKept), mib(t.RSSIdleBytes), mib(t.RSSAfterBytes))
	}
	return b.String()
}

// markdown is the whole of results.md.
func (r *results) markdown() string {
	var b strings.Builder
	s, m := r.Settings, r.Machine
	b.WriteString("# Vigil against nginx: proxy benchmark\n\n")
	fmt.Fprintf(&b, "%s; %s; %d cores (%s), %d GiB, Linux %s, load average %s before the rounds, %s after; %s, %s, %s, %s, %s; wall time %s.\n\n",
		r.Started, orDash(m.Command), m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadBefore, m.LoadAfter,
		m.Nginx, m.Wrk, m.Redis, m.Vigil, m.Go, (time.Duration(r.WallSeconds) * time.Second).String())
	fmt.Fprintf(&b, "%d round(s), every target measured in each; medians over rounds. Max throughput: wrk -t%d -c%d for %gs. "+
		"Fixed rates: vegeta, %gs each after a 0.5 s warm-up; \"added\" is the target's percentile minus direct's in the same round. "+
		"Streams: %d one at a time, %d chunks %g ms apart; TTFT to the first content event. "+
		"CPU: utime+stime of the target's processes (nginx: its workers) over the highest-rate run, per request answered. "+
		"RSS: VmRSS (nginx: its workers) after start and after the last round.\n\n",
		s.Rounds, s.WrkThreads, s.WrkConnections, s.DurationS, s.DurationS, s.Streams, s.Chunks, s.GapMs)
	b.WriteString(r.markdownTable())

	b.WriteString("\n## Targets\n\nSet for vigil-full; vigil-min for reference.\n\n")
	b.WriteString("| check | vigil-full | now | goal | vigil-min | now | goal |\n|---|---|---|---|---|---|---|\n")
	for i := 0; i < len(r.Checks)/2; i++ {
		f, mn := r.Checks[i], r.Checks[i+len(r.Checks)/2]
		name := f.Name
		if f.Reference != "" {
			name += " (" + f.Reference + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s (%s) | %s (%s) | %s | %s | %s |\n", name, f.Shown,
			passWord(f.NowPass), f.Now, passWord(f.GoalPass), f.Goal, mn.Shown, passWord(mn.NowPass), passWord(mn.GoalPass))
	}

	b.WriteString("\n## Absolute figures (medians over rounds)\n\n| |")
	for _, rate := range s.Rates {
		fmt.Fprintf(&b, " p50 / p99 at %d req/s |", rate)
	}
	b.WriteString(" stream TTFT p50 | chunk gap p50 / p99 | coalesced chunks | errors (wrk / fixed rate / streams) | requests answered |\n|---|")
	for range s.Rates {
		b.WriteString("---|")
	}
	b.WriteString("---|---|---|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s |", t.Name)
		rateErrs := 0
		for _, rs := range t.Rates {
			fmt.Fprintf(&b, " %.3f / %.3f ms |", rs.P50Ms, rs.P99Ms)
			rateErrs += rs.Errors
		}
		fmt.Fprintf(&b, " %.3f ms | %.3f / %.3f ms | %.1f %% | %d / %d / %d | %s |\n", t.StreamTTFTP50Ms, t.GapP50Ms, t.GapP99Ms,
			100*t.Coalesced, t.WrkErrors, rateErrs, t.StreamErrors, thousands(float64(t.Requests)))
	}
	if full := r.target(vigilFull); len(full.Rates) > 0 {
		top := full.Rates[len(full.Rates)-1]
		if len(top.AuxCPUUsPerReq) > 0 {
			fmt.Fprintf(&b, "\nHelpers of vigil-full at %d req/s, CPU per request (not in its figure): Jaeger %.0f µs, Redis %.0f µs. "+
				"The mock backend itself: %.0f µs per request.\n", top.Rate, top.AuxCPUUsPerReq["jaeger"], top.AuxCPUUsPerReq["redis"],
				r.target(direct).CPUUsPerReq)
		}
	}
	if len(r.Profiles) > 0 {
		b.WriteString("\n## Profiles of vigil-full\n\nTaken after the rounds, in runs of their own (not in the figures above):\n\n")
		for _, p := range r.Profiles {
			fmt.Fprintf(&b, "- `%s`\n", p)
		}
		b.WriteString("\n`go tool pprof -http=: FILE` to browse; `*.top.txt` are `go tool pprof -top` summaries.\n")
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + s + "`"
}

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// printChecks prints the PASS/FAIL lines.
func (r *results) printChecks(w io.Writer) {
	fmt.Fprintln(w, "targets (ratios within this run):")
	for _, c := range r.Checks {
		ref := ""
		if c.Reference != "" {
			ref = "; " + c.Reference
		}
		fmt.Fprintf(w, "  %-10s %-30s %-24s now %s (%s)  goal %s (%s)%s\n", c.Target, c.Name, c.Shown,
			passWord(c.NowPass), c.Now, passWord(c.GoalPass), c.Goal, ref)
	}
}

// rewrite writes dir's results.md and results.png anew from its
// results.json, after a change to how they are drawn.
func rewrite(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	var r results
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "results.png"))
}

// write writes results.md, results.json and results.png into dir.
func (r *results) write(dir string) error {
	if err := writeReport(dir, "results", r.markdown(), r); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "results.png"))
}

// writeReport writes name.md (md) and name.json (v, indented) into dir.
func writeReport(dir, name, md string, v any) error {
	if err := os.WriteFile(filepath.Join(dir, name+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	j, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".json"), append(j, '\n'), 0o644)
}
