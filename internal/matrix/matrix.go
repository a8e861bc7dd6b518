// Package matrix is the fault-isolation matrix: each fault of the demo
// injected alone on a clean baseline, one at a time, with three seeds
// concurrently (one demo each), Redis and an in-process OTLP collector
// behind TCP relays that the rows cut; it prints which signals left "ok"
// and which alerts fired for each fault, and asserts the diagonal. It is
// told with the demo's parts (internal/demo: simulators, traffic, the
// gateway's configuration, the alert receiver and the story that watches
// them); `vigil demo --scenario matrix` runs it.
package matrix

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/internal/demo"
	"github.com/vigil-gw/vigil/sim"
)

// Scenario is the matrix's name among the scenarios of `vigil demo
// --scenario`.
const Scenario = "matrix"

// Seeds are the seeds the matrix runs each row with.
var Seeds = []int64{1, 2, 3}

// Options configure Run.
type Options struct {
	Duration time.Duration // stop after this long; 0: run until ctx is done
	RPS      float64       // each demo's traffic; 0: demo.ScenarioRPS
	// Scale compresses the durations (1 or 0: the full run; 0.5: the
	// test's).
	Scale float64
	Out   io.Writer    // the progress and the matrix
	Log   *slog.Logger // the gateways' log
}

// Run runs the matrix with every seed until it is told or ctx is done or
// the duration passes, printing its progress and the matrix to o.Out. The
// options are validated by the caller (the flags of `vigil demo`).
func Run(ctx context.Context, o Options) error {
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	scale := o.Scale
	if scale <= 0 {
		scale = 1
	}
	return runMatrix(ctx, o, scale)
}

// target is what a row's inject and restore turn: one seed's demo and the
// infrastructure behind its relays.
type target struct {
	*demo.Demo
	infra *infra
}

// needs is what a matrix row needs besides the simulators.
type needs int

// The zero needs is nothing besides the simulators.
const (
	needsRedis     needs = iota + 1 // a real redis-server behind the store relay
	needsCollector                  // the in-process collector behind its relay
)

// matrixRow is one fault of the matrix, as data: what it injects and how
// it is undone, the signals and alerts it must move (the diagonal) within
// its deadline, and the consequences that are true of the fault and so
// allowed to move too, each with the reason written down.
type matrixRow struct {
	name string
	says string // what is injected, in words
	// inject and restore turn the fault on and off; restore undoes
	// exactly what inject did.
	inject, restore func(*target) error
	needs           needs
	// expect is the diagonal: each signal must leave "ok" and, when the
	// expectation names alerts, one of them fire, within deadline of the
	// injection (alerts within alertDeadline).
	expect                  []demo.Expectation
	deadline, alertDeadline time.Duration
	// allowed are the other signals the fault truly moves, and
	// allowedAlerts the alerts that follow from them; why says so.
	allowed       []demo.Signal
	allowedAlerts []string
	why           string
	// gap, when set, says what the signals cannot see of this fault
	// (expect is then empty) and what the gateway does about it.
	gap string
	// calm, when set, says why the fault must move nothing but its
	// allowed consequences (expect is then empty): the row is watched its
	// whole window for anything else.
	calm string
	// report, when set, turns the counters around the row into a note.
	report func(demo.PhaseCounters) string
}

// matrixScale is the timings and durations of a matrix run.
type matrixScale struct {
	timings demo.Timings
	// window is the longest a row is watched; a row whose diagonal is
	// met is watched settle longer for late consequences, then restored.
	window, settle time.Duration
	// clean bounds the wait, before each row, for every signal back to
	// "ok" and no alert pending or firing; quiet is how long it must
	// stay so.
	clean, quiet time.Duration
	minWarmup    time.Duration
	maxWarmup    time.Duration
	poll         time.Duration
	rps          float64
}

