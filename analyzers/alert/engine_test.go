package alert

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// clock is the injected clock of the tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var quiet = WithLogger(slog.New(slog.DiscardHandler))

// nopNotifier accepts everything; the tests read Observe's results.
type nopNotifier struct{}

func (nopNotifier) Notify(context.Context, []Notification) error { return nil }

// newTest returns an engine on a clock at t0 with a big queue (the tests
// read what Observe returns and do not run Run).
func newTest(cfg Config, store Store, opts ...Option) (*Engine, *clock) {
	c := &clock{t: t0}
	opts = append([]Option{quiet, WithQueue(1 << 16)}, opts...)
	return NewEngine(cfg, store, c.now, nopNotifier{}, opts...), c
}

// feed observes vals of rule, one per period, and returns the
// notifications of each period.
func feed(e *Engine, c *clock, rule string, vals ...float64) [][]Notification {
	var out [][]Notification
	for _, v := range vals {
		out = append(out, e.Observe(context.Background(), map[string]Value{rule: {V: v, Labels: map[string]string{"backend": "a", "model": "m"}}}))
		c.t = c.t.Add(5 * time.Minute)
	}
	return out
}

func count(ns [][]Notification) (firing, resolved int) {
	for _, b := range ns {
		for _, n := range b {
			if n.Resolved() {
				resolved++
			} else {
				firing++
			}
		}
	}
	return
}

// warm is the history before a test's breaches: long enough that its
// breaching values do not lift the P95 (they enter the history too).
const warm = 600

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// ramp is 1, 2, …, n in a shuffled order (the threshold must not depend on it).
func ramp(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

func TestPercentile(t *testing.T) {
	// Hand-computed with definition 7 (linear interpolation between
	// closest ranks): h = q·(n−1), x[⌊h⌋] + frac(h)·(x[⌊h⌋+1] − x[⌊h⌋]).
	for _, tc := range []struct {
		name   string
		values []float64
		q      float64
		want   float64
	}{
		{"1..20 p95", ramp(20), 0.95, 19.05},                // h = 18.05: 19 + 0.05·1
		{"1..100 p95", ramp(100), 0.95, 95.05},              // h = 94.05
		{"four p50", []float64{40, 10, 30, 20}, 0.5, 25},    // h = 1.5
		{"four p95", []float64{40, 10, 30, 20}, 0.95, 38.5}, // h = 2.85: 30 + 0.85·10
		{"one", []float64{7}, 0.95, 7},
		{"p100", []float64{1, 5, 3}, 1, 5},
		{"p0", []float64{4, 2, 3}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.values, tc.q); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Percentile = %v, want %v", got, tc.want)
			}
		})
	}
	if !math.IsNaN(Percentile(nil, 0.95)) {
		t.Error("Percentile(nil) is not NaN")
	}
}

func TestAdaptiveThreshold(t *testing.T) {
	// History 1..20: P95 = 19.05 (linear), ×1.1 = 20.955.
	const want = 19.05 * 1.1
	for _, tc := range []struct {
		name  string
		value float64
		state State // "" : not listed
	}{
		{"just above", want + 0.001, Pending},
		{"just below", want - 0.001, ""},
		{"equal is inside", want, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c := newTest(Config{}, nil)
			feed(e, c, RuleTTFT, ramp(20)...)
			feed(e, c, RuleTTFT, tc.value)
			got := e.Alerts()
			if tc.state == "" {
				if len(got) != 0 {
					t.Fatalf("alerts = %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].State != tc.state || math.Abs(float64(got[0].Threshold)-want) > 1e-9 {
				t.Fatalf("alerts = %+v, want one %s with threshold %v", got, tc.state, want)
			}
		})
	}
}

func TestNegativePercentileWidensUpwards(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleConfidenceDrop, repeat(-0.1, 20)...)
	feed(e, c, RuleConfidenceDrop, -0.095) // above −0.1·1.1 = −0.11 but inside −0.1 + 0.01 = −0.09
	if got := e.Alerts(); len(got) != 0 {
		t.Fatalf("alerts = %+v, want none", got)
	}
}

