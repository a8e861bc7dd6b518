package demo

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
)

// Scenario names of `vigil demo --scenario`.
const (
	// ScenarioIncident injects faults one by one, each detected and
	// alerted on.
	ScenarioIncident = "incident"
	// ScenarioNone is plain traffic.
	ScenarioNone = "none"
)

// Timings are the compressed settings a scenario runs the gateway under,
// so that a phase lasts about a minute and the signals react within it.
// Everything else keeps config.Default().
type Timings struct {
	bucket, interval, window, reference time.Duration
	minRequests                         int
	// outputMinutes and minBaselineMinutes are the perplexity band's,
	// whose buckets are whole minutes whatever the scale.
	outputMinutes, minBaselineMinutes int
	alertPeriod, silence              time.Duration
}

// apply writes t into cfg.
func (t Timings) apply(cfg *config.Config) {
	a := &cfg.Analyzers
	a.Bucket, a.Interval, a.Window, a.Reference, a.MinRequests = t.bucket, t.interval, t.window, t.reference, t.minRequests
	a.Output.Minutes, a.Output.MinBaselineMinutes = t.outputMinutes, t.minBaselineMinutes
	cfg.Alerts.Period, cfg.Alerts.Silence = t.alertPeriod, t.silence
}

// String lists t as config keys.
func (t Timings) String() string {
	return fmt.Sprintf("analyzers.bucket %s, interval %s, window %s, reference %s, min_requests %d, "+
		"output.minutes %d, output.min_baseline_minutes %d; alerts.period %s, silence %s",
		FormatDuration(t.bucket), FormatDuration(t.interval), FormatDuration(t.window), FormatDuration(t.reference), t.minRequests,
		t.outputMinutes, t.minBaselineMinutes, FormatDuration(t.alertPeriod), FormatDuration(t.silence))
}

// Signal is something a phase expects to move: one of the five signals,
// or the passive ejection of a backend.
type Signal int

// The signal kinds, in the order the summary lists them.
const (
	SigDrift Signal = iota
	SigDecay
	SigOutput
	SigLatency
	SigPrecision
	SigEjection
	// SigSlow is a backend answering far slower than the others (the
	// backend_slow rule's slowness above its threshold).
	SigSlow
	// SigStore and SigSpans are the infrastructure the matrix cuts: the
	// state store reported down (vigil_state_store_up 0) and spans
	// dropped (vigil_tracing_spans_dropped_total rising). Demos without
	// Redis or a collector report them "ok".
	SigStore
	SigSpans
	numSignals
)

// signalNames and alarmStates name each kind and the state that is its
// alarm (as /admin/signals says it; "ejected" is the demo's word).
var (
	signalNames = [numSignals]string{"input drift", "confidence decay", "output drift", "latency variance", "precision divergence", "passive ejection",
		"backend slowness", "state store", "spans"}
	alarmStates = [numSignals]string{"drift", "decay", "drift", "anomalous", "divergent", "ejected", "slow", "down", "dropped"}
)

// Expectation is what a phase's fault should move: a signal into its
// alarm state and, when alerts is not empty, one of those alerts into
// firing. With model set it is confined to that model: the model's own
// segment must reach the alarm, the alert must carry the label
// model=model, and no other model's segment should follow.
type Expectation struct {
	Signal Signal
	Alerts []string
	Model  string
}

// Matches reports whether fa is one of e's alerts (for e's model, when it
// names one).
func (e Expectation) Matches(fa FiredAlert) bool {
	return slices.Contains(e.Alerts, fa.Name) && (e.Model == "" || fa.Labels["model"] == e.Model)
}

// segSignals are the signals kept per model (the segments of
// /admin/signals); precision is per backend pair, the rest per backend
// or gateway.
var segSignals = []Signal{SigDrift, SigDecay, SigOutput, SigLatency}

// A phase is one fault of a scenario: injected when the phase starts,
// restored when it ends, and expected to be noticed within it.
type phase struct {
	label, name string // "(a)", "prompt mix shift"
	// says is the phase's line: what is injected and what should move.
	says     string
	inject   func(*Demo)
	restore  func(*Demo)
	restored string // what restore did, in words
	expect   []Expectation
	// calm are what the phase must not move: neither the signal (fleet-wide
	// or any model's) nor any of the alerts. A phase with calm and no
	// expect runs its whole duration, also with untilDetected.
	calm []Expectation
	// allowed are signals, and allowedAlerts alerts, that the phase may
	// move besides what it expects, because the fault truly changes them;
	// why says so.
	allowed       []Signal
	allowedAlerts []string
	why           string
	// clearFirst waits, before the injection, until every signal is out of
	// its alarm and no alert is active (at most the scenario's recovery),
	// so that what the phase must not move starts from "ok".
	clearFirst bool
	duration   time.Duration
	// report, when set, turns the counters taken around the phase into a
	// note for the summary.
	report func(PhaseCounters) string
}

// PhaseCounters are the counters taken around a phase: at the start of
// the previous phase's second half (of the wait for all clear, after
// one), at this phase's start, at its middle (or its first detection,
// whichever comes first) and at its end.
type PhaseCounters struct {
	Before, Start, Mid, End Counters
}

// ShareNote compares backend's share of demo-model's answered requests
// before the phase (the previous phase's second half) with its share in
// this phase's second half (after its first detection, when that came
// earlier).
func (c PhaseCounters) ShareNote(backend string) string {
	return fmt.Sprintf("%s served %s of %s's answered requests before, %s in the phase's second half", backend,
		fmtShare(c.Start.tally.sub(c.Before.tally).share(backend, demoModel)), demoModel,
		fmtShare(c.End.tally.sub(c.Mid.tally).share(backend, demoModel)))
}

// SharesNote compares the share of demo-model's answered requests that
// each of its backends served before the phase with its share in the
// phase's second half.
func (c PhaseCounters) SharesNote() string {
	var parts []string
	for _, b := range []string{"sim-a", "sim-b", "sim-a-int8"} {
		parts = append(parts, fmt.Sprintf("%s %s → %s", b, fmtShare(c.Start.tally.sub(c.Before.tally).share(b, demoModel)),
			fmtShare(c.End.tally.sub(c.Mid.tally).share(b, demoModel))))
	}
	return "shares of " + demoModel + "'s answered requests, before → second half: " + strings.Join(parts, ", ")
}

// ErrorsNote says what backend's errors in the phase became for clients:
// its error answers, the requests left hanging on it, the retries on
// other backends, and its share of the traffic (ShareNote).
func (c PhaseCounters) ErrorsNote(backend string) string {
	s, e := c.Start, c.End
	return fmt.Sprintf("%s answered %d requests with an error, %d left hanging at the end; retries on other backends: %.0f; %s",
		backend, e.sims[backend].Errors-s.sims[backend].Errors, e.sims[backend].Hanging,
		e.metric("vigil_retries_total", "")-s.metric("vigil_retries_total", ""), c.ShareNote(backend))
}

