package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The stream suite's targets, for vigil-full.
const (
	// targetStreamCPURatio: CPU per 1k events at most this multiple of
	// nginx's, the median over rounds of the ratio within each round.
	targetStreamCPURatio = 1.1
	// targetStreamMemKiB: RSS per concurrent stream, (peak − idle) / streams.
	targetStreamMemKiB = 64
	// targetStreamGapP99Ms: added inter-chunk gap p99 at targetGapLevel
	// streams.
	targetStreamGapP99Ms = 1.0
	targetGapLevel       = 1000
	// targetHoldLevel streams held with no error and RSS while held at
	// most targetHoldRSS.
	targetHoldLevel = 10000
	targetHoldRSS   = 1 << 30
)

// streamsResults is everything the stream suite writes to streams.json.
type streamsResults struct {
	Started     string              `json:"started"`
	WallSeconds float64             `json:"wall_seconds"`
	Command     string              `json:"command"`
	Machine     balanceMachine      `json:"machine"`
	Settings    streamsSettingsJSON `json:"settings"`
	Summary     []streamsSummary    `json:"summary"`
	Checks      []streamsCheck      `json:"checks"`
	Runs        []*streamsRun       `json:"runs"`
	Profiles    []string            `json:"profiles,omitempty"`
	Notes       []string            `json:"notes,omitempty"`
	// Partial says how much of the suite ran when the report was written
	// before its end (after each run, or when a run failed); "" once it
	// is whole.
	Partial string `json:"partial,omitempty"`
}

// streamsSettingsJSON are the knobs a run used.
type streamsSettingsJSON struct {
	Levels []int `json:"levels"`
	// RequestedLevels are -streams-levels, before any was lowered for the
	// open-file limit.
	RequestedLevels []int    `json:"requested_levels"`
	Peers           []string `json:"peers"`
	Rounds          int      `json:"rounds"`
	PerClient       int      `json:"streams_per_client"`
	Chunks          int      `json:"chunks"`
	GapMs           float64  `json:"gap_ms"`
	RampS           float64  `json:"ramp_s"`
	LogprobShare    float64  `json:"logprob_share"`
	OpenFiles       uint64   `json:"open_files_limit"`
	MaxConns        int      `json:"vigil_max_connections,omitempty"`
}

// streamsRun is one peer at one level in one round.
type streamsRun struct {
	Round int              `json:"round"`
	Level int              `json:"level"`
	Peer  string           `json:"peer"`
	Load  streamLoadResult `json:"load"`
	// CPUSeconds is the peer's user+system time over the load (nginx: its
	// workers; direct: the mock); CPUPer1kMs per thousand SSE events the
	// clients read.
	CPUSeconds       float64            `json:"cpu_s"`
	CPUPer1kMs       float64            `json:"cpu_per_1k_events_ms"`
	MockCPUPer1kMs   float64            `json:"mock_cpu_per_1k_events_ms"`
	LoaderCPUPer1kMs float64            `json:"loader_cpu_per_1k_events_ms"`
	AuxCPUPer1kMs    map[string]float64 `json:"aux_cpu_per_1k_events_ms,omitempty"`
	// RSSIdle: after start, warm-up and idle; RSSPeak: the highest sample
	// during the load; RSSHeld: the median sample of the steady window
	// (every stream in flight); RSSAfter: after the load, idle plus 1 s.
	RSSIdle         int64            `json:"rss_idle_bytes"`
	RSSPeak         int64            `json:"rss_peak_bytes"`
	RSSHeld         int64            `json:"rss_held_bytes"`
	RSSAfter        int64            `json:"rss_after_bytes"`
	HeldSamples     int              `json:"held_samples"`
	MemPerStreamKiB float64          `json:"mem_per_stream_kib"`
	Goroutines      *goroutineCounts `json:"goroutines,omitempty"`
	Samples         []memSample      `json:"samples"`
	Notes           []string         `json:"notes,omitempty"`
}