// TestMinHistory: below MinHistory periods the cold-start threshold is in
// force, from then on the adaptive one.
func TestMinHistory(t *testing.T) {
	for _, tc := range []struct {
		rule   string
		past   []float64
		thresh float64
		source ThresholdSource
	}{
		{RuleE2E, repeat(100, 11), 300, ColdStart}, // 3 × the median
		{RuleE2E, append(repeat(100, 10), 200), 300, ColdStart},
		{RuleE2E, repeat(100, 12), 110, Adaptive}, // P95 × 1.1
		{RuleErrorRate, repeat(0, 11), 0.05, ColdStart},
		{RuleErrorRate, repeat(0, 12), 0.01, Adaptive}, // its floor
		{RuleDrift, nil, 0.1, ColdStart},               // its floor
		{RulePrecision, repeat(0.001, 3), 0.01, ColdStart},
	} {
		e, c := newTest(Config{}, nil)
		feed(e, c, tc.rule, append(tc.past, 1e6)...)
		a := e.Alerts()
		if len(a) != 1 || a[0].State != Pending || math.Abs(float64(a[0].Threshold)-tc.thresh) > 1e-9 || a[0].ThresholdSource != tc.source {
			t.Errorf("%s after %v: alerts %+v, want pending at %v (%s)", tc.rule, tc.past, a, tc.thresh, tc.source)
		}
	}
	// A latency series with no history has no threshold yet.
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleTTFT, 1e6)
	if a := e.Alerts(); len(a) != 0 {
		t.Errorf("first latency period: alerts %+v, want none", a)
	}
}

func TestConsecutive(t *testing.T) {
	for _, tc := range []struct {
		breaches   int
		wantFiring int
		wantState  State
	}{
		{1, 0, Pending},
		{2, 0, Pending},
		{3, 1, Firing},
		{4, 1, Firing},
	} {
		t.Run(string(rune('0'+tc.breaches)), func(t *testing.T) {
			e, c := newTest(Config{}, nil)
			feed(e, c, RuleDrift, repeat(0.05, warm)...)
			ns := feed(e, c, RuleDrift, repeat(0.5, tc.breaches)...)
			if f, _ := count(ns); f != tc.wantFiring {
				t.Errorf("firing notifications = %d, want %d", f, tc.wantFiring)
			}
			got := e.Alerts()
			if len(got) != 1 || got[0].State != tc.wantState {
				t.Fatalf("alerts = %+v, want %s", got, tc.wantState)
			}
			if tc.wantFiring > 0 {
				n := ns[2][0]
				want := map[string]string{"alertname": "VigilInputDrift", "severity": "warning", "signal": "drift",
					"rule": RuleDrift, "backend": "a", "model": "m"}
				if d := cmp.Diff(want, n.Labels); d != "" {
					t.Errorf("labels (-want +got):\n%s", d)
				}
				// startsAt: the first breaching period.
				if wantStart := t0.Add(warm * 5 * time.Minute); !n.StartsAt.Equal(wantStart) {
					t.Errorf("startsAt = %v, want %v", n.StartsAt, wantStart)
				}
			}
		})
	}
	t.Run("interrupted", func(t *testing.T) {
		e, c := newTest(Config{}, nil)
		feed(e, c, RuleDrift, repeat(0.05, warm)...)
		ns := feed(e, c, RuleDrift, 0.5, 0.5, 0.05, 0.5, 0.5, 0.05)
		if f, _ := count(ns); f != 0 {
			t.Errorf("firing notifications = %d, want 0", f)
		}
	})
}

func TestSilenceAndResolution(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleTTFT, repeat(100, warm)...)
	start := c.t
	// Fire at start+10m (3rd breach), resolve at +15m, breach again
	// from +20m: the 3rd breach at +30m is 20 minutes after the
	// notification: silenced until +40m, the first period 30 minutes
	// after it.
	seq := []float64{500, 500, 500, 100, 500, 500, 500, 500, 500, 500, 100}
	ns := feed(e, c, RuleTTFT, seq...)
	type ev struct {
		at       time.Duration
		resolved bool
	}
	var got []ev
	for i, b := range ns {
		for _, n := range b {
			got = append(got, ev{time.Duration(i) * 5 * time.Minute, n.Resolved()})
		}
	}
	want := []ev{{10 * time.Minute, false}, {15 * time.Minute, true}, {40 * time.Minute, false}, {50 * time.Minute, true}}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(ev{})); d != "" {
		t.Fatalf("notifications (-want +got):\n%s", d)
	}
	// The resolution carries endsAt = the period it came back inside.
	if r := ns[3][0]; !r.EndsAt.Equal(start.Add(15*time.Minute)) || !r.StartsAt.Equal(start) {
		t.Errorf("resolution startsAt %v endsAt %v, want %v and %v", r.StartsAt, r.EndsAt, start, start.Add(15*time.Minute))
	}
	// A firing notification's endsAt outlives the silence, so that
	// Alertmanager keeps it until the re-send.
	if f := ns[2][0]; !f.EndsAt.After(start.Add(10*time.Minute + 30*time.Minute)) {
		t.Errorf("firing endsAt %v is before the next re-send", f.EndsAt)
	}
}