// newMatrixScale returns the matrix's timings at scale (1: the demo's run;
// smaller is faster, for tests). The perplexity band's buckets are whole
// minutes whatever the scale.
func newMatrixScale(scale float64) matrixScale {
	t, minWarmup := demo.IncidentTimings(scale)
	dur := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * scale).Round(100 * time.Millisecond)
	}
	return matrixScale{
		timings: t,
		window:  max(30*time.Second, dur(45*time.Second)),
		settle:  max(6*time.Second, dur(10*time.Second)),
		clean:   max(30*time.Second, dur(90*time.Second)),
		// Long enough for minShareRequests answered requests to compare
		// a backend's share of normal traffic with its share in a row.
		quiet:     max(4*time.Second, dur(6*time.Second)),
		minWarmup: minWarmup,
		maxWarmup: max(minWarmup, 90*time.Second),
		poll:      500 * time.Millisecond,
		rps:       demo.ScenarioRPS,
	}
}

// matrixRows returns the rows at scale: each fault alone: signals first, then
// backends, then infrastructure. Deadlines are the detection bounds the matrix asserts
// at scale 1 and scale them down with the timings (never below what the
// compressed windows allow).
func matrixRows(ms matrixScale) []matrixRow {
	all := demo.AllSims
	return []matrixRow{
		{
			name: "prompt mix shift", says: "prompts turn long, Russian and Chinese, with code blocks and a system prompt",
			inject:  func(d *target) error { d.SetPrompts(demo.ShiftedMix); return nil },
			restore: func(d *target) error { d.SetPrompts(demo.NormalMix); return nil },
			expect:  []demo.Expectation{{Signal: demo.SigDrift, Alerts: []string{"VigilInputDrift"}}},
			// The balancer places the shifted prompts (one shared
			// system prompt) anew; the matrix's backends are alike
			// (demo.Setup.Alike), so where they land moves nothing
			// else. The row reports the backends' shares.
			report: demo.PhaseCounters.SharesNote,
		},
		{
			// Every shape feature stays where it was (demo.TopicMix keeps each
			// prompt's length, letters and punctuation): only the content
			// test can see it.
			name: "topic change", says: "prompts turn to cooking, at the same lengths, letters and punctuation",
			inject:  func(d *target) error { d.SetPrompts(demo.TopicMix); return nil },
			restore: func(d *target) error { d.SetPrompts(demo.NormalMix); return nil },
			expect:  []demo.Expectation{{Signal: demo.SigDrift, Alerts: []string{"VigilInputDrift"}}},
			report:  demo.PhaseCounters.TopicNote,
		},
		{
			// The models have segments: the fleet's confidence,
			// perplexity and latency move with the mix (demo-small is
			// less confident than demo-model), no model's does, and only
			// the models' verdicts make states and alerts. Input drift is
			// judged fleet-wide, and its model feature is the mix: it may
			// move (at half scale, in windows of 40 prompts, its test
			// across the features lacks the power to: its alert's score
			// breaches alone).
			name: "model mix change", says: fmt.Sprintf("the traffic's models turn from %s to %s; no model changes", demo.NormalModels, demo.ShiftedModels),
			inject:  func(d *target) error { d.SetModels(demo.ShiftedModels); return nil },
			restore: func(d *target) error { d.SetModels(demo.NormalModels); return nil },
			calm:    "no model changes: confidence, output drift and latency are judged per model, and none may move",
			allowed: []demo.Signal{demo.SigDrift}, allowedAlerts: []string{"VigilInputDrift"},
			why:    "the mix of models is a change of the inputs, judged fleet-wide by input drift's model feature",
			report: demo.PhaseCounters.MixNote,
		},
		{
			name: "confidence drop", says: "every simulator's confidence 0.85 (demo-small's 0.55) → 0.4",
			inject:  knobs(func(k *sim.Knobs) { k.Confidence = 0.4 }, all...),
			restore: restore(all...),
			expect:  []demo.Expectation{{Signal: demo.SigDecay, Alerts: []string{"VigilConfidenceDecay"}}},
			allowed: []demo.Signal{demo.SigOutput, demo.SigPrecision}, allowedAlerts: []string{"VigilOutputDrift", "VigilPrecisionDivergence"},
			why: "perplexity is exp(−mean logprob): lower confidence is higher perplexity, so output drift may follow; " +
				"and the KL that the same quantization noise makes grows as the distribution flattens (for small noise ε on " +
				"the logprobs KL ≈ ½·Var_p(ε): near zero when one token holds the mass, σ²/2 when many share it), so sim-a-int8's " +
				"divergence may cross its adaptive alert threshold, learnt at confidence 0.85",
		},
		{
			name: "least-used model decay",
			says: fmt.Sprintf("sim-small's confidence %.2f → %.2f: %s, the least-used model (%.0f%% of the requests), decays",
				demo.SmallConfidence, demo.SmallDecayed, demo.SmallModel, 100*demo.NormalModels.Share(demo.SmallModel)),
			inject:  knobs(func(k *sim.Knobs) { k.Confidence = demo.SmallDecayed }, "sim-small"),
			restore: restore("sim-small"),
			expect:  []demo.Expectation{{Signal: demo.SigDecay, Alerts: []string{"VigilConfidenceDecay"}, Model: demo.SmallModel}},
			allowed: []demo.Signal{demo.SigOutput}, allowedAlerts: []string{"VigilOutputDrift"},
			why: "perplexity is exp(−mean logprob): demo-small's lower confidence is a higher perplexity " +
				"(its alert, too, for model demo-small alone)",
		},
		{
			name: "TTFT ×10 (all backends)", says: "every backend's time to first token ×10",
			inject:  knobs(func(k *sim.Knobs) { k.TTFT *= 10 }, all...),
			restore: restore(all...),
			expect:  []demo.Expectation{{Signal: demo.SigLatency, Alerts: []string{"VigilLatencyTTFT", "VigilLatencyE2E"}}},
		},
		{
			name: "one backend ×30 latency", says: "sim-b's time to first token ×30 (60 ms → 1.8 s)",
			inject:  knobs(func(k *sim.Knobs) { k.TTFT *= 30 }, "sim-b"),
			restore: restore("sim-b"),
			// The balancer moves traffic off sim-b within seconds; what
			// still reaches it is too little to move the global latency
			// percentiles, but sim-b's own answers are 30 times its
			// peers'.
			expect:  []demo.Expectation{{Signal: demo.SigSlow, Alerts: []string{"VigilBackendSlow"}}},
			allowed: []demo.Signal{demo.SigLatency}, allowedAlerts: []string{"VigilLatencyTTFT", "VigilLatencyE2E"},
			why:    "the requests sim-b answers before the balancer moves off it are slow; the global latency may notice them",
			report: func(c demo.PhaseCounters) string { return "balancer: " + c.ShareNote("sim-b") },
		},
		{
			name: "quantization noise (shadowed replica)", says: "sim-a-int8's logprob noise 0.05 → 1.0",
			inject:  knobs(func(k *sim.Knobs) { k.Noise = 1 }, "sim-a-int8"),
			restore: restore("sim-a-int8"),
			expect:  []demo.Expectation{{Signal: demo.SigPrecision, Alerts: []string{"VigilPrecisionDivergence"}}},
			allowed: []demo.Signal{demo.SigDecay, demo.SigOutput}, allowedAlerts: []string{"VigilConfidenceDecay", "VigilOutputDrift"},
			why: "sim-a-int8 answers a third of the clients: its noisy logprobs lower their mean confidence and raise perplexity",
		},
		{
			name: "one backend answers 500", says: "sim-b answers every request with HTTP 500",
			inject:  knobs(func(k *sim.Knobs) { k.ErrorRate = 1 }, "sim-b"),
			restore: restore("sim-b"),
			expect:  []demo.Expectation{{Signal: demo.SigEjection, Alerts: []string{"VigilBackendDown"}}},
			allowed: nil, allowedAlerts: []string{"VigilErrorRate"},
			why:    "the 500s before the ejection are the backend's own error rate (clients get a retry on another backend)",
			report: errorsNote("sim-b"),
		},
		{
			name: "one backend hangs", says: "sim-b accepts every request (health checks too) and never answers",
			inject:  knobs(func(k *sim.Knobs) { k.Hang = true }, "sim-b"),
			restore: restore("sim-b"),
			expect:  []demo.Expectation{{Signal: demo.SigEjection, Alerts: []string{"VigilBackendDown"}}},
			allowed: []demo.Signal{demo.SigLatency}, allowedAlerts: []string{"VigilLatencyTTFT", "VigilLatencyE2E", "VigilErrorRate"},
			why:    "requests caught on sim-b wait for its health check to fail (health.timeout) before they move: their latency is real",
			report: errorsNote("sim-b"),
		},
		{
			name: "one backend stalls mid-stream", says: "sim-b pauses 3 s after 4 tokens of every answer",
			inject:  knobs(func(k *sim.Knobs) { k.Stall, k.StallAfter = 3*time.Second, 4 }, "sim-b"),
			restore: restore("sim-b"),
			expect:  []demo.Expectation{{Signal: demo.SigSlow, Alerts: []string{"VigilBackendSlow"}}},
			allowed: []demo.Signal{demo.SigLatency}, allowedAlerts: []string{"VigilLatencyE2E"},
			why:    "the stalled answers sim-b gives before the balancer moves off it are slow end to end",
			report: func(c demo.PhaseCounters) string { return "balancer: " + c.ShareNote("sim-b") },
		},
		{
			name: "Redis outage", says: "the relay to Redis is cut: connections closed, new ones refused",
			needs:   needsRedis,
			inject:  func(d *target) error { d.infra.store.Cut(); return nil },
			restore: func(d *target) error { return d.infra.store.Restore() },
			expect:  []demo.Expectation{{Signal: demo.SigStore}},
			why:     "",
		},
		{
			name: "collector outage", says: "the relay to the OTLP collector is cut",
			needs:   needsCollector,
			inject:  func(d *target) error { d.infra.collector.Cut(); return nil },
			restore: func(d *target) error { return d.infra.collector.Restore() },
			expect:  []demo.Expectation{{Signal: demo.SigSpans}},
		},
	}
}