// goroutineCounts are a Vigil's go_goroutines: idle, the highest and the
// median scraped in the steady window, after; PerStream is (held − idle)
// / streams.
type goroutineCounts struct {
	Idle      float64 `json:"idle"`
	Peak      float64 `json:"peak"`
	Held      float64 `json:"held"`
	After     float64 `json:"after"`
	PerStream float64 `json:"per_stream"`
}

// streamsSummary is one peer at one level: medians over rounds (errors
// and streams summed). Added figures are taken within each round against
// direct's at the same level (AddedVs "direct"), or against the mock's
// nominal gap and stream length when direct did not run ("nominal").
type streamsSummary struct {
	Level            int                `json:"level"`
	Peer             string             `json:"peer"`
	Rounds           int                `json:"rounds"`
	Streams          int                `json:"streams"`
	Errors           int                `json:"errors"`
	Events           float64            `json:"events"`
	CPUPer1kMs       float64            `json:"cpu_per_1k_events_ms"`
	CPUPer1kByRound  []float64          `json:"cpu_per_1k_events_ms_by_round"`
	VsNginx          float64            `json:"cpu_vs_nginx"`
	VsGoProxy        float64            `json:"cpu_vs_go_proxy"`
	MockCPUPer1kMs   float64            `json:"mock_cpu_per_1k_events_ms"`
	LoaderCPUPer1kMs float64            `json:"loader_cpu_per_1k_events_ms"`
	AuxCPUPer1kMs    map[string]float64 `json:"aux_cpu_per_1k_events_ms,omitempty"`
	GapP50Ms         float64            `json:"gap_p50_ms"`
	GapP99Ms         float64            `json:"gap_p99_ms"`
	AddedGapP50Ms    float64            `json:"added_gap_p50_ms"`
	AddedGapP99Ms    float64            `json:"added_gap_p99_ms"`
	DurationP50Ms    float64            `json:"duration_p50_ms"`
	DurationP99Ms    float64            `json:"duration_p99_ms"`
	AddedDurP50Ms    float64            `json:"added_duration_p50_ms"`
	AddedDurP99Ms    float64            `json:"added_duration_p99_ms"`
	AddedVs          string             `json:"added_vs"`
	RSSIdle          int64              `json:"rss_idle_bytes"`
	RSSPeak          int64              `json:"rss_peak_bytes"`
	RSSHeld          int64              `json:"rss_held_bytes"`
	RSSAfter         int64              `json:"rss_after_bytes"`
	MemPerStreamKiB  float64            `json:"mem_per_stream_kib"`
	// GoroutinesPerStream is nil for a peer that exposes no count.
	GoroutinesPerStream *float64 `json:"goroutines_per_stream,omitempty"`
}

// streamsCheck is one target's verdict for vigil-full, with the same
// figure of the references; Evaluated is false when what it needs did
// not run.
type streamsCheck struct {
	Target    string `json:"target"`
	VigilFull string `json:"vigil_full"`
	Nginx     string `json:"nginx"`
	GoProxy   string `json:"go_proxy"`
	VigilMin  string `json:"vigil_min"`
	Evaluated bool   `json:"evaluated"`
	Pass      bool   `json:"pass"`
	Why       string `json:"why,omitempty"` // when not evaluated
}

func (c streamsCheck) verdict() string {
	if !c.Evaluated {
		return "—"
	}
	return passWord(c.Pass)
}

func newStreamsResults(c config, began time.Time, levels []int, peers []string, l *streamsLab) *streamsResults {
	m := machineInfo(c)
	s := c.streamSuite
	r := &streamsResults{
		Started: began.UTC().Format(time.RFC3339),
		Command: os.Getenv("BENCH_COMMAND"),
		Machine: balanceMachine{CPU: m.CPU, Cores: m.Cores, MemGiB: m.MemGiB, Kernel: m.Kernel, Go: m.Go, Vigil: m.Vigil,
			LoadBefore: loadAvg()},
		Settings: streamsSettingsJSON{
			Levels: levels, Peers: peers, Rounds: s.rounds, PerClient: s.perClient, Chunks: s.chunks, GapMs: ms(s.gap),
			RampS: (time.Duration(s.chunks-1) * s.gap / 2).Seconds(), LogprobShare: s.logprobs, OpenFiles: l.nofile,
			MaxConns: l.maxConns,
		},
	}
	if r.Command == "" {
		r.Command = "proxybench " + strings.Join(os.Args[1:], " ")
	}
	return r
}