// TestDeeperEpisodeNotifies: within the silence, a new episode that
// breaches twice as deep as the one that paged is notified anyway (a
// marginal false positive must not hide a real incident), while one no
// deeper stays silenced; the rule holds across engines sharing a store.
func TestDeeperEpisodeNotifies(t *testing.T) {
	for _, tt := range []struct {
		name   string
		second float64
		want   []time.Duration // firing notifications, from the first breach
	}{
		// The threshold sits a little under 130 (from a history of 100s):
		// 500 is far more than twice as far past it as 130, 135 is not.
		{"deeper", 500, []time.Duration{10 * time.Minute, 30 * time.Minute}},
		{"as deep", 135, []time.Duration{10 * time.Minute, 40 * time.Minute}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := state.NewMemory()
			e, c := newTest(Config{}, store)
			feed(e, c, RuleTTFT, repeat(100, warm)...)
			// A marginal episode fires at +10m and resolves at +15m; the
			// second breaches from +20m and would fire at +30m.
			seq := append([]float64{130, 130, 130, 100}, repeat(tt.second, 5)...)
			// The second episode runs on another engine over the same
			// store: the notified excess is shared with the time.
			var got []time.Duration
			for i, v := range seq {
				eng := e
				if i >= 4 {
					if i == 4 {
						e2, c2 := newTest(Config{}, store)
						c2.t = c.t
						e, c = e2, c2
					}
					eng = e
				}
				for _, n := range feed(eng, c, RuleTTFT, v)[0] {
					if !n.Resolved() {
						got = append(got, time.Duration(i)*5*time.Minute)
					}
				}
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("firing notifications (-want +got):\n%s", d)
			}
		})
	}
}

func TestStates(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleTTFT, repeat(100, warm)...)
	for i, tc := range []struct {
		v    float64
		want State
	}{
		{500, Pending}, {500, Pending}, {500, Firing}, {100, Resolved},
		{500, Pending}, {500, Pending}, {500, Silenced}, {500, Silenced}, {500, Firing}, {500, Firing},
	} {
		feed(e, c, RuleTTFT, tc.v)
		got := e.Alerts()
		if len(got) != 1 || got[0].State != tc.want {
			t.Fatalf("period %d: alerts %+v, want %s", i, got, tc.want)
		}
	}
}

func TestRefireWhileFiring(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleTTFT, repeat(100, warm)...)
	ns := feed(e, c, RuleTTFT, repeat(500, 3+12)...) // fires at period 2, re-sends every 30 minutes (6 periods)
	var at []int
	for i, b := range ns {
		if len(b) > 0 {
			at = append(at, i)
		}
	}
	if d := cmp.Diff([]int{2, 8, 14}, at); d != "" {
		t.Fatalf("notified periods (-want +got):\n%s", d)
	}
}

func TestFixedThresholds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    Config
		rule   string
		vals   []float64
		firing int
	}{
		{"fixed without history", Config{Fixed: map[string]float64{RuleErrorRate: 0.05}}, RuleErrorRate, []float64{0.06, 0.07, 0.08}, 1},
		{"fixed below", Config{Fixed: map[string]float64{RuleErrorRate: 0.05}}, RuleErrorRate, []float64{0.05, 0.04, 0.01}, 0},
		{"cold start without history", Config{}, RuleErrorRate, []float64{0.06, 0.07, 0.08}, 1},
		{"cold start below", Config{}, RuleErrorRate, []float64{0.04, 0.03, 0.049}, 0},
		{"cold start configured", Config{ColdStartErrorRate: 0.1}, RuleErrorRate, []float64{0.06, 0.07, 0.08}, 0},
		{"perplexity band default 3σ", Config{}, RulePerplexity, []float64{3.1, 4, 5}, 1},
		{"perplexity inside band", Config{}, RulePerplexity, []float64{2.9, 1, 2.99}, 0},
		{"perplexity band overridden", Config{Fixed: map[string]float64{RulePerplexity: 6}}, RulePerplexity, []float64{3.1, 4, 5}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, c := newTest(tc.cfg, nil)
			if f, _ := count(feed(e, c, tc.rule, tc.vals...)); f != tc.firing {
				t.Errorf("firing = %d, want %d", f, tc.firing)
			}
		})
	}
}

func TestOncePerPeriod(t *testing.T) {
	e, c := newTest(Config{Fixed: map[string]float64{RuleErrorRate: 0.05}}, nil)
	for range 5 { // five calls in one period are one breach
		e.Observe(context.Background(), map[string]Value{RuleErrorRate: {V: 1}})
	}
	c.t = c.t.Add(time.Minute)
	e.Observe(context.Background(), map[string]Value{RuleErrorRate: {V: 1}})
	if got := e.Alerts(); len(got) != 1 || got[0].State != Pending {
		t.Fatalf("alerts = %+v, want pending", got)
	}
}