// withDeadlines sets each row's deadlines from the scale: a signal within
// a window of the injection (its current window must fill with the
// fault), at least 15 s, precision and backend slow within 10 s more;
// an ejection within a few health checks; the store within a few flushes
// (1 s each); dropped spans within an export cycle (5 s, OTLP's schedule
// delay) and its retries. A calm row's deadline is the window it is
// watched.
func withDeadlines(rows []matrixRow, ms matrixScale) []matrixRow {
	p := ms.timings.AlertPeriod()
	sig := max(ms.timings.Window(), 15*time.Second)
	for i := range rows {
		r := &rows[i]
		switch {
		case r.calm != "":
			// Watched its whole window.
			r.deadline = ms.window
		case len(r.expect) == 0:
		case r.expect[0].Signal == demo.SigPrecision, r.expect[0].Signal == demo.SigSlow:
			// A window and a bit more. Precision: comparisons finish
			// after the shadow copy's answer. Backend slow: the slow
			// backend's first few answers after the fault tell,
			// streamed or not, once they and the others' around them
			// have finished; a stalled answer finishes 3 s late, and
			// the balancer, moving off the backend, sends it few
			// (4–12 s at half scale, 4–6.5 s at scale 1).
			r.deadline = sig + 10*time.Second
		case r.expect[0].Signal == demo.SigEjection:
			// Ejection after health.failures failures or a failed check
			// (interval 2 s, timeout 2 s).
			r.deadline = 10 * time.Second
		case r.expect[0].Signal == demo.SigStore:
			r.deadline = 10 * time.Second
		case r.expect[0].Signal == demo.SigSpans:
			r.deadline = 15 * time.Second
		default:
			r.deadline = sig
		}
		// Alerts fire alerts.consecutive (3) periods after their breach;
		// two more for the evaluation and the poll. VigilBackendDown
		// needs a whole period out first.
		r.alertDeadline = r.deadline + 5*p
	}
	return rows
}