// MixNote compares each model's share of the answered requests and its
// mean confidence (exp of the mean token logprob over its current window)
// before the phase and at its end, with the fleet's: the fleet's moves
// with the mix of models, each model's does not. It tells how demo-model's
// answers spread over its backends too: the balancer moves them with the
// load.
func (c PhaseCounters) MixNote() string {
	before, after := c.Start.tally.sub(c.Before.tally), c.End.tally.sub(c.Mid.tally)
	var shares, confs, backends []string
	for _, m := range servedModels() {
		shares = append(shares, fmt.Sprintf("%s %s → %s", m, fmtShare(before.modelShare(m)), fmtShare(after.modelShare(m))))
		confs = append(confs, fmt.Sprintf("%s %s → %s", m, fmtConf(c.Start.conf[m]), fmtConf(c.End.conf[m])))
	}
	for _, b := range []string{"sim-a", "sim-b", "sim-a-int8"} {
		backends = append(backends, fmt.Sprintf("%s %s → %s", b, fmtShare(before.share(b, demoModel)), fmtShare(after.share(b, demoModel))))
	}
	e := c.End
	verdict := "judged fleet-wide, as before the models had segments, the mix alone would have read as a decay"
	if !e.fleetDecayed {
		verdict = "not a decay fleet-wide either"
	}
	return fmt.Sprintf("answered requests, before → second half: %s (%s's by backend: %s); mean confidence per model, "+
		"before → end: %s; the fleet's: %s → %s (drop %.0f%% against the baseline, p = %.2g: %s)",
		strings.Join(shares, ", "), demoModel, strings.Join(backends, ", "), strings.Join(confs, ", "),
		fmtConf(c.Start.conf[""]), fmtConf(e.conf[""]), 100*e.fleetDrop, e.fleetP, verdict)
}

// fmtConf writes a confidence with two decimals; "n/a" when unknown.
func fmtConf(v float64) string {
	if math.IsNaN(v) || v == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", v)
}

// A scenario is a scripted incident: warm-up on normal traffic until the
// signals have a verdict, a baseline pinned automatically, one phase per
// fault, and recovery. Its durations and timings come from a scale, so
// that tests can tell a short version. It is read-only once made.
type scenario struct {
	timings Timings
	// minWarmup is the least warm-up; it lasts until every signal the
	// phases expect has had a verdict for a while, at most maxWarmup.
	minWarmup, maxWarmup time.Duration
	phases               []phase
	// recovery is the longest wait, after the last phase, for every
	// signal to leave its alarm and every alert to resolve.
	recovery time.Duration
	// poll is how often the signals, alerts and receiver are read.
	poll time.Duration
	// untilDetected ends each phase as soon as its expectations are met
	// (its alerts given grace to fire), not at its duration: tests use it.
	untilDetected bool
}