// noise returns stationary values of each rule.
func noise(r *rand.Rand) map[string]Value {
	lbl := map[string]string{"backend": "a", "model": "m"}
	return map[string]Value{
		RuleTTFT:           {V: 140 + 8*r.NormFloat64(), Labels: lbl},
		RuleE2E:            {V: 1400 * math.Exp(0.05*r.NormFloat64()), Labels: lbl},
		RuleDrift:          {V: 0.02 * r.ExpFloat64(), Labels: lbl},  // a PSI: positive, skewed
		RuleConfidenceDrop: {V: 0.01 * r.NormFloat64(), Labels: lbl}, // around zero, both signs
		RuleErrorRate:      {V: 0.002 * r.ExpFloat64(), Labels: lbl},
		RulePerplexity:     {V: bandDistance(r), Labels: lbl},
	}
}

// bandDistance is a stationary perplexity band distance: the smallest |z|
// of 5 per-minute means.
func bandDistance(r *rand.Rand) float64 {
	d := math.Inf(1)
	for range 5 {
		d = min(d, math.Abs(r.NormFloat64()))
	}
	return d
}

// week runs a simulated week of stationary values (2016 periods of 5
// minutes on an accelerated clock) and returns the firing notifications
// by rule.
func week(t *testing.T, cfg Config, store Store, seed uint64) (*Engine, map[string]int, int) {
	e, c := newTest(cfg, store)
	r := rand.New(rand.NewPCG(seed, seed))
	firing := map[string]int{}
	total := 0
	for range 7 * 24 * 12 {
		for _, n := range e.Observe(context.Background(), noise(r)) {
			if !n.Resolved() {
				firing[n.Labels["rule"]]++
				total++
			}
		}
		c.t = c.t.Add(5 * time.Minute)
	}
	return e, firing, total
}

func TestStationaryWeek(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the simulated week (2016 periods x 6 rules) is left out")
	}
	const periods = 7 * 24 * 12
	store := state.NewMemory()
	e, firing, total := week(t, Config{}, store, 7)
	t.Logf("simulated week, default floors: %d periods × 6 rules, %d false alerts %v", periods, total, firing)
	if total != 0 {
		t.Errorf("%d false alerts on stationary traffic: %v", total, firing)
	}
	// Without floors the zero-centred signals alert on noise now and then:
	// measured, not asserted.
	_, firing, total = week(t, Config{Floor: map[string]float64{}}, nil, 7)
	t.Logf("simulated week, no floors: %d false alerts %v", total, firing)

	// The history is bounded and persisted.
	b, err := store.Get(context.Background(), historyKey(e.seriesOf(RuleTTFT, map[string]string{"backend": "a", "model": "m"})))
	if err != nil {
		t.Fatal(err)
	}
	h, err := decodeHistory(b)
	if err != nil || len(h.values) != periods {
		t.Fatalf("stored history: %d values, %v; want %d", len(h.values), err, periods)
	}
}

func TestStepChange(t *testing.T) {
	e, c := newTest(Config{}, nil)
	r := rand.New(rand.NewPCG(3, 4))
	for range 24 * 12 { // a day of stationary values
		e.Observe(context.Background(), noise(r))
		c.t = c.t.Add(5 * time.Minute)
	}
	step := c.t
	episodes := map[time.Time]bool{}
	var first time.Time
	for range 6 * 12 { // six hours with TTFT doubled
		v := noise(r)
		x := v[RuleTTFT]
		x.V *= 2
		v[RuleTTFT] = x
		for _, n := range e.Observe(context.Background(), v) {
			if n.Resolved() {
				continue
			}
			if n.Labels["rule"] != RuleTTFT {
				t.Errorf("unexpected alert %v", n.Labels)
			}
			if first.IsZero() {
				first = c.t
			}
			episodes[n.StartsAt] = true
		}
		c.t = c.t.Add(5 * time.Minute)
	}
	if len(episodes) != 1 {
		t.Fatalf("alert episodes = %d, want 1", len(episodes))
	}
	if want := step.Add(10 * time.Minute); !first.Equal(want) {
		t.Errorf("fired at %v, want %v (the 3rd period after the step)", first, want)
	}
}

