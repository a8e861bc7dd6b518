package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// balanceResults is everything the balance suite writes to balance.json.
type balanceResults struct {
	Started     string              `json:"started"`
	WallSeconds float64             `json:"wall_seconds"`
	Command     string              `json:"command"`
	Machine     balanceMachine      `json:"machine"`
	Settings    balanceSettingsJSON `json:"settings"`
	Cases       []caseResult        `json:"cases"`
	Notes       []string            `json:"notes,omitempty"`
}

// balanceMachine describes where the suite ran.
type balanceMachine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	MemGiB int    `json:"mem_gib"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Vigil  string `json:"vigil"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1-minute load before
	// the first case and after the last.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

// balanceSettingsJSON are the knobs a run used.
type balanceSettingsJSON struct {
	DurationS      float64 `json:"duration_s"`
	WarmupS        float64 `json:"warmup_s"`
	SlowPhaseS     float64 `json:"slow_phase_s"`
	Clients        int     `json:"clients"`
	Cases          string  `json:"cases"`
	TTFTMs         float64 `json:"ttft_ms"`
	SlowTTFTMs     float64 `json:"slow_ttft_ms"`
	ITLMs          float64 `json:"itl_ms"`
	Tokens         int     `json:"tokens"`
	MaxNumSeqs     int     `json:"max_num_seqs"`
	PinnedLoad     float64 `json:"pinned_load"`
	ShareWindowS   float64 `json:"share_window_s"`
	RecoveryCapS   float64 `json:"recovery_cap_s"`
	RecoveredShare float64 `json:"recovered_share"`
}

// caseResult is one case under every strategy, and its target.
type caseResult struct {
	ID       string        `json:"id"`
	Title    string        `json:"title"`
	Target   string        `json:"target"`
	Backends []string      `json:"backends"`
	Runs     []*balanceRun `json:"runs"` // in strategies order
	Shown    string        `json:"shown"`
	Pass     bool          `json:"pass"`
}

// balanceRun is one case under one strategy. Requests, shares and TTFT
// cover the requests sent in the measured part (case d: everything after
// the warm-up, slow phase and recovery both).
type balanceRun struct {
	Strategy string `json:"strategy"`
	// Requests counts those that streamed content to the end.
	Requests      int                `json:"requests"`
	Errors        int                `json:"errors"`
	ErrorExamples []string           `json:"error_examples,omitempty"`
	Counts        map[string]int     `json:"counts"`
	Shares        map[string]float64 `json:"shares"`
	TTFTP50Ms     float64            `json:"ttft_p50_ms"`
	TTFTP99Ms     float64            `json:"ttft_p99_ms"`
	// Figure is the case's figure for this run, Shown how it reads.
	Figure float64 `json:"figure"`
	Shown  string  `json:"shown"`
	// PeakWaiting is each backend's most requests waiting in its queue,
	// polled every 250 ms over the whole run.
	PeakWaiting map[string]int64 `json:"peak_waiting"`
	// Weights is vigil_backend_weight from the gateway's /metrics,
	// AdminWeights the weight of GET /admin/backends, both read just
	// before the load stopped.
	Weights      map[string]float64 `json:"metrics_weight"`
	AdminWeights map[string]float64 `json:"admin_weight"`
	Recovery     *recovery          `json:"recovery,omitempty"`
}

// recovery is case d's measurement of one run.
type recovery struct {
	// RecoveredAtS is when the slow backend was recovered, since the
	// load began.
	RecoveredAtS float64 `json:"recovered_at_s"`
	WindowS      float64 `json:"window_s"`
	// ShareBefore is its share over the window just before.
	ShareBefore float64 `json:"share_before"`
	// Seconds is the time from the recovery until its share over the
	// window reached recoveredShare of an even share; nil when not within
	// CapS.
	Seconds  *float64     `json:"seconds"`
	CapS     float64      `json:"cap_s"`
	Timeline []sharePoint `json:"timeline"`
}

// sharePoint is the slow backend's share over the window ending T seconds
// after the recovery (negative: before).
type sharePoint struct {
	T     float64 `json:"t"`
	Share float64 `json:"share"`
}