// newIncident returns the incident scenario at scale (1: the demo's story,
// about 10 minutes; smaller is faster, for tests). short leaves out the
// perplexity band, whose 1-minute buckets no scale compresses, so that the
// warm-up need not wait for two complete baseline minutes.
func newIncident(scale float64, short bool) *scenario {
	dur := func(d time.Duration) time.Duration {
		return time.Duration(float64(d) * scale).Round(100 * time.Millisecond)
	}
	sc := &scenario{
		timings: Timings{
			bucket: time.Second, interval: time.Second,
			window:    max(10*time.Second, dur(30*time.Second)),
			reference: max(time.Minute, dur(3*time.Minute)),
			// 80 requests give the latency signal's test of anomalous
			// shares its power when a third of the traffic turns slow.
			minRequests: max(30, int(80*scale)),
			// The band is the mean ± 3σ of the per-minute perplexity over
			// the baseline's minutes, two at the least: a confidence drop
			// breaches it with the first complete minute after it.
			outputMinutes: 1, minBaselineMinutes: 2,
			alertPeriod: max(time.Second, dur(2*time.Second)),
			// One notification per incident, yet a story told again
			// (--loop) alerts again.
			silence: max(20*time.Second, dur(5*time.Minute)),
		},
		minWarmup: max(10*time.Second, dur(30*time.Second)),
		// The perplexity band needs two complete minutes before the
		// minute in progress and the one it tests: up to three minutes,
		// and one more when it alarms on normal traffic.
		maxWarmup: 3*time.Minute + 50*time.Second,
		// The perplexity band clears with the first complete minute of
		// normal output, up to two minutes after the last fault (whose
		// changed backend mix moves the perplexity too).
		recovery: max(20*time.Second, dur(130*time.Second)),
		poll:     500 * time.Millisecond,
	}
	confidence := []Expectation{{Signal: SigDecay, Alerts: []string{"VigilConfidenceDecay"}}}
	// The mix change is watched for a complete minute of the new mix
	// judged by the perplexity band: the phase spans a minute boundary.
	mixWatch := dur(60 * time.Second)
	if short {
		// No minute-long band to wait for, in the warm-up or after; the
		// mix change is watched a window and the alerts' periods.
		sc.maxWarmup = max(sc.minWarmup, time.Minute)
		sc.recovery = max(20*time.Second, 2*sc.timings.window)
		mixWatch = sc.timings.window + 5*sc.timings.alertPeriod
	} else {
		confidence = append(confidence, Expectation{Signal: SigOutput, Alerts: []string{"VigilOutputDrift"}})
	}
	sc.phases = []phase{
		{
			label: "(a)", name: "prompt mix shift",
			says:     "prompts turn long, Russian and Chinese, with code blocks and a system prompt",
			inject:   func(d *Demo) { d.traffic.setMix(ShiftedMix) },
			restore:  func(d *Demo) { d.traffic.setMix(NormalMix) },
			restored: "prompts back to the normal mix",
			expect:   []Expectation{{Signal: SigDrift, Alerts: []string{"VigilInputDrift"}}},
			duration: dur(45 * time.Second),
		},
		{
			label: "(b)", name: "confidence drop to 0.4",
			says:     "every simulator's confidence 0.85 (sim-small's 0.55) → 0.4",
			inject:   TurnKnobs(func(k *sim.Knobs) { k.Confidence = 0.4 }, AllSims...),
			restore:  RestoreKnobs(AllSims...),
			restored: "confidence back to 0.85 (sim-small's 0.55)",
			expect:   confidence,
			// The band's alarm needs a complete minute after the drop.
			duration: dur(75 * time.Second),
		},
		{
			// Every backend slows down, so that clients see it and the
			// latency signal must tell (at the demo's rate only end-to-end
			// latency has enough responses per window, and TTFT ×10 moves it
			// past its limit); sim-b three times more, so that the balancer
			// moves traffic off it. Were only sim-b slow, the balancer would
			// take nearly all traffic off it and clients would hardly notice.
			label: "(c)", name: "TTFT ×10, sim-b ×30",
			says: "every backend's time to first token ×10, sim-b's ×30 (60 ms → 1.8 s)",
			inject: func(d *Demo) {
				TurnKnobs(func(k *sim.Knobs) { k.TTFT *= 10 }, "sim-a", "sim-a-int8", "sim-small")(d)
				TurnKnobs(func(k *sim.Knobs) { k.TTFT *= 30 }, "sim-b")(d)
			},
			restore:  RestoreKnobs(AllSims...),
			restored: "every backend's TTFT back",
			expect:   []Expectation{{Signal: SigLatency, Alerts: []string{"VigilLatencyTTFT", "VigilLatencyE2E"}}},
			duration: dur(45 * time.Second),
			report:   func(c PhaseCounters) string { return "balancer: " + c.ShareNote("sim-b") },
		},
		{
			label: "(d)", name: "sim-a-int8 noise → 1.0",
			says:     "sim-a-int8's logprob noise 0.05 → 1.0 (a badly quantized replica)",
			inject:   TurnKnobs(func(k *sim.Knobs) { k.Noise = 1 }, "sim-a-int8"),
			restore:  RestoreKnobs("sim-a-int8"),
			restored: "sim-a-int8's noise back to 0.05",
			expect:   []Expectation{{Signal: SigPrecision, Alerts: []string{"VigilPrecisionDivergence"}}},
			duration: dur(45 * time.Second),
		},
		{
			label: "(e)", name: "sim-b HTTP 500 always",
			says:    "sim-b answers every request with HTTP 500",
			inject:  TurnKnobs(func(k *sim.Knobs) { k.ErrorRate = 1 }, "sim-b"),
			restore: RestoreKnobs("sim-b"),
			// No error-rate alert is expected: the gateway retries each
			// failed attempt on another backend, so clients see no error,
			// and the error rate counts only failures clients saw. Once
			// sim-b has been out a whole alert period, VigilBackendDown
			// fires, until a readmission probe passes after the restore.
			restored: "sim-b answers again",
			expect:   []Expectation{{Signal: SigEjection, Alerts: []string{"VigilBackendDown"}}},
			duration: dur(30 * time.Second),
			report: func(c PhaseCounters) string {
				s, e := c.Start, c.End
				return fmt.Sprintf("sim-b answered %d requests with HTTP 500; retries on other backends: %.0f; ejections of sim-b: %.0f, "+
					"its failed readmission probes: %.0f; errors seen by clients: %d of %d requests; %s",
					e.sims["sim-b"].Errors-s.sims["sim-b"].Errors,
					e.metric("vigil_retries_total", "")-s.metric("vigil_retries_total", ""),
					e.metric("vigil_backend_ejections_total", `backend="sim-b"`)-s.metric("vigil_backend_ejections_total", `backend="sim-b"`),
					e.metric("vigil_backend_failed_probes_total", `backend="sim-b"`)-s.metric("vigil_backend_failed_probes_total", `backend="sim-b"`),
					e.tally.Failed-s.tally.Failed, e.tally.Sent-s.tally.Sent, c.ShareNote("sim-b"))
			},
		},
		{
			// The models have segments: the fleet's confidence, perplexity
			// and latency move with the mix (demo-small is less confident
			// than demo-model), no model's does. Input drift is judged
			// fleet-wide too, and its model feature is the mix.
			label: "(f)", name: "model mix change",
			says:       fmt.Sprintf("the traffic's models turn from %s to %s; no model changes", NormalModels, ShiftedModels),
			inject:     func(d *Demo) { d.traffic.setModels(ShiftedModels) },
			restore:    func(d *Demo) { d.traffic.setModels(NormalModels) },
			restored:   "the normal mix of models",
			clearFirst: true,
			calm:       mixCalm,
			allowed:    []Signal{SigDrift}, allowedAlerts: []string{"VigilInputDrift"},
			why: "the mix of models is a change of the inputs, judged fleet-wide by input drift's model feature; " +
				"each model's own prompts did not change",
			duration: mixWatch,
			report:   func(c PhaseCounters) string { return c.MixNote() },
		},
		{
			// After (f)'s mix back to normal, input drift clears first.
			label: "(g)", name: "demo-small confidence drop",
			clearFirst: true,
			says: fmt.Sprintf("sim-small's confidence %.2f → %.2f: %s, the least-used model (%.0f%% of the requests), decays",
				SmallConfidence, SmallDecayed, SmallModel, 100*NormalModels.Share(SmallModel)),
			inject:   TurnKnobs(func(k *sim.Knobs) { k.Confidence = SmallDecayed }, "sim-small"),
			restore:  RestoreKnobs("sim-small"),
			restored: "sim-small's confidence back",
			expect:   []Expectation{{Signal: SigDecay, Alerts: []string{"VigilConfidenceDecay"}, Model: SmallModel}},
			allowed:  []Signal{SigOutput}, allowedAlerts: []string{"VigilOutputDrift"},
			why:      "perplexity is exp(−mean logprob): demo-small's lower confidence is a higher perplexity",
			duration: dur(45 * time.Second),
		},
		{
			// After (g)'s decay, its alert resolves first.
			label: "(h)", name: "topic change",
			clearFirst: true,
			says:       "prompts turn from load balancers and KV caches to cooking, at the same lengths, letters and punctuation",
			inject:     func(d *Demo) { d.traffic.setMix(TopicMix) },
			restore:    func(d *Demo) { d.traffic.setMix(NormalMix) },
			restored:   "prompts back to the normal subjects",
			expect:     []Expectation{{Signal: SigDrift, Alerts: []string{"VigilInputDrift"}}},
			duration:   dur(45 * time.Second),
			report:     func(c PhaseCounters) string { return c.TopicNote() },
		},
	}
	return sc
}

// TopicNote says which of input drift's tests saw the phase's change at
// its end, and the words whose share of the prompts rose most.
func (c PhaseCounters) TopicNote() string {
	d := c.End.drift
	if d == nil {
		return "input drift: not read"
	}
	var drifted []string
	for _, f := range d.Features {
		if f.Drift {
			drifted = append(drifted, f.Name)
		}
	}
	note := "drifted features: " + strings.Join(drifted, ", ")
	if len(drifted) == 0 {
		note = "no feature drifted at the end"
	}
	if ct := d.Content; ct != nil {
		note += fmt.Sprintf("; content test AUC %.2f", ct.AUC)
		var rose []string
		for _, t := range ct.Rose[:min(3, len(ct.Rose))] {
			rose = append(rose, fmt.Sprintf("%s %s → %s", t.Term, fmtShare(t.Reference), fmtShare(t.Current)))
		}
		if len(rose) > 0 {
			note += ", rising: " + strings.Join(rose, ", ")
		}
	}
	return note
}