// knobs returns a row's inject: f applied to the named simulators' knobs.
func knobs(f func(*sim.Knobs), names ...string) func(*target) error {
	return func(d *target) error { demo.TurnKnobs(f, names...)(d.Demo); return nil }
}

// restore returns a row's restore: the named simulators' normal knobs.
func restore(names ...string) func(*target) error {
	return func(d *target) error { demo.RestoreKnobs(names...)(d.Demo); return nil }
}

// errorsNote reports what backend's errors became for clients.
func errorsNote(backend string) func(demo.PhaseCounters) string {
	return func(c demo.PhaseCounters) string { return c.ErrorsNote(backend) }
}

// infra is what a matrix demo has besides the simulators: Redis and the
// collector, each behind a relay the rows cut. The demo reads what the
// gateway says of them (the store's health, the spans dropped) from its
// /metrics.
type infra struct {
	store     *relay     // nil without Redis
	collector *relay     // nil without a collector
	redisProc *exec.Cmd  // the redis-server the matrix started
	coll      *collector // the in-process collector
}

// startInfra starts a redis-server on a free port (when one is installed;
// redisErr says why not otherwise) and the collector, each behind a
// relay. stop ends whatever it started.
func startInfra(ctx context.Context) (_ *infra, redisErr error, err error) {
	// w is not the named result: a failed start returns nil, and the
	// deferred stop must still see what was started.
	w := &infra{}
	defer func() {
		if err != nil {
			w.stop()
		}
	}()
	if w.coll, err = newCollector(); err != nil {
		return nil, nil, err
	}
	w.coll.Start()
	if w.collector, err = newRelay(w.coll.Addr()); err != nil {
		return nil, nil, err
	}
	addr, cmd, rerr := startRedis(ctx)
	if rerr != nil {
		return w, rerr, nil
	}
	w.redisProc = cmd
	if w.store, err = newRelay(addr); err != nil {
		return nil, nil, err
	}
	return w, nil, nil
}