// finish adds what is known only at the end: load average, wall time,
// the summary, the verdicts and the notes.
func (r *streamsResults) finish(began time.Time, notes []string) {
	r.Machine.LoadAfter = loadAvg()
	r.WallSeconds = time.Since(began).Seconds()
	// Rebuilt each time: finish runs after every run.
	r.Notes = slices.Clone(notes)
	r.summarize()
	r.Checks = r.checks()
	for _, run := range r.Runs {
		if run.Load.Errors > 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("Round %d, %d streams, %s: %d stream(s) failed, e.g. %s.", run.Round, run.Level,
				run.Peer, run.Load.Errors, strings.Join(run.Load.ErrorExamples, "; ")))
		}
		for _, n := range run.Notes {
			r.Notes = append(r.Notes, fmt.Sprintf("Round %d, %d streams, %s: %s.", run.Round, run.Level, run.Peer, n))
		}
		if run.HeldSamples == 0 {
			r.Notes = append(r.Notes, fmt.Sprintf("Round %d, %d streams, %s: no RSS sample fell in the steady window; held RSS is 0.",
				run.Round, run.Level, run.Peer))
		}
	}
}

// run returns the run of peer at level in round, nil when there is none.
func (r *streamsResults) run(round, level int, peer string) *streamsRun {
	for _, run := range r.Runs {
		if run.Round == round && run.Level == level && run.Peer == peer {
			return run
		}
	}
	return nil
}

// summarize fills Summary from Runs.
func (r *streamsResults) summarize() {
	s := r.Settings
	nominalGap := s.GapMs
	nominalLen := float64(s.Chunks-1) * s.GapMs
	r.Summary = nil
	for _, level := range s.Levels {
		for _, peer := range s.Peers {
			sum := streamsSummary{Level: level, Peer: peer, AddedVs: "nominal"}
			var events, cpu, vsN, vsG, mock, loader, g50, g99, ag50, ag99, d50, d99, ad50, ad99, idle, peak, held, after, mem, gps []float64
			aux := map[string][]float64{}
			for round := 1; round <= s.Rounds; round++ {
				run := r.run(round, level, peer)
				if run == nil {
					continue
				}
				sum.Rounds++
				sum.Streams += run.Load.Streams
				sum.Errors += run.Load.Errors
				events = append(events, float64(run.Load.Events))
				cpu = append(cpu, run.CPUPer1kMs)
				if n := r.run(round, level, nginx); n != nil && n.CPUPer1kMs > 0 {
					vsN = append(vsN, run.CPUPer1kMs/n.CPUPer1kMs)
				}
				if g := r.run(round, level, goProxy); g != nil && g.CPUPer1kMs > 0 {
					vsG = append(vsG, run.CPUPer1kMs/g.CPUPer1kMs)
				}
				mock, loader = append(mock, run.MockCPUPer1kMs), append(loader, run.LoaderCPUPer1kMs)
				for k, v := range run.AuxCPUPer1kMs {
					aux[k] = append(aux[k], v)
				}
				l := run.Load
				g50, g99, d50, d99 = append(g50, l.GapP50Ms), append(g99, l.GapP99Ms), append(d50, l.DurationP50Ms), append(d99, l.DurationP99Ms)
				refG50, refG99, refD50, refD99 := nominalGap, nominalGap, nominalLen, nominalLen
				if d := r.run(round, level, direct); d != nil && d.Load.Streams > 0 {
					sum.AddedVs = direct
					refG50, refG99, refD50, refD99 = d.Load.GapP50Ms, d.Load.GapP99Ms, d.Load.DurationP50Ms, d.Load.DurationP99Ms
				}
				ag50, ag99 = append(ag50, l.GapP50Ms-refG50), append(ag99, l.GapP99Ms-refG99)
				ad50, ad99 = append(ad50, l.DurationP50Ms-refD50), append(ad99, l.DurationP99Ms-refD99)
				idle, peak = append(idle, float64(run.RSSIdle)), append(peak, float64(run.RSSPeak))
				held, after = append(held, float64(run.RSSHeld)), append(after, float64(run.RSSAfter))
				mem = append(mem, run.MemPerStreamKiB)
				if run.Goroutines != nil {
					gps = append(gps, run.Goroutines.PerStream)
				}
			}
			if sum.Rounds == 0 {
				continue
			}
			sum.Events, sum.CPUPer1kMs, sum.CPUPer1kByRound = median(events), median(cpu), cpu
			sum.VsNginx, sum.VsGoProxy = median(vsN), median(vsG)
			sum.MockCPUPer1kMs, sum.LoaderCPUPer1kMs = median(mock), median(loader)
			for k, v := range aux {
				if sum.AuxCPUPer1kMs == nil {
					sum.AuxCPUPer1kMs = map[string]float64{}
				}
				sum.AuxCPUPer1kMs[k] = median(v)
			}
			sum.GapP50Ms, sum.GapP99Ms, sum.AddedGapP50Ms, sum.AddedGapP99Ms = median(g50), median(g99), median(ag50), median(ag99)
			sum.DurationP50Ms, sum.DurationP99Ms, sum.AddedDurP50Ms, sum.AddedDurP99Ms = median(d50), median(d99), median(ad50), median(ad99)
			sum.RSSIdle, sum.RSSPeak, sum.RSSHeld, sum.RSSAfter = int64(median(idle)), int64(median(peak)), int64(median(held)), int64(median(after))
			sum.MemPerStreamKiB = median(mem)
			if len(gps) > 0 {
				g := median(gps)
				sum.GoroutinesPerStream = &g
			}
			r.Summary = append(r.Summary, sum)
		}
	}
}