func TestHistorySharedAcrossEngines(t *testing.T) {
	store := state.NewMemory()
	a, ca := newTest(Config{}, store)
	b, cb := newTest(Config{}, store)
	for i := range 30 {
		v := map[string]Value{RuleE2E: {V: float64(100 + i)}}
		a.Observe(context.Background(), v)
		b.Observe(context.Background(), v)
		ca.t, cb.t = ca.t.Add(5*time.Minute), cb.t.Add(5*time.Minute)
	}
	raw, err := store.Get(context.Background(), historyKey(a.seriesOf(RuleE2E, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h, _ := decodeHistory(raw)
	if len(h.values) != 30 {
		t.Fatalf("history has %d values, want 30 (each period once)", len(h.values))
	}
}

func TestHistoryBounded(t *testing.T) {
	e, c := newTest(Config{Period: time.Minute, History: 10 * time.Minute}, nil)
	feed(e, c, RuleE2E, ramp(25)...)
	s := e.seriesOf(RuleE2E, map[string]string{"backend": "a", "model": "m"})
	if len(s.hist.values) != 10 {
		t.Fatalf("history has %d values, want 10", len(s.hist.values))
	}
}

func TestValues(t *testing.T) {
	rate, lower := 0.03, 120.0
	lbl := map[string]string{"model": "m"}
	got := Values(Signals{
		Drift:      &inputdrift.Result{State: "ok", Score: 0.2},
		Confidence: &confidence.Decay{State: "decay", Drop: 0.15},
		Output:     &output.Output{State: "drift", Perplexity: 2.0, BaselineMean: 1.5, BaselineStd: 0.1, Distance: 5},
		Latency: &latency.Result{State: "ok", Metrics: map[string]latency.Stat{
			"ttft": {Quantiles: latency.Quantiles{P95: 140}, P95Lower: 120, Count: 20},
			"e2e":  {Quantiles: latency.Quantiles{P95: stats.Num(math.NaN())}, Count: 30}}},
		ErrorRate: &rate,
		Labels:    lbl,
	})
	yes, no := true, false
	want := map[string]Value{
		RuleDrift:          {V: 0.2, Labels: lbl, Verdict: &no},
		RuleConfidenceDrop: {V: 0.15, Labels: lbl, Verdict: &yes},
		RulePerplexity:     {V: 5, Labels: lbl}, // the band distance
		RuleTTFT:           {V: 140, Labels: lbl, Lower: &lower},
		RuleErrorRate:      {V: 0.03, Labels: lbl}, // E2E NaN and precision absent: skipped
	}
	if d := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-9)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	// Latency P95s need no verdict, only enough responses.
	if got := Values(Signals{Latency: &latency.Result{State: "unknown", Metrics: map[string]latency.Stat{
		"ttft": {Quantiles: latency.Quantiles{P95: 140}, P95Lower: stats.Num(math.NaN()), Count: 20},
		"e2e":  {Quantiles: latency.Quantiles{P95: 900}, Count: 19}}}}); len(got) != 1 || got[RuleTTFT].V != 140 {
		t.Errorf("latency without a reference: %+v, want the TTFT P95 only", got)
	}
	if got := Values(Signals{Drift: &inputdrift.Result{State: "unknown", Score: 9}}); len(got) != 0 {
		t.Errorf("unknown state gave %v", got)
	}
	// A P95 of fewer than 20 values is its largest: no value.
	few := &latency.Result{State: "ok", Metrics: map[string]latency.Stat{"ttft": {Quantiles: latency.Quantiles{P95: 900}, Count: 19}}}
	if got := Values(Signals{Latency: few}); len(got) != 0 {
		t.Errorf("a P95 of 19 values gave %v", got)
	}
}

// TestSilenceSurvivesRestart: a replica started after a notification keeps
// the silence, read from the shared store.
func TestSilenceSurvivesRestart(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	cfg := Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}
	var sent []Notification
	n := notifierFunc(func(_ context.Context, ns []Notification) error { sent = append(sent, ns...); return nil })
	a := NewEngine(cfg, store, clock, n)
	breach := map[string]Value{RuleErrorRate: {V: 0.5}}
	var queued int
	for range 3 {
		queued += len(a.Observe(context.Background(), breach))
		now = now.Add(5 * time.Minute)
	}
	if queued != 1 {
		t.Fatalf("first replica queued %d notifications, want 1", queued)
	}
	b := NewEngine(cfg, store, clock, n) // a new replica, 15 minutes after the notification
	queued = 0
	for range 3 {
		queued += len(b.Observe(context.Background(), breach))
		now = now.Add(5 * time.Minute)
	}
	if queued != 0 {
		t.Errorf("a restarted replica notified %d times within the silence", queued)
	}
}

// notifierFunc adapts a function to Notifier.
type notifierFunc func(context.Context, []Notification) error

func (f notifierFunc) Notify(ctx context.Context, ns []Notification) error { return f(ctx, ns) }

// TestProportionSignificance: a proportion breaches only when its count is
// significantly above the threshold rate.
func TestProportionSignificance(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.05}, Consecutive: 1}, nil, func() time.Time { return now }, nil)
	tests := []struct {
		v    float64
		n    int64
		want bool
	}{
		{1.0 / 18, 18, false},   // one error in 18 requests: P(X ≥ 1) = 0.60
		{3.0 / 20, 20, false},   // P(X ≥ 3 | 20, 0.05) = 0.075
		{4.0 / 20, 20, true},    // 0.016
		{30.0 / 200, 200, true}, // 15% of 200
		{0.06, 0, true},         // not a proportion: above is a breach
	}
	for i, tt := range tests {
		now = now.Add(5 * time.Minute)
		e.ObserveValues(context.Background(), []Value{{Rule: RuleErrorRate, V: tt.v, N: tt.n, Labels: map[string]string{"case": strconv.Itoa(i)}}})
		firing := false
		for _, a := range e.Alerts() {
			if a.Labels["case"] == strconv.Itoa(i) && a.State == Firing {
				firing = true
			}
		}
		if firing != tt.want {
			t.Errorf("%d/%d errors: firing %v, want %v", int(math.Round(tt.v*float64(tt.n))), tt.n, firing, tt.want)
		}
	}
}