// AllSims are the demo's simulators.
var AllSims = []string{"sim-a", "sim-b", "sim-a-int8", "sim-small"}

// SmallDecayed is demo-small's confidence in phase (g).
const SmallDecayed = 0.3

// mixCalm is what a change in the mix of models must not move: the
// signals judged per model and their alerts.
var mixCalm = []Expectation{
	{Signal: SigDecay, Alerts: []string{"VigilConfidenceDecay"}},
	{Signal: SigOutput, Alerts: []string{"VigilOutputDrift"}},
	{Signal: SigLatency, Alerts: []string{"VigilLatencyTTFT", "VigilLatencyE2E"}},
}

// ShiftedMix is what the prompt-mix phase sends: long Russian and Chinese
// prompts with code blocks under a system prompt, where the normal mix has
// short English questions. Every drift feature but the sampling parameters
// moves: length, tokens, message count, script shares, system prompt and
// code fence.
var ShiftedMix = &PromptMix{
	system: "Ты — опытный ревьюер кода на Go. 你是一名资深的 Go 代码审查员。Отвечай на языке вопроса.",
	prompts: []string{
		"Почему этот обработчик иногда зависает под нагрузкой? Объясни подробно и предложи исправление.\n```go\n" + strings.Repeat("func handle(w http.ResponseWriter, r *http.Request) {\n\tmu.Lock()\n\tdefer mu.Unlock()\n\tresp, err := http.Get(upstream + r.URL.Path)\n\tif err != nil {\n\t\thttp.Error(w, err.Error(), 502)\n\t\treturn\n\t}\n\tio.Copy(w, resp.Body)\n}\n", 4) + "```",
		"请逐行解释下面的代码为什么会泄漏 goroutine，并给出修复后的版本。\n```go\n" + strings.Repeat("for _, job := range jobs {\n\tgo func() {\n\t\tresults <- process(job)\n\t}()\n}\nselect {\ncase r := <-results:\n\treturn r\ncase <-time.After(time.Second):\n\treturn nil\n}\n", 4) + "```",
		"Сравни эти две реализации кэша по скорости и по памяти; какая лучше подходит для миллиона ключей?\n```go\n" + strings.Repeat("type Cache struct {\n\tmu sync.RWMutex\n\tm  map[string][]byte\n}\n\nfunc (c *Cache) Get(k string) ([]byte, bool) {\n\tc.mu.RLock()\n\tdefer c.mu.RUnlock()\n\tv, ok := c.m[k]\n\treturn v, ok\n}\n", 4) + "```",
		"这个 SQL 查询在生产环境中很慢。请分析执行计划并建议索引。\n```sql\n" + strings.Repeat("SELECT o.id, o.created_at, c.name, SUM(i.price * i.qty)\nFROM orders o JOIN customers c ON c.id = o.customer_id\nJOIN items i ON i.order_id = o.id\nWHERE o.created_at > now() - interval '30 days'\nGROUP BY o.id, c.name ORDER BY 4 DESC;\n", 4) + "```",
	},
}

// TurnKnobs returns an inject function that changes the knobs of the named
// simulators with f.
func TurnKnobs(f func(*sim.Knobs), names ...string) func(*Demo) {
	return func(d *Demo) {
		for _, n := range names {
			s := d.sim(n)
			k := s.srv.Knobs()
			f(&k)
			s.srv.SetKnobs(k)
		}
	}
}

// RestoreKnobs returns a restore function that gives the named simulators
// their normal knobs back.
func RestoreKnobs(names ...string) func(*Demo) {
	return func(d *Demo) {
		for _, n := range names {
			s := d.sim(n)
			s.srv.SetKnobs(s.base)
		}
	}
}

// RestoreAll gives every simulator its normal knobs and the traffic its
// normal mixes of prompts and models.
func RestoreAll(d *Demo) {
	for _, s := range d.sims {
		s.srv.SetKnobs(s.base)
	}
	d.traffic.setMix(NormalMix)
	d.traffic.setModels(NormalModels)
}

// storyResult is what one telling of a scenario saw.
type storyResult struct {
	n          int // the telling's number, from 1
	start, end time.Time
	warmup     time.Duration
	unknown    []string // signals still without a verdict when the warm-up ended
	pinErr     error    // why the baseline could not be pinned; nil: pinned
	phases     []PhaseResult
	recovery   recoveryResult
	deliveries []alert.Delivery // Vigil's notification log at the end
	receipts   []receipt        // what the receiver got during the telling
	// interrupted: the telling ended early (its context did); the last
	// phase may be cut short and recovery missing.
	interrupted bool
}

// PhaseResult is what one phase saw, its times measured from its start.
type PhaseResult struct {
	phase      *phase
	start, end time.Time
	// Seen is when each signal first reached its alarm state in the
	// phase; negative: it did not.
	Seen   [numSignals]time.Duration
	Alerts []FiredAlert // alerts that began firing (or were silenced) in the phase
	note   string       // the phase's report
	cut    bool         // ended early by the telling's context
	// carried are the signals already in their alarm state when the phase
	// began (a previous fault's, or a lasting one).
	carried []Signal
	// SegSeen is when each model's signal first reached its alarm state
	// in the phase.
	SegSeen map[SegKey]time.Duration
	// clear is the wait for all clear before the phase (clearFirst);
	// zero start: none.
	clear recoveryResult
}

// SegKey is one model's signal.
type SegKey struct {
	Model  string
	Signal Signal
}

// SeenFor is when e's signal first reached its alarm in the phase: in e's
// model's segment when e names one, else fleet-wide; negative: it did
// not.
func (r *PhaseResult) SeenFor(e Expectation) time.Duration {
	if e.Model == "" {
		return r.Seen[e.Signal]
	}
	if d, ok := r.SegSeen[SegKey{e.Model, e.Signal}]; ok {
		return d
	}
	return -1
}

// OthersSeen lists the models other than e's whose segment reached e's
// signal's alarm in the phase; none when e names no model.
func (r *PhaseResult) OthersSeen(e Expectation) []string {
	if e.Model == "" {
		return nil
	}
	var out []string
	for k := range r.SegSeen {
		if k.Signal == e.Signal && k.Model != e.Model {
			out = append(out, k.Model)
		}
	}
	slices.Sort(out)
	return out
}