// summary returns peer's summary at level; ok is false when it did not run.
func (r *streamsResults) summary(level int, peer string) (streamsSummary, bool) {
	for _, s := range r.Summary {
		if s.Level == level && s.Peer == peer {
			return s, true
		}
	}
	return streamsSummary{}, false
}

// checks evaluates the targets for vigil-full, with nginx's, go-proxy's
// and vigil-min's figures beside.
func (r *streamsResults) checks() []streamsCheck {
	levels := r.Settings.Levels
	if len(levels) == 0 {
		return nil
	}
	var out []streamsCheck
	// figures fills the figure columns from one function of a summary.
	figures := func(c *streamsCheck, level int, f func(streamsSummary) string) (streamsSummary, bool) {
		cell := func(peer string) string {
			if s, ok := r.summary(level, peer); ok {
				return f(s)
			}
			return "—"
		}
		c.Nginx, c.GoProxy, c.VigilMin, c.VigilFull = cell(nginx), cell(goProxy), cell(vigilMin), cell(vigilFull)
		return r.summary(level, vigilFull)
	}
	notRun := func(c streamsCheck, why string) streamsCheck { c.Why = why; return c }

	// CPU: at the lowest level, where no peer saturates the cores.
	low := levels[0]
	if l := slices.Index(levels, targetGapLevel); l >= 0 {
		low = levels[l]
	}
	c := streamsCheck{Target: fmt.Sprintf("CPU per 1k events ≤ %g× nginx's (median of the per-round ratios; %s streams)",
		targetStreamCPURatio, thousands(float64(low)))}
	full, ok := figures(&c, low, func(s streamsSummary) string {
		x := fmt.Sprintf("%.2f ms", s.CPUPer1kMs)
		if s.Peer != nginx && s.VsNginx > 0 {
			x += fmt.Sprintf(" (%.2f× nginx", s.VsNginx)
			if s.Peer != goProxy && s.VsGoProxy > 0 {
				x += fmt.Sprintf(", %.2f× go-proxy", s.VsGoProxy)
			}
			x += ")"
		}
		return x
	})
	switch _, nOK := r.summary(low, nginx); {
	case !ok || !nOK:
		out = append(out, notRun(c, "needs vigil-full and nginx"))
	default:
		c.Evaluated, c.Pass = true, full.VsNginx <= targetStreamCPURatio
		out = append(out, c)
	}

	// Memory per concurrent stream, at every level.
	for _, level := range levels {
		c := streamsCheck{Target: fmt.Sprintf("memory per concurrent stream ≤ %d KiB ((peak − idle RSS) / streams; %s streams)",
			targetStreamMemKiB, thousands(float64(level)))}
		full, ok := figures(&c, level, func(s streamsSummary) string {
			x := fmt.Sprintf("%.1f KiB", s.MemPerStreamKiB)
			if s.GoroutinesPerStream != nil {
				x += fmt.Sprintf(", %.2f goroutines", *s.GoroutinesPerStream)
			}
			return x
		})
		if !ok {
			out = append(out, notRun(c, "needs vigil-full"))
			continue
		}
		c.Evaluated, c.Pass = true, full.MemPerStreamKiB <= targetStreamMemKiB
		out = append(out, c)
	}

	// Added gap p99, at 1,000 streams.
	c = streamsCheck{Target: fmt.Sprintf("added inter-chunk gap p99 ≤ %g ms at %s streams", targetStreamGapP99Ms, thousands(targetGapLevel))}
	full, ok = figures(&c, targetGapLevel, func(s streamsSummary) string {
		return fmt.Sprintf("%s ms (p99 %.2f ms)", signed(s.AddedGapP99Ms, 2), s.GapP99Ms)
	})
	switch {
	case !ok:
		out = append(out, notRun(c, fmt.Sprintf("needs vigil-full at %s streams (-streams-levels)", thousands(targetGapLevel))))
	default:
		c.Evaluated, c.Pass = true, full.AddedGapP99Ms <= targetStreamGapP99Ms
		if full.AddedVs != direct {
			c.Target += " (against the nominal gap: direct did not run)"
		}
		out = append(out, c)
	}

	// 10,000 streams held: the highest level, evaluated when 10,000 or
	// more were asked for (it may have been lowered for the open-file
	// limit, which the notes say).
	top := levels[len(levels)-1]
	asked := top
	if rl := r.Settings.RequestedLevels; len(rl) > 0 {
		asked = max(top, slices.Max(rl))
	}
	c = streamsCheck{Target: fmt.Sprintf("%s streams held: 0 errors and held RSS ≤ %s (%s streams)", thousands(targetHoldLevel),
		mib(targetHoldRSS), thousands(float64(top)))}
	full, ok = figures(&c, top, func(s streamsSummary) string {
		return fmt.Sprintf("%d errors, held %s (peak %s)", s.Errors, mib(s.RSSHeld), mib(s.RSSPeak))
	})
	switch {
	case !ok:
		out = append(out, notRun(c, "needs vigil-full"))
	case asked < targetHoldLevel:
		out = append(out, notRun(c, fmt.Sprintf("the highest level run is %s", thousands(float64(top)))))
	default:
		c.Evaluated, c.Pass = true, full.Errors == 0 && full.RSSHeld > 0 && full.RSSHeld <= targetHoldRSS
		out = append(out, c)
	}
	return out
}