func newBalanceResults(c config, began time.Time) *balanceResults {
	m := machineInfo(c)
	r := &balanceResults{
		Started: began.UTC().Format(time.RFC3339),
		Command: os.Getenv("BENCH_COMMAND"),
		Machine: balanceMachine{CPU: m.CPU, Cores: m.Cores, MemGiB: m.MemGiB, Kernel: m.Kernel, Go: m.Go, Vigil: m.Vigil,
			LoadBefore: loadAvg()},
		Settings: balanceSettingsJSON{
			DurationS: c.balance.duration.Seconds(), WarmupS: balanceWarmup.Seconds(),
			SlowPhaseS: (balanceWarmup + 2*c.balance.duration).Seconds(), Clients: c.balance.clients, Cases: c.balance.cases,
			TTFTMs: ms(fastTTFT), SlowTTFTMs: ms(slowTTFT), ITLMs: ms(simITL), Tokens: balanceTokens, MaxNumSeqs: simMaxSeqs,
			PinnedLoad: pinnedLoad, ShareWindowS: shareWindow.Seconds(), RecoveryCapS: recoveryCap.Seconds(),
			RecoveredShare: recoveredShare,
		},
	}
	if r.Command == "" {
		r.Command = "proxybench " + strings.Join(os.Args[1:], " ")
	}
	return r
}

// finish adds what is known only at the end: the load average, wall time
// and notes.
func (r *balanceResults) finish(began time.Time) {
	r.Machine.LoadAfter = loadAvg()
	r.WallSeconds = time.Since(began).Seconds()
	for _, cr := range r.Cases {
		for _, run := range cr.Runs {
			if run.Errors > 0 {
				r.Notes = append(r.Notes, fmt.Sprintf("case %s, %s: %d request(s) failed, e.g. %s.", cr.ID, run.Strategy,
					run.Errors, strings.Join(run.ErrorExamples, "; ")))
			}
		}
		if cr.ID == "c" && len(cr.Runs) > 0 && cr.Runs[0].Requests > 0 {
			// A weighted random pick with equal weights still spreads
			// the shares: the binomial standard deviation of one share.
			n := float64(cr.Runs[0].Requests)
			p := 1 / float64(len(cr.Backends))
			sd := math.Sqrt(p*(1-p)/n) / p
			r.Notes = append(r.Notes, fmt.Sprintf("case c: with %d requests, picking at random with equal weights moves each share by %.1f %% (relative, one standard deviation) by chance alone; ±5 %% is %.1f of those.",
				cr.Runs[0].Requests, 100*sd, 0.05/sd))
		}
	}
}

// markdownTable is the headline table: case × strategy.
func (r *balanceResults) markdownTable() string {
	var b strings.Builder
	b.WriteString("| case | strategy | requests (errors) | share by backend | TTFT p50 / p99 | the case's figure |\n|---|---|---|---|---|---|\n")
	for _, cr := range r.Cases {
		for _, run := range cr.Runs {
			fmt.Fprintf(&b, "| %s | %s | %s (%d) | %s | %.0f / %.0f ms | %s |\n", cr.ID, run.Strategy, thousands(float64(run.Requests)),
				run.Errors, sharesText(run, cr.Backends), run.TTFTP50Ms, run.TTFTP99Ms, run.Shown)
		}
	}
	return b.String()
}