// moved lists what of calm expectation e the phase moved: its signal's
// alarm (fleet-wide or a model's) and its alerts that fired (or were
// silenced).
func (r *PhaseResult) moved(e Expectation) (signals, alerts []string) {
	if d := r.Seen[e.Signal]; d >= 0 {
		signals = append(signals, fmt.Sprintf("%s: %s after %.1f s", signalNames[e.Signal], alarmStates[e.Signal], d.Seconds()))
	}
	for _, k := range slices.SortedFunc(maps.Keys(r.SegSeen), func(a, b SegKey) int { return strings.Compare(a.Model, b.Model) }) {
		if k.Signal == e.Signal {
			signals = append(signals, fmt.Sprintf("model %s's %s: %s after %.1f s", k.Model, signalNames[k.Signal], alarmStates[k.Signal], r.SegSeen[k].Seconds()))
		}
	}
	for _, fa := range r.Alerts {
		if slices.Contains(e.Alerts, fa.Name) {
			alerts = append(alerts, fmt.Sprintf("%s%s after %.1f s", fa.Name, labelNote(fa.Labels), fa.After.Seconds()))
		}
	}
	return signals, alerts
}

// FiredAlert is an alert seen firing, or silenced, during a phase.
type FiredAlert struct {
	Name     string
	Labels   map[string]string
	At       time.Time
	After    time.Duration // from the phase's start
	Silenced bool          // it would have fired but was notified less than alerts.silence ago
}

// recoveryResult is what the recovery (or a wait for all clear before a
// phase) saw: how long until no signal was in its alarm state and no
// alert active (negative: not within the wait), and the resolutions that
// reached the receiver.
type recoveryResult struct {
	start    time.Time
	settled  time.Duration
	resolved []string // alerts whose resolution the receiver got during the telling
}

// Story is one telling of a scenario against a demo. It is used by one
// goroutine, which does all the printing, so lines never interleave.
type Story struct {
	sc  *scenario
	d   *Demo
	out io.Writer
	t0  time.Time

	last     reading
	alerts   map[string]alert.State // by alert name and backend, as of the last poll
	receipts int                    // receipts printed so far
	notified map[string]bool        // by alert name and labels: the last receipt was a firing one
	failures int                    // failed deliveries printed so far
}

// tell tells the scenario once (telling number n) against d, printing to
// out one line per phase and one per change it sees, and returns what it
// saw. It restores every fault before returning; when ctx ends first, it
// returns what it saw so far (interrupted) and ctx's error.
func (sc *scenario) tell(ctx context.Context, d *Demo, out io.Writer, n int) (*storyResult, error) {
	if d.traffic == nil || d.recv == nil {
		return nil, fmt.Errorf("scenario: the demo needs traffic and its alert receiver")
	}
	defer RestoreAll(d)
	s := &Story{sc: sc, d: d, out: out, t0: time.Now(), alerts: map[string]alert.State{}, notified: map[string]bool{}, receipts: len(d.recv.all())}
	res := &storyResult{n: n, start: s.t0}
	s.last = d.read(ctx)
	if n == 1 {
		fmt.Fprintf(out, "\nScenario %q, compressed timings: %s; %.1f req/s (%s).\n", ScenarioIncident, sc.timings, d.rps, mixNote)
		fmt.Fprintf(out, "Alerts go to the built-in receiver %s", d.recv.URL())
		if u := d.cfg.Alerts.AlertmanagerURL; u != "" {
			fmt.Fprintf(out, " and to Alertmanager %s", u)
		}
		fmt.Fprintf(out, "; Vigil lists its deliveries at %s/admin/notifications.\n\n", d.base)
	} else {
		fmt.Fprintf(out, "\nScenario %q, telling %d.\n\n", ScenarioIncident, n)
	}
	// finish completes res, also when ctx ended the telling early.
	finish := func(err error) (*storyResult, error) {
		res.end, res.interrupted = time.Now(), err != nil
		res.deliveries, _ = d.app.Pipeline().Notifications(context.WithoutCancel(ctx))
		res.receipts = d.recv.since(res.start)
		return res, err
	}
	if err := s.warmup(ctx, res); err != nil {
		return finish(err)
	}
	res.pinErr = d.app.Pipeline().PinBaseline(ctx)
	if res.pinErr != nil {
		s.Printf("baseline NOT pinned (%v): the signals keep their rolling reference", res.pinErr)
	} else {
		s.Printf("baseline pinned: the signals now compare against the last normal window")
	}
	before := d.Counters(ctx)
	for i := range sc.phases {
		p := &sc.phases[i]
		var clear recoveryResult
		if p.clearFirst {
			s.Printf("before %s: waiting until every signal is out of its alarm and no alert is active", p.label)
			var err error
			if clear, err = s.awaitClear(ctx); err != nil {
				return finish(err)
			}
		}
		pr, mid, err := s.phase(ctx, p, before)
		pr.clear = clear
		res.phases = append(res.phases, pr)
		if err != nil {
			return finish(err)
		}
		before = mid
	}
	return finish(s.recover(ctx, res))
}

// Printf prints one line of the story, stamped with the time since its start.
func (s *Story) Printf(format string, args ...any) {
	el := time.Since(s.t0)
	fmt.Fprintf(s.out, "[%02d:%02d] %s\n", int(el.Minutes()), int(el.Seconds())%60, fmt.Sprintf(format, args...))
}

// needed are the signals the phases expect to move that have a verdict to
// wait for (ejection has none).
func (sc *scenario) needed() []Signal {
	var ks []Signal
	for _, p := range sc.phases {
		for _, e := range p.expect {
			if e.Signal != SigEjection && !slices.Contains(ks, e.Signal) {
				ks = append(ks, e.Signal)
			}
		}
	}
	slices.Sort(ks)
	return ks
}