// TestPerplexityFiresAtOnce: the perplexity band's value already holds
// its 5 minutes, so one breaching period fires while the others need 3.
func TestPerplexityFiresAtOnce(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	e := NewEngine(Config{Fixed: map[string]float64{RuleDrift: 0.2}}, nil, func() time.Time { return now }, nil)
	states := map[string]State{}
	for range 2 {
		now = now.Add(5 * time.Minute)
		e.Observe(context.Background(), map[string]Value{RulePerplexity: {V: 3.5}, RuleDrift: {V: 0.5}})
		for _, a := range e.Alerts() {
			states[a.Rule] = a.State
		}
	}
	if states[RulePerplexity] != Firing || states[RuleDrift] != Pending {
		t.Errorf("after 2 periods: %v, want perplexity firing and drift pending", states)
	}
}

// TestLowerBound: a value above its threshold whose lower confidence bound
// is not stays inside.
func TestLowerBound(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	e := NewEngine(Config{Fixed: map[string]float64{RuleTTFT: 300}, Consecutive: 1}, nil, func() time.Time { return now }, nil)
	state := func(v, lower float64) State {
		now = now.Add(5 * time.Minute)
		e.ObserveValues(context.Background(), []Value{{Rule: RuleTTFT, V: v, Lower: &lower}})
		for _, a := range e.Alerts() {
			return a.State
		}
		return ""
	}
	if st := state(350, 280); st != "" {
		t.Errorf("P95 350, lower bound 280, threshold 300: %q, want no alert", st)
	}
	if st := state(350, 310); st != Firing {
		t.Errorf("P95 350, lower bound 310, threshold 300: %q, want firing", st)
	}
}

// TestLongIncident: a step that lasts two days of a seven-day history
// keeps firing until the values come back, then resolves once. Breaching
// periods stay out of the history, so the incident never becomes its own
// P95 (the threshold used to climb to the incident's level).
func TestLongIncident(t *testing.T) {
	const day = 24 * 12 // periods of 5 minutes
	e, c := newTest(Config{}, nil)
	r := rand.New(rand.NewPCG(5, 6))
	ttft := func(scale float64) map[string]Value {
		return map[string]Value{RuleTTFT: {V: scale * (100 + 5*r.NormFloat64())}}
	}
	for range 7 * day {
		e.Observe(context.Background(), ttft(1))
		c.t = c.t.Add(5 * time.Minute)
	}
	var firingPeriods, resolutions int
	var maxThresh float64
	for i := range 2 * day {
		for _, n := range e.Observe(context.Background(), ttft(2)) {
			if n.Resolved() {
				resolutions++
			}
		}
		a := e.Alerts()
		if i >= 2 && (len(a) != 1 || a[0].State != Firing) {
			t.Fatalf("period %d of the incident: alerts %+v, want firing", i, a)
		}
		if len(a) == 1 {
			maxThresh = max(maxThresh, float64(a[0].Threshold))
			if a[0].State == Firing {
				firingPeriods++
			}
		}
		c.t = c.t.Add(5 * time.Minute)
	}
	if resolutions != 0 || maxThresh > 130 {
		t.Errorf("during the incident: %d resolutions, threshold up to %.1f; want none, and the normal phase's (≈ 120)", resolutions, maxThresh)
	}
	for range day {
		for _, n := range e.Observe(context.Background(), ttft(1)) {
			if n.Resolved() {
				resolutions++
			}
		}
		c.t = c.t.Add(5 * time.Minute)
	}
	if a := e.Alerts(); resolutions != 1 || len(a) != 1 || a[0].State != Resolved {
		t.Errorf("after the incident: %d resolutions, alerts %+v; want one, resolved", resolutions, a)
	}
	t.Logf("firing %d of %d incident periods; threshold at most %.1f ms", firingPeriods, 2*day, maxThresh)
}