// markdownTables is one table per level: peers as rows.
func (r *streamsResults) markdownTables() string {
	var b strings.Builder
	for _, level := range r.Settings.Levels {
		fmt.Fprintf(&b, "\n### %s concurrent streams\n\n", thousands(float64(level)))
		b.WriteString("| peer | streams (errors) | events relayed | CPU per 1k events (vs nginx) | added gap p50 / p99 | gap p50 / p99 | added duration p50 / p99 | RSS idle → peak / held / after | per stream | goroutines per stream |\n")
		b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
		for _, peer := range r.Settings.Peers {
			s, ok := r.summary(level, peer)
			if !ok {
				continue
			}
			vs := ""
			if peer != nginx && peer != direct && s.VsNginx > 0 {
				vs = fmt.Sprintf(" (%.2f×)", s.VsNginx)
			}
			added := fmt.Sprintf("%s / %s ms", signed(s.AddedGapP50Ms, 2), signed(s.AddedGapP99Ms, 2))
			addedDur := fmt.Sprintf("%s / %s ms", signed(s.AddedDurP50Ms, 0), signed(s.AddedDurP99Ms, 0))
			if peer == direct {
				added, addedDur = "—", "—"
			}
			gps := "—"
			if s.GoroutinesPerStream != nil {
				gps = fmt.Sprintf("%.2f", *s.GoroutinesPerStream)
			}
			fmt.Fprintf(&b, "| %s | %s (%d) | %s | %.2f ms%s | %s | %.2f / %.2f ms | %s | %s → %s / %s / %s | %.1f KiB | %s |\n",
				peer, thousands(float64(s.Streams)), s.Errors, thousands(s.Events), s.CPUPer1kMs, vs, added, s.GapP50Ms, s.GapP99Ms,
				addedDur, mib(s.RSSIdle), mib(s.RSSPeak), mib(s.RSSHeld), mib(s.RSSAfter), s.MemPerStreamKiB, gps)
		}
	}
	return b.String()
}