// warmup lets normal traffic flow until every needed signal has a verdict
// (latency variance for a while: its anomaly limits are set once its
// reference is full, and the window to be pinned must have been checked
// against them) and none is in its alarm state, and at least minWarmup.
func (s *Story) warmup(ctx context.Context, res *storyResult) error {
	need := s.sc.needed()
	names := make([]string, len(need))
	for i, k := range need {
		names[i] = signalNames[k]
	}
	// Each model's segment too: a phase may be about one model, and each
	// segment's baseline is pinned with the fleet's.
	models := servedModels()
	var segNeed []Signal
	for _, k := range need {
		if slices.Contains(segSignals, k) {
			segNeed = append(segNeed, k)
		}
	}
	why := ""
	if slices.Contains(need, SigOutput) {
		why = " (the perplexity band needs two complete minutes: 2–3 min)"
	}
	s.Printf("warm-up: normal traffic until %s have a verdict, fleet-wide and for each model (%s), none an alarm%s",
		strings.Join(names, ", "), strings.Join(models, ", "), why)
	// The latency limits are set once its reference is full: the least
	// used model's reference fills last.
	least := s.d.rps
	for _, m := range models {
		least = min(least, s.d.rps*NormalModels.Share(m))
	}
	settle := func(rps float64) time.Duration {
		return time.Duration(1.5*float64(s.sc.timings.minRequests)/rps*float64(time.Second)) + 2*time.Second
	}
	start := time.Now()
	known := map[SegKey]time.Time{} // "" model: fleet-wide
	t := time.NewTicker(s.sc.poll)
	defer t.Stop()
	for {
		rd := s.observe(ctx, nil)
		now := time.Now()
		ready := now.Sub(start) >= s.sc.minWarmup
		var unknown []string
		check := func(model string, k Signal, st string) {
			key := SegKey{model, k}
			name := signalNames[k]
			if model != "" {
				name = model + " " + name
			}
			if st == "unknown" || st == "" {
				delete(known, key)
				unknown = append(unknown, name)
				ready = false
				return
			}
			if _, ok := known[key]; !ok {
				known[key] = now
			}
			if st == alarmStates[k] {
				// A false alarm on normal traffic (a perplexity band of two
				// minutes is narrow: its σ has one degree of freedom) would
				// be pinned with the baseline: wait for more data.
				ready = false
			}
			// The latency limits are set once its reference is full; the
			// pinned window must have been checked against them.
			rps := s.d.rps
			if model != "" {
				rps = least
			}
			ready = ready && (k != SigLatency || now.Sub(known[key]) >= settle(rps))
		}
		for _, k := range need {
			check("", k, rd.state[k])
		}
		for _, m := range models {
			for _, k := range segNeed {
				check(m, k, rd.models[m].state[k])
			}
		}
		if ready {
			break
		}
		if now.Sub(start) >= s.sc.maxWarmup {
			s.Printf("  still without a verdict after %s: %s; going on", FormatDuration(now.Sub(start).Round(time.Second)), strings.Join(unknown, ", "))
			res.unknown = unknown
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	res.warmup = time.Since(start)
	return nil
}

// phase injects p's fault, watches until p's duration passes (or, with
// untilDetected, its expectations are met), restores the fault and
// returns what it saw and the counters at its middle.
func (s *Story) phase(ctx context.Context, p *phase, before Counters) (PhaseResult, Counters, error) {
	pc := PhaseCounters{Before: before, Start: s.d.Counters(ctx)}
	s.Printf("%s %s: %s → expect %s", p.label, p.name, p.says, p.expected())
	res := PhaseResult{phase: p, start: time.Now(), SegSeen: map[SegKey]time.Duration{}}
	for k := range res.Seen {
		res.Seen[k] = -1
		if s.last.state[k] == alarmStates[k] {
			res.carried = append(res.carried, Signal(k))
		}
	}
	p.inject(s.d) // on an early return, tell's RestoreAll restores it
	var haveMid bool
	var doneAt time.Time // when every expected signal was seen
	t := time.NewTicker(s.sc.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			res.end, res.cut = time.Now(), true
			return res, pc.Mid, ctx.Err()
		case <-t.C:
		}
		s.observe(ctx, &res)
		el := time.Since(res.start)
		if !haveMid && (el >= p.duration/2 || res.Met(false)) {
			pc.Mid, haveMid = s.d.Counters(ctx), true
		}
		if el >= p.duration {
			break
		}
		if s.sc.untilDetected && res.Met(false) {
			if doneAt.IsZero() {
				doneAt = time.Now()
			}
			// Alerts fire alerts.consecutive periods after their breach.
			grace := time.Duration(s.d.cfg.Alerts.Consecutive+2) * s.d.cfg.Alerts.Period
			if res.Met(true) || time.Since(doneAt) >= grace {
				break
			}
		}
	}
	p.restore(s.d)
	res.end = time.Now()
	pc.End = s.d.Counters(ctx)
	if !haveMid {
		pc.Mid = pc.End
	}
	if p.report != nil {
		res.note = p.report(pc)
	}
	s.Printf("  restored: %s", p.restored)
	return res, pc.Mid, nil
}

// expected says in words what p expects to move, and what it must not.
func (p *phase) expected() string {
	out := Describe(p.expect)
	if len(p.calm) > 0 {
		var calm []string
		for _, e := range p.calm {
			calm = append(calm, signalNames[e.Signal])
		}
		if out != "" {
			out += "; "
		}
		out += "no alarm and no alert of " + strings.Join(calm, ", ") + ", fleet-wide or for any model"
	}
	if len(p.allowed) > 0 {
		var names []string
		for _, k := range p.allowed {
			names = append(names, signalNames[k])
		}
		out += "; " + strings.Join(names, ", ") + " may move (" + p.why + ")"
	}
	return out
}

// Met reports whether every expected signal reached its alarm in the
// phase and, with alerts, whether each expectation's alert fired too. A
// phase that expects nothing is never met: it runs its duration.
func (r *PhaseResult) Met(alerts bool) bool {
	if len(r.phase.expect) == 0 {
		return false
	}
	for _, e := range r.phase.expect {
		if r.SeenFor(e) < 0 {
			return false
		}
		if alerts && len(e.Alerts) > 0 && r.FirstAlert(e) == nil {
			return false
		}
	}
	return true
}

// expects reports whether the phase expects k to move (in any model).
func (r *PhaseResult) expects(k Signal) bool {
	return slices.ContainsFunc(r.phase.expect, func(e Expectation) bool { return e.Signal == k })
}

// expectsModel reports whether the phase expects model's k to move.
func (r *PhaseResult) expectsModel(k Signal, model string) bool {
	return slices.ContainsFunc(r.phase.expect, func(e Expectation) bool { return e.Signal == k && e.Model == model })
}

// FirstAlert returns the first of e's alerts to have fired (or been
// silenced) in the phase; nil when none did. Of those first seen at the
// same poll, a fleet-wide one (no model label) is preferred.
func (r *PhaseResult) FirstAlert(e Expectation) *FiredAlert {
	var first *FiredAlert
	for i := range r.Alerts {
		fa := &r.Alerts[i]
		if !e.Matches(*fa) {
			continue
		}
		if first == nil || fa.After < first.After ||
			(fa.After == first.After && first.Labels["model"] != "" && fa.Labels["model"] == "") {
			first = fa
		}
	}
	return first
}

// recover waits, faults removed, until no signal is in its alarm state and
// no alert is active, at most the scenario's recovery.
func (s *Story) recover(ctx context.Context, res *storyResult) error {
	RestoreAll(s.d)
	s.Printf("recovery: every fault removed, normal traffic → expect every signal back to ok and every alert resolved")
	rec, err := s.awaitClear(ctx)
	if err != nil {
		return err
	}
	// Every resolution of the telling.
	rec.resolved = nil
	for _, r := range s.d.recv.since(res.start) {
		if r.resolved {
			rec.resolved = append(rec.resolved, r.name)
		}
	}
	res.recovery = rec
	return nil
}

// awaitClear waits until no signal is in its alarm state and no alert is
// active, at most the scenario's recovery, and returns how long it took
// and the resolutions the receiver got meanwhile.
func (s *Story) awaitClear(ctx context.Context) (recoveryResult, error) {
	rec := recoveryResult{start: time.Now(), settled: -1}
	t := time.NewTicker(s.sc.poll)
	defer t.Stop()
	var active []string
	for time.Since(rec.start) < s.sc.recovery {
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-t.C:
		}
		if active = s.active(s.observe(ctx, nil)); len(active) == 0 {
			rec.settled = time.Since(rec.start)
			s.Printf("  all clear: every signal out of its alarm, no alert active")
			break
		}
	}
	if rec.settled < 0 {
		s.Printf("  not all clear after %s: %s", FormatDuration(s.sc.recovery), strings.Join(active, ", "))
	}
	for _, r := range s.d.recv.since(rec.start) {
		if r.resolved {
			rec.resolved = append(rec.resolved, r.name)
		}
	}
	return rec, nil
}

