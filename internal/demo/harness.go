package demo

// What a scenario told outside this package uses: the fault-isolation
// matrix (internal/matrix) builds demos with New, turns their faults on
// and off with the knobs and mixes the incident uses, and watches them
// with a Story whose phases are its own. Each is a view on the parts the
// incident scenario is told with, so that both tell faults with one set
// of parts.

import (
	"context"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/sim"
)

// Name is k's name in words: "input drift".
func (k Signal) Name() string { return signalNames[k] }

// Alarm is k's alarm state, as /admin/signals says it ("ejected" is the
// demo's word): "drift".
func (k Signal) Alarm() string { return alarmStates[k] }

// String is the alert's name and what it is about: "VigilBackendDown
// [sim-b]", "VigilConfidenceDecay [model=demo-small]".
func (fa FiredAlert) String() string { return fa.Name + labelNote(fa.Labels) }

// Describe says in words what expect expects to move: each signal (of its
// model alone, when it names one) and the alerts that should follow.
func Describe(expect []Expectation) string {
	var exp []string
	for _, e := range expect {
		x := signalNames[e.Signal]
		if e.Model != "" {
			x += " of " + e.Model + " alone"
		}
		if len(e.Alerts) > 0 {
			x += " (alert " + strings.Join(e.Alerts, " or ")
			if e.Model != "" {
				x += " with model=" + e.Model
			}
			x += ")"
		}
		exp = append(exp, x)
	}
	return strings.Join(exp, ", then ")
}

// NewPhaseResult starts the result of a phase that expects expect, its
// times measured from now: nothing seen yet. Story.Observe fills it in.
func NewPhaseResult(expect []Expectation) PhaseResult {
	res := PhaseResult{phase: &phase{expect: expect}, start: time.Now(), SegSeen: map[SegKey]time.Duration{}}
	for k := range res.Seen {
		res.Seen[k] = -1
	}
	return res
}

// IncidentTimings are the incident scenario's compressed timings at scale
// (1: the demo's story; smaller is faster) and the least warm-up they
// need, without the perplexity band's minutes to wait for.
func IncidentTimings(scale float64) (Timings, time.Duration) {
	sc := newIncident(scale, true)
	return sc.timings, sc.minWarmup
}

// Window is the analyzers' window.
func (t Timings) Window() time.Duration { return t.window }

// AlertPeriod is the alerts' evaluation period.
func (t Timings) AlertPeriod() time.Duration { return t.alertPeriod }

// Close closes what New opened, for a demo that was never served (Serve
// closes everything it serves itself).
func (d *Demo) Close() {
	d.app.Close()
	d.ln.Close()
	for _, s := range d.sims {
		s.ln.Close()
	}
	if d.recv != nil {
		d.recv.ln.Close()
	}
}

// PinBaseline pins the signals' baseline to the current window, as the
// incident does once its warm-up is over.
func (d *Demo) PinBaseline(ctx context.Context) error { return d.app.Pipeline().PinBaseline(ctx) }

// SetPrompts makes the traffic's next requests ask from m; the demo has
// traffic (Setup.RPS > 0).
func (d *Demo) SetPrompts(m *PromptMix) { d.traffic.setMix(m) }

// SetModels makes the traffic's next requests spread over the models as
// m does; the demo has traffic.
func (d *Demo) SetModels(m *ModelMix) { d.traffic.setModels(m) }

// Mixes are the traffic's prompt and model mixes now; the demo has
// traffic.
func (d *Demo) Mixes() (*PromptMix, *ModelMix) { return d.traffic.mix.Load(), d.traffic.models.Load() }

// Knobs are the knobs of the simulator called name now (one of AllSims).
func (d *Demo) Knobs(name string) sim.Knobs { return d.sim(name).srv.Knobs() }

// Requests counts the traffic's requests so far: those sent and, of them,
// those that failed (another status than 200, or no answer).
func (d *Demo) Requests() (sent, failed int64) {
	t := d.traffic.Tally()
	return t.Sent, t.Failed
}

// Requests counts the traffic's requests when c was taken, as
// Demo.Requests does.
func (c Counters) Requests() (sent, failed int64) { return c.tally.Sent, c.tally.Failed }

// StoryOptions configure NewStory.
type StoryOptions struct {
	// MinWarmup and MaxWarmup bound Warmup.
	MinWarmup, MaxWarmup time.Duration
	// Poll is how often Warmup reads the signals.
	Poll time.Duration
	// Expect are the expectations of every fault the story's phases will
	// inject: Warmup waits for their signals' verdicts.
	Expect []Expectation
}

// NewStory returns a story against d for a caller that tells its own
// phases: Warmup, then, for each fault, a PhaseResult that Observe fills
// in while the fault is on. d is built with Setup.Timings (and so runs
// its alert receiver) and traffic; NewStory reads its signals once, so
// that Observe prints what changes from there.
func (d *Demo) NewStory(ctx context.Context, out io.Writer, o StoryOptions) (*Story, error) {
	if d.traffic == nil || d.recv == nil || d.timings == nil {
		return nil, errors.New("story: the demo needs traffic, scenario timings and its alert receiver")
	}
	sc := &scenario{timings: *d.timings, minWarmup: o.MinWarmup, maxWarmup: o.MaxWarmup, poll: o.Poll,
		phases: []phase{{expect: o.Expect}}}
	s := &Story{sc: sc, d: d, out: out, t0: time.Now(), alerts: map[string]alert.State{}, notified: map[string]bool{},
		receipts: len(d.recv.all())}
	s.last = d.read(ctx)
	return s, nil
}

// Warmup lets normal traffic flow until every signal the story's
// expectations name has a verdict, fleet-wide and for each model, and
// none is in its alarm state (at least MinWarmup, at most MaxWarmup), and
// returns how long that took.
func (s *Story) Warmup(ctx context.Context) (time.Duration, error) {
	var res storyResult
	err := s.warmup(ctx, &res)
	return res.warmup, err
}

// Observe reads the signals, the alerts and the receiver once, prints
// what changed since the last reading and, when res is not nil, records
// in it the alarms and alerts first seen in its phase.
func (s *Story) Observe(ctx context.Context, res *PhaseResult) { s.observe(ctx, res) }

// Unsettled observes once and names what is not at rest: the signals in
// their alarm state and the alerts pending, firing or silenced. A fault
// that must start from a clean baseline waits for none; a pending alert
// counts, since it would fire in the fault's phase.
func (s *Story) Unsettled(ctx context.Context) []string {
	out := s.active(s.observe(ctx, nil))
	for _, key := range slices.Sorted(maps.Keys(s.alerts)) {
		if s.alerts[key] == alert.Pending {
			out = append(out, "alert "+key+" (pending)")
		}
	}
	return out
}