// markdown is the whole of streams.md.
func (r *streamsResults) markdown() string {
	var b strings.Builder
	s, m := r.Settings, r.Machine
	b.WriteString("# Long streams: Vigil against nginx and go-proxy\n\n")
	if r.Partial != "" {
		fmt.Fprintf(&b, "**This report is %s.**\n\n", r.Partial)
	}
	fmt.Fprintf(&b, "`%s`; %s; %d cores (%s), %d GiB, Linux %s, load average %s before, %s after; %s, %s; wall time %s.\n\n",
		r.Command, r.Started, m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadBefore, m.LoadAfter, orDash(m.Vigil), m.Go,
		(time.Duration(r.WallSeconds) * time.Second).String())
	fmt.Fprintf(&b, "The mock streams %d chat.completion.chunk events %g ms apart (then usage and `[DONE]`), with logprobs (5 alternatives) "+
		"on %.0f %% of the streams. At each level every peer is started afresh, warmed up (%d short streams), left idle, then loaded: "+
		"as many clients as the level, one raw HTTP/1.1 connection each (the load generator is a process of its own), starting evenly "+
		"over %g s and sending %d streams back to back, so that between the last client's start and the first client's end every "+
		"stream is in flight (the steady window). %d round(s), peers interleaved, a different one first each round; medians over rounds, "+
		"errors summed.\n\n",
		s.Chunks, s.GapMs, 100*s.LogprobShare, 2*streamsWarmupClients, s.RampS, s.PerClient, s.Rounds)
	b.WriteString("- **Events relayed:** SSE events the clients read (content, usage, `[DONE]`). A stream is an error unless it brings a 200, " +
		"every content event (with logprobs when asked for) and `[DONE]`.\n" +
		"- **CPU per 1k events:** utime+stime (`/proc/PID/stat`) of the peer's processes over the load (nginx: its workers; direct: the mock), " +
		"per 1,000 events relayed; the ratio to nginx is taken within each round, then its median.\n" +
		"- **Gaps** are between consecutive content events of a stream as the client read them; **duration** from writing the request " +
		"to reading `[DONE]`; **added** is the peer's percentile minus direct's at the same level in the same round.\n" +
		"- **RSS** (VmRSS; nginx: its workers): *idle* after the warm-up, *peak* the highest sample during the load (every 250 ms), " +
		"*held* the median sample in the steady window (the settled RSS while every stream is held), *after* once the processes are idle " +
		"after the load, plus 1 s. **Per stream** = (peak − idle) / streams.\n" +
		"- **Goroutines per stream** (the Vigils: `go_goroutines` of `/metrics`, scraped every second) = (median in the steady window − idle) / streams.\n")
	b.WriteString(r.markdownTables())
	b.WriteString("\n## Targets (vigil-full; the others for reference)\n\n| target | vigil-full | | nginx | go-proxy | vigil-min |\n|---|---|---|---|---|---|\n")
	for _, c := range r.Checks {
		v := c.verdict()
		if !c.Evaluated && c.Why != "" {
			v = "— (" + c.Why + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", c.Target, c.VigilFull, v, c.Nginx, c.GoProxy, c.VigilMin)
	}
	b.WriteString("\n## Helpers (CPU per 1k events, not in the peers' figures)\n\n| level | peer | mock | load generator | Jaeger | Redis |\n|---|---|---|---|---|---|\n")
	for _, s := range r.Summary {
		j, rd := "—", "—"
		if v, ok := s.AuxCPUPer1kMs["jaeger"]; ok {
			j = fmt.Sprintf("%.2f ms", v)
		}
		if v, ok := s.AuxCPUPer1kMs["redis"]; ok {
			rd = fmt.Sprintf("%.2f ms", v)
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f ms | %.2f ms | %s | %s |\n", thousands(float64(s.Level)), s.Peer, s.MockCPUPer1kMs, s.LoaderCPUPer1kMs, j, rd)
	}
	if len(r.Profiles) > 0 {
		b.WriteString("\n## Profiles of vigil-full\n\nA run of its own after the rounds, at the lowest level, in the steady window:\n\n")
		for _, p := range r.Profiles {
			fmt.Fprintf(&b, "- `%s`\n", p)
		}
		b.WriteString("\n`go tool pprof -sample_index=inuse_space -top -base IDLE HELD` names what the streams hold.\n")
	}
	b.WriteString("\n`streams.png`: CPU per 1k events, memory per stream, added gap p99 and held RSS by level and peer.\n")
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// printChecks prints the PASS/FAIL lines.
func (r *streamsResults) printChecks(w io.Writer) {
	fmt.Fprintln(w, "targets (vigil-full; nginx, go-proxy for reference):")
	for _, c := range r.Checks {
		why := ""
		if c.Why != "" {
			why = " (" + c.Why + ")"
		}
		fmt.Fprintf(w, "  %-4s %s: vigil-full %s; nginx %s; go-proxy %s%s\n", c.verdict(), c.Target, c.VigilFull, c.Nginx, c.GoProxy, why)
	}
}

// write writes streams.md, streams.json and streams.png into dir.
func (r *streamsResults) write(dir string) error {
	if err := writeReport(dir, "streams", r.markdown(), r); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "streams.png"))
}

// plot draws four bar charts grouped by level, a bar per peer.
func (r *streamsResults) plot(path string) error {
	var levels []string
	for _, l := range r.Settings.Levels {
		levels = append(levels, thousands(float64(l)))
	}
	peers := r.Settings.Peers
	bars := func(title, ylabel string, skipDirect bool, value func(streamsSummary) float64) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Y.Label.Text = ylabel
		var series []plotter.Values
		for _, peer := range peers {
			if skipDirect && peer == direct {
				series = append(series, nil)
				continue
			}
			v := plotter.Values{}
			for _, level := range r.Settings.Levels {
				x := 0.0
				if s, ok := r.summary(level, peer); ok {
					x = value(s)
				}
				v = append(v, x)
			}
			series = append(series, v)
		}
		if err := addBars(p, 100, series, peers); err != nil {
			return nil, err
		}
		p.Legend.Top = true
		p.NominalX(levels...)
		p.X.Label.Text = "concurrent streams"
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Max += (p.Y.Max - p.Y.Min) * 0.45 // room for the legend
		p.Add(plotter.NewGrid())
		return p, nil
	}
	cpu, err := bars("CPU per 1k events", "ms", false, func(s streamsSummary) float64 { return s.CPUPer1kMs })
	if err != nil {
		return err
	}
	mem, err := bars("memory per concurrent stream", "KiB", false, func(s streamsSummary) float64 { return s.MemPerStreamKiB })
	if err != nil {
		return err
	}
	gap, err := bars("added inter-chunk gap p99", "ms", true, func(s streamsSummary) float64 { return s.AddedGapP99Ms })
	if err != nil {
		return err
	}
	held, err := bars("RSS while every stream is held", "MiB", false, func(s streamsSummary) float64 { return float64(s.RSSHeld) / (1 << 20) })
	if err != nil {
		return err
	}
	return writeGrid(path, 20*vg.Centimeter, [][]*plot.Plot{{cpu, mem}, {gap, held}})
}