// active names the signals in their alarm state and the alerts pending,
// firing or silenced as of rd and the last poll.
func (s *Story) active(rd reading) []string {
	var out []string
	for k := range numSignals {
		if rd.state[k] == alarmStates[k] {
			out = append(out, signalNames[k]+" ("+rd.state[k]+")")
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.alerts)) {
		if st := s.alerts[key]; st != alert.Resolved {
			out = append(out, "alert "+key+" ("+string(st)+")")
		}
	}
	return out
}

// observe reads the signals, the alerts and the receiver once, prints what
// changed since the last reading and, when res is not nil, records in it
// the alarms and alerts first seen in its phase.
func (s *Story) observe(ctx context.Context, res *PhaseResult) reading {
	rd := s.d.read(ctx)
	now := time.Now()
	for k := range numSignals {
		st, was := rd.state[k], s.last.state[k]
		if res != nil && k == SigOutput && res.expects(k) && st == alarmStates[k] && res.Seen[k] < 0 && rd.evaluated.Truncate(time.Minute).After(res.start) {
			// The band judges complete minutes; once the evaluation is a
			// minute boundary past the injection, the minute judged held
			// the fault, whatever the state was before (a band of two or three
			// baseline minutes can alarm on normal traffic too).
			res.Seen[k] = now.Sub(res.start)
			s.Printf("  %s: %s on the first complete minute with the fault, %.1f s after the injection", signalNames[k], st, res.Seen[k].Seconds())
			continue
		}
		if st == was {
			continue
		}
		line := fmt.Sprintf("  %s: %s", signalNames[k], st)
		if k == SigEjection && st == alarmStates[k] {
			line += " (" + strings.Join(rd.ejected, ", ") + ")"
		}
		if k == SigSlow && st == alarmStates[k] {
			line += " (" + strings.Join(rd.slow, ", ") + ")"
		}
		if res != nil && st == alarmStates[k] && res.Seen[k] < 0 && (k != SigOutput || !res.expects(k)) {
			res.Seen[k] = now.Sub(res.start)
			line += fmt.Sprintf(", %.1f s after the injection", res.Seen[k].Seconds())
		}
		s.Printf("%s", line)
	}
	if cur, was := modelAlarms(rd), modelAlarms(s.last); cur != was {
		s.Printf("  models in alarm: %s", cur)
	}
	if res != nil {
		s.observeModels(rd, res, now)
	}
	s.last = rd
	// Alerts() lists the series with a state; one that went back to
	// inactive without firing (pending noise) leaves the list.
	as, _ := s.d.app.Pipeline().Alerts(ctx)
	states := make(map[string]alert.State, len(as))
	for _, a := range as {
		key := a.Name + labelNote(a.Labels)
		if states[key] = a.State; a.State != alert.Firing && a.State != alert.Silenced {
			continue
		}
		if prev := s.alerts[key]; prev == alert.Firing || prev == alert.Silenced {
			continue
		}
		if a.State == alert.Silenced {
			s.Printf("  alert %s silenced: notified less than %s ago", key, FormatDuration(s.d.cfg.Alerts.Silence))
		}
		if res != nil {
			res.Alerts = append(res.Alerts, FiredAlert{Name: a.Name, Labels: a.Labels, At: now, After: now.Sub(res.start), Silenced: a.State == alert.Silenced})
		}
	}
	s.alerts = states
	got := s.d.recv.all()
	for _, r := range got[min(s.receipts, len(got)):] {
		key := r.name + alertKey(r.labels)
		state := "firing"
		switch {
		case r.resolved:
			state = "resolved"
		case s.notified[key]:
			state = "firing (re-sent: still active " + FormatDuration(s.d.cfg.Alerts.Silence) + " after the last notification)"
		}
		s.notified[key] = !r.resolved
		s.Printf("  receiver got %s%s %s", r.name, labelNote(r.labels), state)
	}
	s.receipts = len(got)
	ds, _ := s.d.app.Pipeline().Notifications(ctx)
	failed := 0
	for _, dl := range ds {
		if dl.Outcome != alert.OutcomeSent && dl.Outcome != alert.OutcomeNoReceiver && !dl.Time.Before(s.t0) {
			failed++
			if failed > s.failures {
				s.Printf("  ! delivery of %s %s: %s", dl.Name, dl.Outcome, dl.Error)
			}
		}
	}
	s.failures = max(s.failures, failed)
	return rd
}

// observeModels records in res each model's signals first seen in their
// alarm state in its phase: on a change since the last reading, or, for a
// perplexity band the phase expects of the model, once the minute judged
// is past the injection (as observe does fleet-wide).
func (s *Story) observeModels(rd reading, res *PhaseResult, now time.Time) {
	for m, sr := range rd.models {
		for _, k := range segSignals {
			key := SegKey{m, k}
			if _, ok := res.SegSeen[key]; ok || sr.state[k] != alarmStates[k] {
				continue
			}
			band := k == SigOutput && res.expectsModel(k, m) && rd.evaluated.Truncate(time.Minute).After(res.start)
			if s.last.models[m].state[k] == sr.state[k] && !band {
				continue
			}
			res.SegSeen[key] = now.Sub(res.start)
		}
	}
}

// modelAlarms lists the models whose segment has a signal in its alarm
// state, with those signals; "none" when no model has one.
func modelAlarms(rd reading) string {
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(rd.models)) {
		sr := rd.models[m]
		var sigs []string
		for _, k := range segSignals {
			if sr.state[k] == alarmStates[k] {
				sigs = append(sigs, signalNames[k])
			}
		}
		if len(sigs) == 0 {
			continue
		}
		name := m
		if sr.base != "" {
			name += " (adapter of " + sr.base + ")"
		}
		parts = append(parts, name+": "+strings.Join(sigs, ", "))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// alertKey identifies an alert's label set.
func alertKey(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		fmt.Fprintf(&b, ",%s=%s", k, l[k])
	}
	return b.String()
}