// TestColdStartVerdict: under a cold-start floor a signal with a verdict
// breaches only when its verdict says so, so that a deployment whose
// normal drift score sits above the floor learns it instead of alerting.
func TestColdStartVerdict(t *testing.T) {
	yes, no := true, false
	e, c := newTest(Config{}, nil)
	for range 15 {
		e.Observe(context.Background(), map[string]Value{RuleDrift: {V: 0.4, Verdict: &no}})
		c.t = c.t.Add(5 * time.Minute)
	}
	if a := e.Alerts(); len(a) != 0 {
		t.Fatalf("a high but stable drift score without a drift verdict: %+v", a)
	}
	e, c = newTest(Config{}, nil)
	var firing int
	for range 3 {
		f, _ := count([][]Notification{e.Observe(context.Background(), map[string]Value{RuleDrift: {V: 0.4, Verdict: &yes}})})
		firing += f
		c.t = c.t.Add(5 * time.Minute)
	}
	if a := e.Alerts(); firing != 1 || len(a) != 1 || a[0].ThresholdSource != ColdStart {
		t.Errorf("drift verdict on a new deployment: %d notifications, alerts %+v; want one firing on the cold-start floor", firing, a)
	}
}

// TestPendingNoiseIsLearnt: a pending run that ends before firing was
// noise and joins the history (late); a run that fires never does.
func TestPendingNoiseIsLearnt(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleE2E, append(repeat(100, 12), 1000, 100)...)
	s := e.seriesOf(RuleE2E, map[string]string{"backend": "a", "model": "m"})
	if d := cmp.Diff(append(repeat(100, 12), 1000, 100), s.hist.values); d != "" {
		t.Errorf("history after a one-period blip (-want +got):\n%s", d)
	}
	feed(e, c, RuleE2E, 5000, 5000, 5000, 5000, 100)
	if d := cmp.Diff(append(repeat(100, 12), 1000, 100, 100), s.hist.values); d != "" {
		t.Errorf("history after an incident that fired (-want +got):\n%s", d)
	}
}

// TestConfigDefaultsAreConfigs: what the engine runs with, for a zero
// Config and for one built from the alerts section, is config's alerts
// section, so that the engine holds no default of its own.
func TestConfigDefaultsAreConfigs(t *testing.T) {
	a := config.DefaultAlerts()
	want := Config{
		Period: a.Period, History: a.History, Percentile: a.Percentile, Factor: a.Factor, MinHistory: a.MinHistory,
		Consecutive: a.Consecutive, Silence: a.Silence, Severity: a.Severity,
		ColdStartErrorRate: a.ColdStart.ErrorRate, ColdStartLatencyFactor: a.ColdStart.LatencyFactor,
	}
	if diff := cmp.Diff(want, Config{}.withDefaults()); diff != "" {
		t.Errorf("zero Config's defaults differ from config.DefaultAlerts() (-want +got):\n%s", diff)
	}
	// Non-default values pass through unchanged.
	other := Config{Period: time.Minute, History: 2 * time.Hour, Percentile: 0.5, Factor: 2, MinHistory: 3,
		Consecutive: 1, Silence: time.Minute, Severity: "info", ColdStartErrorRate: 0.5, ColdStartLatencyFactor: 2}
	if diff := cmp.Diff(other, other.withDefaults()); diff != "" {
		t.Errorf("withDefaults changed set values (-want +got):\n%s", diff)
	}
}

// TestIdleResolves: a period with nothing to measure (Value.Idle) resolves
// a firing alert with a notification, ends a pending run without firing,
// and leaves the history as it was.
func TestIdleResolves(t *testing.T) {
	e, c := newTest(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil)
	lbl := map[string]string{"backend": "a", "model": "m"}
	idle := func() []Notification {
		defer func() { c.t = c.t.Add(5 * time.Minute) }()
		return e.ObserveValues(context.Background(), []Value{{Rule: RuleErrorRate, Labels: lbl, Idle: true}})
	}
	s := e.seriesOf(RuleErrorRate, lbl)
	if f, _ := count(feed(e, c, RuleErrorRate, 0.05, 0.5, 0.5, 0.5)); f != 1 {
		t.Fatalf("%d firing notifications, want 1", f)
	}
	learnt := len(s.hist.values)
	ns := idle()
	if len(ns) != 1 || !ns[0].Resolved() || s.state != Resolved {
		t.Errorf("an idle period after firing: %+v, state %q; want one resolution", ns, s.state)
	}
	feed(e, c, RuleErrorRate, 0.5, 0.5) // pending: two of three
	if ns := idle(); len(ns) != 0 || s.state != "" {
		t.Errorf("an idle period while pending: %+v, state %q; want nothing, no state", ns, s.state)
	}
	if f, _ := count(feed(e, c, RuleErrorRate, 0.5, 0.5)); f != 0 {
		t.Error("the idle period did not break the pending run")
	}
	if len(s.hist.values) != learnt {
		t.Errorf("history grew from %d to %d values over idle and breaching periods", learnt, len(s.hist.values))
	}
}