// markdown is the whole of balance.md.
func (r *balanceResults) markdown() string {
	var b strings.Builder
	s, m := r.Settings, r.Machine
	b.WriteString("# Vigil's balancing strategies\n\n")
	fmt.Fprintf(&b, "`%s`; %s; %d cores (%s), %d GiB, Linux %s, load average %s before, %s after; %s, %s; wall time %s.\n\n",
		r.Command, r.Started, m.Cores, m.CPU, m.MemGiB, m.Kernel, m.LoadBefore, m.LoadAfter, orDash(m.Vigil), m.Go,
		(time.Duration(r.WallSeconds) * time.Second).String())
	fmt.Fprintf(&b, "Backends: `vigil sim`, TTFT %g ms, ITL %g ms, %d tokens, max_num_seqs %d, each with a `vigil agent --allow-override` "+
		"pinned to %g for CPU, memory, GPU and GPU memory (case e: GPU apart). Load: %d closed-loop clients, streamed chat requests "+
		"(`max_tokens` %d) on kept-alive connections; TTFT is from sending to the first SSE event with content, the backend is "+
		"`X-Vigil-Backend`. Each case runs once per strategy, each run with a `vigil serve` of its own (the balancer's defaults but "+
		"`balancer.strategy`; analyzers, span export and access log off): %g s of load not counted, then %g s measured "+
		"(case d: %g s with b3 slow, then b3 recovered and the run goes on until its share over the last %g s is back to %.0f %% "+
		"of an even share, or for %g s).\n\n",
		s.TTFTMs, s.ITLMs, s.Tokens, s.MaxNumSeqs, s.PinnedLoad, s.Clients, s.Tokens, s.WarmupS, s.DurationS, s.SlowPhaseS,
		s.ShareWindowS, 100*s.RecoveredShare, s.RecoveryCapS)
	b.WriteString(r.markdownTable())

	b.WriteString("\n## Targets\n\n| case | target | measured | |\n|---|---|---|---|\n")
	for _, cr := range r.Cases {
		fmt.Fprintf(&b, "| %s: %s | %s | %s | %s |\n", cr.ID, cr.Title, cr.Target, cr.Shown, passWord(cr.Pass))
	}

	b.WriteString("\n## Weights as each run left them\n\n`vigil_backend_weight` from the gateway's `/metrics`, and `weight` from `GET /admin/backends` where it differs.\n\n")
	b.WriteString("| case | strategy | weights | most waiting in a backend's queue |\n|---|---|---|---|\n")
	for _, cr := range r.Cases {
		for _, run := range cr.Runs {
			var ws, qs []string
			for _, n := range cr.Backends {
				ws = append(ws, n+" "+weightPair(run.Weights, run.AdminWeights, n))
				qs = append(qs, fmt.Sprintf("%s %d", n, run.PeakWaiting[n]))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", cr.ID, run.Strategy, strings.Join(ws, " · "), strings.Join(qs, " · "))
		}
	}
	if r.hasTimeline() {
		b.WriteString("\n`balance.png`: case d, b3's share over the sliding window against the time since its recovery, by strategy.\n")
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// printChecks prints the PASS/FAIL lines.
func (r *balanceResults) printChecks(w io.Writer) {
	fmt.Fprintln(w, "targets:")
	for _, cr := range r.Cases {
		fmt.Fprintf(w, "  %s  %-4s %s: %s\n", cr.ID, passWord(cr.Pass), cr.Target, cr.Shown)
	}
}

// write writes balance.md, balance.json and, with case d, balance.png
// into dir.
func (r *balanceResults) write(dir string) error {
	if err := writeReport(dir, "balance", r.markdown(), r); err != nil {
		return err
	}
	if !r.hasTimeline() {
		return nil
	}
	return r.plot(filepath.Join(dir, "balance.png"))
}

func (r *balanceResults) hasTimeline() bool {
	for _, cr := range r.Cases {
		for _, run := range cr.Runs {
			if run.Recovery != nil && len(run.Recovery.Timeline) > 0 {
				return true
			}
		}
	}
	return false
}

// plot draws case d's share over time, a line per strategy, with the
// even share and the recovered threshold.
func (r *balanceResults) plot(path string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("case d: b3's share of the last %gs of requests", r.Settings.ShareWindowS)
	p.X.Label.Text = "seconds since b3 recovered"
	p.Y.Label.Text = "%"
	p.Y.Tick.Marker = plainTicks{}
	n := 3
	for i, cr := range r.Cases {
		if cr.ID != "d" {
			continue
		}
		n = len(cr.Backends)
		for j, run := range r.Cases[i].Runs {
			if run.Recovery == nil {
				continue
			}
			xy := make(plotter.XYs, len(run.Recovery.Timeline))
			for k, pt := range run.Recovery.Timeline {
				xy[k] = plotter.XY{X: pt.T, Y: 100 * pt.Share}
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return err
			}
			l.Color = plotutil.Color(j)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(run.Strategy, l)
		}
	}
	even := 100 / float64(n)
	// Dashed: the even share and the share that counts as recovered.
	for _, y := range []float64{even, recoveredShare * even} {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: y}, {X: p.X.Max, Y: y}})
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		l.Color = plotutil.Color(len(strategies) + 1)
		p.Add(l)
	}
	p.Y.Min = 0
	p.Y.Max = math.Max(p.Y.Max, even*1.5) * 1.15 // room for the legend
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	return p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
}