// stop ends the relays, the collector and redis-server.
func (w *infra) stop() {
	if w == nil {
		return
	}
	if w.store != nil {
		w.store.Close()
	}
	if w.collector != nil {
		w.collector.Close()
	}
	if w.coll != nil {
		w.coll.Stop()
	}
	if w.redisProc != nil {
		w.redisProc.Process.Kill()
		w.redisProc.Wait()
	}
}

// errNoRedis: redis-server is not installed.
var errNoRedis = errors.New("redis-server not found in $PATH (Debian: apt-get install redis-server)")

// startRedis starts a redis-server that keeps nothing on disk on a free
// port of 127.0.0.1 and waits until it answers PING.
func startRedis(ctx context.Context) (string, *exec.Cmd, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errNoRedis
	}
	// A free port, released for redis-server to take.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--loglevel", "warning")
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("redis-server: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if pingRedis(ctx, addr) == nil {
			return addr, cmd, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return "", nil, fmt.Errorf("redis-server on %s did not answer within 5 s", addr)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// rowResult is what one row saw with one seed, times from its injection.
type rowResult struct {
	row     *matrixRow
	seed    int64
	skipped string // why the row did not run; empty: it ran
	phase   demo.PhaseResult
	// dirty lists what was not back to normal when the row began (the
	// wait for a clean baseline ran out); the row ran anyway.
	dirty  []string
	sent   int64 // client requests sent from the injection to the next row
	errors int64 // of which failed
	note   string
	err    error // inject or restore failed
}

// matrixResult is one seed's run.
type matrixResult struct {
	seed   int64
	warmup time.Duration
	pinErr error
	rows   []rowResult
	start  time.Time
	end    time.Time
}

// runMatrix runs the matrix with every seed, concurrently (one demo
// each), prints its progress to out and the matrix at the end.
func runMatrix(ctx context.Context, o Options, scale float64) error {
	ms := newMatrixScale(scale)
	if o.RPS > 0 {
		ms.rps = o.RPS
	}
	rows := withDeadlines(matrixRows(ms), ms)
	fmt.Fprintf(o.Out, "Fault-isolation matrix: %d faults, each alone on a clean baseline, seeds %v concurrently (one demo each).\n",
		len(rows), Seeds)
	fmt.Fprintf(o.Out, "Compressed timings: %s; %.1f req/s per demo.\n\n", ms.timings, ms.rps)
	results, err := runSeeds(ctx, ms, rows, Seeds, o.Out, o.Log)
	if len(results) > 0 {
		fmt.Fprintln(o.Out)
		printMatrix(o.Out, rows, results)
	}
	return err
}

// runSeeds runs the rows with each seed concurrently and returns the
// results by seed (those that finished).
func runSeeds(ctx context.Context, ms matrixScale, rows []matrixRow, seeds []int64, out io.Writer, log *slog.Logger) ([]*matrixResult, error) {
	var mu sync.Mutex // guards out and results
	results := make([]*matrixResult, len(seeds))
	lw := &lockedWriter{w: out, mu: &mu}
	var g errgroup.Group
	for i, seed := range seeds {
		g.Go(func() error {
			res, err := runSeed(ctx, ms, rows, seed, &prefixWriter{w: lw, prefix: fmt.Sprintf("seed %d ", seed)}, log)
			mu.Lock()
			results[i] = res
			mu.Unlock()
			if err != nil {
				return fmt.Errorf("seed %d: %w", seed, err)
			}
			return nil
		})
	}
	err := g.Wait()
	var done []*matrixResult
	for _, r := range results {
		if r != nil {
			done = append(done, r)
		}
	}
	return done, err
}

// runSeed runs one demo with seed through every row.
func runSeed(ctx context.Context, ms matrixScale, rows []matrixRow, seed int64, out io.Writer, log *slog.Logger) (*matrixResult, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	infra, redisErr, err := startInfra(ctx)
	if err != nil {
		return nil, err
	}
	defer infra.stop()
	if redisErr != nil {
		fmt.Fprintf(out, "no Redis: %v; the Redis row is skipped\n", redisErr)
	}
	do := demo.Setup{Listen: "127.0.0.1:0", RPS: ms.rps, Log: log, Timings: &ms.timings, Seed: seed,
		OTLP: infra.collector.Addr(), OutOfService: true, Alike: true}
	if infra.store != nil {
		do.Redis = "redis://" + infra.store.Addr() + "/0"
	}
	d, err := demo.New(do)
	if err != nil {
		return nil, err
	}
	t := &target{Demo: d, infra: infra}
	res := &matrixResult{seed: seed, start: time.Now()}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = d.Serve(ctx, func(ctx context.Context) error {
		defer cancel() // the rows told, the demo stops
		return tellMatrix(ctx, t, ms, rows, out, res)
	})
	res.end = time.Now()
	return res, err
}

// tellMatrix warms up, pins the baseline and runs each row: wait for a
// clean baseline, inject, watch, restore.
func tellMatrix(ctx context.Context, d *target, ms matrixScale, rows []matrixRow, out io.Writer, res *matrixResult) error {
	// The story's machinery (warm-up, observe) watching for the rows'
	// expectations.
	var expect []demo.Expectation
	for i := range rows {
		expect = append(expect, rows[i].expect...)
	}
	s, err := d.NewStory(ctx, out, demo.StoryOptions{MinWarmup: ms.minWarmup, MaxWarmup: ms.maxWarmup, Poll: ms.poll, Expect: expect})
	if err != nil {
		return err
	}
	defer demo.RestoreAll(d.Demo)
	if res.warmup, err = s.Warmup(ctx); err != nil {
		return err
	}
	if res.pinErr = d.PinBaseline(ctx); res.pinErr != nil {
		s.Printf("baseline NOT pinned (%v)", res.pinErr)
	} else {
		s.Printf("baseline pinned")
	}
	for i := range rows {
		r := &rows[i]
		rr := rowResult{row: r, seed: res.seed}
		switch {
		case r.needs == needsRedis && d.infra.store == nil:
			rr.skipped = "no redis-server"
		case r.needs == needsCollector && d.infra.collector == nil:
			rr.skipped = "no collector"
		}
		if rr.skipped != "" {
			s.Printf("%s: skipped (%s)", r.name, rr.skipped)
			res.rows = append(res.rows, rr)
			continue
		}
		dirty, before, err := waitClean(ctx, s, d.Demo, ms)
		if err != nil {
			return err
		}
		rr.dirty = dirty
		if len(res.rows) > 0 {
			// The previous row's client errors run to this row's start:
			// its recovery is part of it.
			prev := &res.rows[len(res.rows)-1]
			sent, failed := d.Requests()
			prev.sent, prev.errors = sent-prev.sent, failed-prev.errors
		}
		if err := row(ctx, s, d, ms, &rr, before); err != nil {
			res.rows = append(res.rows, rr)
			return err
		}
		res.rows = append(res.rows, rr)
	}
	if _, _, err := waitClean(ctx, s, d.Demo, ms); err != nil {
		return err
	}
	if n := len(res.rows); n > 0 && res.rows[n-1].skipped == "" {
		last := &res.rows[n-1]
		sent, failed := d.Requests()
		last.sent, last.errors = sent-last.sent, failed-last.errors
	}
	return nil
}

// waitClean waits until no signal is in its alarm state, no alert is
// pending, firing or silenced, and both have stayed so for ms.quiet, at
// most ms.clean; it returns what was still active when the wait ran out
// and the counters taken when the quiet began (or at the wait's end), so
// that a row can compare its traffic with normal traffic.
func waitClean(ctx context.Context, s *demo.Story, d *demo.Demo, ms matrixScale) ([]string, demo.Counters, error) {
	start := time.Now()
	var quietSince time.Time
	var quiet demo.Counters
	t := time.NewTicker(ms.poll)
	defer t.Stop()
	for {
		active := s.Unsettled(ctx)
		now := time.Now()
		switch {
		case len(active) > 0:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince, quiet = now, d.Counters(ctx)
		}
		if !quietSince.IsZero() && now.Sub(quietSince) >= ms.quiet {
			return nil, quiet, nil
		}
		if now.Sub(start) >= ms.clean {
			s.Printf("  not clean after %s: %s; the next row starts anyway", demo.FormatDuration(ms.clean), strings.Join(active, ", "))
			return active, d.Counters(ctx), nil
		}
		select {
		case <-ctx.Done():
			return nil, quiet, ctx.Err()
		case <-t.C:
		}
	}
}

// row injects r's fault, watches until its window passes or, once its
// diagonal is met, settle longer, and restores it.
// before are the counters at the start of the quiet before it.
func row(ctx context.Context, s *demo.Story, d *target, ms matrixScale, rr *rowResult, before demo.Counters) error {
	r := rr.row
	pc := demo.PhaseCounters{Before: before, Start: d.Counters(ctx)}
	rr.sent, rr.errors = pc.Start.Requests()
	var exp string
	switch {
	case len(r.expect) > 0:
		exp = demo.Describe(r.expect) + " within " + demo.FormatDuration(r.deadline)
	case r.calm != "":
		exp = "nothing but " + allowedNames(r) + " for " + demo.FormatDuration(r.deadline) + " (" + r.calm + ")"
	default:
		exp = "nothing (" + r.gap + ")"
	}
	s.Printf("%s: %s → expect %s", r.name, r.says, exp)
	res, start := demo.NewPhaseResult(r.expect), time.Now()
	if err := r.inject(d); err != nil {
		rr.err = err
		return fmt.Errorf("%s: inject: %w", r.name, err)
	}
	var doneAt time.Time
	haveMid := false
	t := time.NewTicker(ms.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			rr.phase = res
			r.restore(d)
			return ctx.Err()
		case <-t.C:
		}
		s.Observe(ctx, &res)
		el := time.Since(start)
		if !haveMid && el >= ms.window/2 {
			pc.Mid, haveMid = d.Counters(ctx), true
		}
		if el >= ms.window {
			break
		}
		if len(r.expect) > 0 && res.Met(true) {
			if doneAt.IsZero() {
				doneAt = time.Now()
			}
			if time.Since(doneAt) >= ms.settle {
				break
			}
		}
	}
	if err := r.restore(d); err != nil {
		rr.err = err
	}
	pc.End = d.Counters(ctx)
	if !haveMid {
		pc.Mid = pc.Start
	}
	if r.report != nil {
		rr.note = r.report(pc)
	}
	rr.phase = res
	s.Printf("  restored")
	if rr.err != nil {
		return fmt.Errorf("%s: restore: %w", r.name, rr.err)
	}
	return nil
}

// lockedWriter serializes writes of several seeds' stories.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// prefixWriter starts every line with prefix. Each Write is whole lines
// (the story prints a line at a time).
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	var buf strings.Builder
	for line := range strings.SplitAfterSeq(string(b), "\n") {
		if line == "" {
			continue
		}
		buf.WriteString(p.prefix)
		buf.WriteString(line)
	}
	if _, err := io.WriteString(p.w, buf.String()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// pingRedis sends PING to the Redis at addr and wants +PONG.
func pingRedis(ctx context.Context, addr string) error {
	var dl net.Dialer
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redis answered %q to PING", strings.TrimSpace(line))
	}
	return nil
}