// TestConsecutiveByTime: evaluations every minute of a 5-minute period
// count each period once, and three consecutive periods are counted in
// time: a breach that begins at the end of a period does not fire at the
// start of the period after next (three periods observed, little more
// than one period of breach) but two periods after it began.
func TestConsecutiveByTime(t *testing.T) {
	e, c := newTest(Config{}, nil)
	feed(e, c, RuleDrift, repeat(0.05, warm)...)
	// The last minute of a period.
	c.t = c.t.Add(4 * time.Minute)
	start := c.t
	var firedAt time.Time
	for range 15 {
		for _, n := range e.Observe(context.Background(), map[string]Value{RuleDrift: {V: 0.5}}) {
			if !n.Resolved() && firedAt.IsZero() {
				firedAt = c.t
			}
		}
		c.t = c.t.Add(time.Minute)
	}
	if firedAt.IsZero() {
		t.Fatal("a breach of 15 minutes did not fire")
	}
	if got, want := firedAt.Sub(start), 10*time.Minute; got != want {
		t.Errorf("fired %v after the breach began, want %v (two periods: the first breaching value counts as the first period)", got, want)
	}
}

// TestPendingLapses: a pending run whose series stops reporting lapses
// after one and a half periods without a value, while other series go on
// being evaluated; its next breach starts a new run, which does not fire
// at once.
func TestPendingLapses(t *testing.T) {
	e, c := newTest(Config{Fixed: map[string]float64{RuleErrorRate: 0.05, RuleTTFT: 1000}}, nil)
	obs := func(vs map[string]Value) []Notification {
		ns := e.Observe(context.Background(), vs)
		c.t = c.t.Add(5 * time.Minute)
		return ns
	}
	other := Value{V: 1}
	obs(map[string]Value{RuleErrorRate: {V: 1}, RuleTTFT: other})
	obs(map[string]Value{RuleErrorRate: {V: 1}, RuleTTFT: other})
	state := func() State {
		for _, a := range e.Alerts() {
			if a.Rule == RuleErrorRate {
				return a.State
			}
		}
		return ""
	}
	if got := state(); got != Pending {
		t.Fatalf("after two breaches: %q, want pending", got)
	}
	// One period without a value: still pending (a late evaluation is no
	// gap); two: lapsed.
	obs(map[string]Value{RuleTTFT: other})
	if got := state(); got != Pending {
		t.Errorf("one period without a value: %q, want still pending", got)
	}
	obs(map[string]Value{RuleTTFT: other})
	if got := state(); got != "" {
		t.Errorf("two periods without a value: %q, want the run lapsed", got)
	}
	// The next breach is a new run: pending, not firing.
	if ns := obs(map[string]Value{RuleErrorRate: {V: 1}, RuleTTFT: other}); len(ns) != 0 {
		t.Errorf("the first breach after the lapse notified %v", ns)
	}
	if got := state(); got != Pending {
		t.Errorf("first breach after the lapse: %q, want pending", got)
	}
}

// TestDriftAnnotations: a drift names what drifted and, for the content
// test, the terms that rose and fell; the firing notification carries
// them, the resolution does not.
func TestDriftAnnotations(t *testing.T) {
	d := &inputdrift.Result{State: "drift", Score: 0.4, Features: []inputdrift.FeatureResult{
		{Name: "prompt_chars", Drift: false}, {Name: inputdrift.ContentFeature, Drift: true}},
		Content: &inputdrift.ContentResult{HeldOutResult: inputdrift.HeldOutResult{Drift: true},
			Rose: []inputdrift.TermShift{{Term: "#0000beef", Reference: 0.01, Current: 0.4}},
			Fell: []inputdrift.TermShift{{Term: "#0000cafe", Reference: 0.3, Current: 0.05}}}}
	v := Values(Signals{Drift: d})[RuleDrift]
	want := map[string]string{"drifted": "content", "terms_rose": "#0000beef 1% → 40%", "terms_fell": "#0000cafe 30% → 5%"}
	if diff := cmp.Diff(want, v.Annotations); diff != "" {
		t.Fatalf("annotations (-want +got):\n%s", diff)
	}
	if ok := Values(Signals{Drift: &inputdrift.Result{State: "ok", Score: 0.01}})[RuleDrift]; ok.Annotations != nil {
		t.Errorf("no drift, annotations %v", ok.Annotations)
	}
	e, c := newTest(Config{Fixed: map[string]float64{RuleDrift: 0.2}, Consecutive: 1}, nil)
	var fired, resolved *Notification
	for _, val := range []Value{v, v, {V: 0.01}} {
		for _, n := range e.Observe(context.Background(), map[string]Value{RuleDrift: val}) {
			if n.Resolved() {
				resolved = &n
			} else {
				fired = &n
			}
		}
		c.t = c.t.Add(5 * time.Minute)
	}
	if fired == nil || fired.Annotations["terms_rose"] != want["terms_rose"] || fired.Annotations["summary"] == "" {
		t.Errorf("firing notification %+v, want the terms beside the summary", fired)
	}
	if resolved == nil || resolved.Annotations["terms_rose"] != "" {
		t.Errorf("resolution %+v, want no terms", resolved)
	}
}