// labelNote names the backend an alert is about, and the model (and an
// adapter's base model), if any: " [sim-b]", " [model=demo-small]".
func labelNote(l map[string]string) string {
	var parts []string
	if b := l["backend"]; b != "" {
		parts = append(parts, b)
	}
	for _, k := range []string{"model", "base_model"} {
		if v := l[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " [" + strings.Join(parts, ", ") + "]"
}

// reading is one look at every signal kind's state: "unknown", "ok" or
// its alarm state.
type reading struct {
	state     [numSignals]string
	ejected   []string  // the backends ejected now
	slow      []string  // the backends answering far slower than the others
	evaluated time.Time // when the signals were evaluated
	// models are the segments of /admin/signals, by model.
	models map[string]modelReading
}

// modelReading is one model's segment: the state of each of segSignals
// ("" for the others), and the base model of an adapter.
type modelReading struct {
	base  string
	state [numSignals]string
}

// read looks at the latest evaluation of the signals (made by the
// pipeline's own loop every analyzers.interval: evaluating here would
// count evaluations twice towards analyzers.consecutive) and at the
// backends' passive health.
func (d *Demo) read(ctx context.Context) reading {
	var rd reading
	for k := range rd.state {
		rd.state[k] = "unknown"
	}
	if s, err := d.app.Pipeline().Signals(ctx); err == nil && s != nil {
		rd.evaluated = s.Evaluated
		if s.Drift != nil {
			rd.state[SigDrift] = s.Drift.State
		}
		if s.Confidence != nil {
			rd.state[SigDecay] = s.Confidence.State
		}
		if s.Output != nil {
			rd.state[SigOutput] = s.Output.State
		}
		if s.Latency != nil {
			rd.state[SigLatency] = s.Latency.State
		}
		if s.Precision != nil {
			rd.state[SigPrecision] = s.Precision.State
		}
		rd.models = make(map[string]modelReading, len(s.Segments))
		for i := range s.Segments {
			g := &s.Segments[i]
			mr := modelReading{base: g.BaseModel}
			for _, k := range segSignals {
				mr.state[k] = "unknown"
			}
			if g.Drift != nil {
				mr.state[SigDrift] = g.Drift.State
			}
			if g.Confidence != nil {
				mr.state[SigDecay] = g.Confidence.State
			}
			if g.Output != nil {
				mr.state[SigOutput] = g.Output.State
			}
			if g.Latency != nil {
				mr.state[SigLatency] = g.Latency.State
			}
			rd.models[g.Model] = mr
		}
	}
	rd.state[SigEjection] = "ok"
	for _, b := range d.app.Gateway().Pool().Backends() {
		if b.Ejected() || (d.outOfService && !b.Healthy()) {
			rd.ejected = append(rd.ejected, b.Name)
			rd.state[SigEjection] = alarmStates[SigEjection]
		}
	}
	rd.state[SigSlow] = "ok"
	limit := alert.DefaultFixed[alert.RuleBackendSlow]
	for name, v := range d.app.Pipeline().BackendSlowness() {
		if v > limit {
			rd.slow = append(rd.slow, fmt.Sprintf("%s ×%.0f", name, v))
			rd.state[SigSlow] = alarmStates[SigSlow]
		}
	}
	slices.Sort(rd.slow)
	rd.state[SigStore], rd.state[SigSpans] = "ok", "ok"
	if d.infra != nil {
		d.infra.read(ctx, d.base, &rd)
	}
	return rd
}

// Counters are the demo's counts at one time: its traffic, each
// simulator's, and the gateway's retry and ejection counters; and the
// mean confidence of the current window.
type Counters struct {
	tally   trafficTally
	sims    map[string]sim.Stats
	metrics map[string]float64 // by series, e.g. vigil_retries_total{reason="status_5xx"}
	// conf is the mean confidence of the current window, by model (""
	// fleet-wide); fleetDrop and fleetP the fleet's drop against the
	// baseline and its test's p-value, and fleetDecayed whether they
	// would make a decay judged fleet-wide.
	conf         map[string]float64
	fleetDrop    float64
	fleetP       float64
	fleetDecayed bool
	// drift is the fleet's input drift; nil when not read.
	drift *inputdrift.Result
}

// Counters takes the demo's counters now; the gateway's are read from
// its /metrics (missing when that fails).
func (d *Demo) Counters(ctx context.Context) Counters {
	c := Counters{tally: d.traffic.Tally(), sims: map[string]sim.Stats{}, metrics: map[string]float64{}, conf: map[string]float64{}}
	for _, s := range d.sims {
		c.sims[s.name] = s.srv.Stats()
	}
	if s, err := d.app.Pipeline().Signals(ctx); err == nil && s != nil {
		c.drift = s.Drift
		if s.Confidence != nil {
			a := d.cfg.Analyzers
			c.conf[""] = float64(s.Confidence.Confidence)
			c.fleetDrop, c.fleetP = float64(s.Confidence.Drop), float64(s.Confidence.PValue)
			c.fleetDecayed = c.fleetP < a.Alpha/2 && c.fleetDrop >= a.Confidence.MinDrop
		}
		for i := range s.Segments {
			if g := &s.Segments[i]; g.Confidence != nil {
				c.conf[g.Model] = float64(g.Confidence.Confidence)
			}
		}
	}
	c.metrics = metricSeries(ctx, d.base, func(series string) bool {
		return strings.HasPrefix(series, "vigil_retries_total") || strings.HasPrefix(series, "vigil_backend_ejections_total") ||
			strings.HasPrefix(series, "vigil_backend_failed_probes_total")
	})
	return c
}

// metricSeries reads the gateway's /metrics at base and returns the value
// of each series that keep accepts (by its name and labels, e.g.
// vigil_retries_total{reason="status_5xx"}); empty when the scrape fails.
func metricSeries(ctx context.Context, base string, keep func(series string) bool) map[string]float64 {
	out := map[string]float64{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return out
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 || line[0] == '#' || !keep(line[:i]) {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// metric sums the series of the named metric whose labels contain label.
func (c Counters) metric(name, label string) float64 {
	var sum float64
	for series, v := range c.metrics {
		if (series == name || strings.HasPrefix(series, name+"{")) && strings.Contains(series, label) {
			sum += v
		}
	}
	return sum
}

// FormatDuration writes d briefly: "1s", "30s", "3m", "2m31s", "1.5s".
func FormatDuration(d time.Duration) string {
	switch {
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d >= time.Minute:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	default:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"
	}
}

// fmtShare writes a share as a whole percentage; "n/a" when there were
// too few requests to tell.
func fmtShare(v float64) string {
	if math.IsNaN(v) {
		return "n/a (too few requests)"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
