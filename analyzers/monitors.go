package analyzers

import (
	"time"

	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// An observation is what one request tells the signals: its prompt's
// features (OnPrompt), or its response's logprob summary and timings
// (OnResponse). Nil fields are absent.
type observation struct {
	at      time.Time
	prompt  *inputdrift.Features
	summary *logprob.Summary // a response with token logprobs
	sample  *latency.Sample  // a successful response
	backend string           // the backend that answered it
	// anomalous is set by a segment's latency monitor: the metrics in
	// which the response was anomalous for its model.
	anomalous [latency.NumMetrics]bool
}

// A monitor is one signal kept for one segment, or for the fleet: the
// pipeline routes each observation to its segment's monitors and to the
// fleet's, evaluates them every interval, shares their series with the
// other replicas (share.Monitor) and pins their references. Every
// implementation is safe for concurrent use.
type monitor interface {
	// observe takes what the observation holds for the signal, if
	// anything.
	observe(o *observation)
	// evaluate judges the signal as of now, at significance level alpha
	// (zero: analyzers.alpha); advance counts the evaluation towards the
	// alarm streak (analyzers.consecutive), which reads between two
	// evaluations (the admin API) must not.
	evaluate(now time.Time, advance bool, alpha float64) verdict
	Shared(f func(name string, s window.Sharer))
	// pin makes the current window the reference.
	pin(at time.Time) error
}

// A verdict is one evaluation of a monitor.
type verdict struct {
	signal string // its key in /admin/signals: drift, confidence, output, latency
	state  string
	// alarm: state is the signal's alarm; known: it is not "unknown".
	alarm, known bool
	// result is the signal's own: *inputdrift.Result, *confidence.Decay,
	// *output.Output or *latency.Result.
	result any
}

// Signals as keyed in /admin/signals and in a segment's alarms.
const (
	signalDrift      = "drift"
	signalConfidence = "confidence"
	signalOutput     = "output"
	signalLatency    = "latency"
)

// newMonitors returns the monitors of the enabled signals for cfg (a
// segment's input drift leaves out the model feature). A segment's
// latency monitor reports anomalies in the observation (against the
// model's own limits), and a segment keeps its latency per backend too,
// with a series for each of backends.
func newMonitors(cfg config.Analyzers, seed uint64, segment bool, backends []string) ([]monitor, error) {
	var ms []monitor
	if cfg.Drift.Enabled {
		d, err := inputdrift.New(cfg, seed)
		if err != nil {
			return nil, err
		}
		ms = append(ms, inputMonitor{d})
	}
	if cfg.Confidence.Enabled {
		ms = append(ms, confidenceMonitor{confidence.New(cfg)})
	}
	if cfg.Output.Enabled {
		ms = append(ms, outputMonitor{output.New(cfg)})
	}
	if cfg.Latency.Enabled {
		ms = append(ms, latencyMonitor{latency.New(cfg), segment})
		if segment {
			ms = append(ms, byBackendMonitor{latency.NewByBackend(cfg, backends)})
		}
	}
	return ms, nil
}

// inputMonitor is signal 1, input drift, on prompts.
type inputMonitor struct{ *inputdrift.Monitor }

func (m inputMonitor) observe(o *observation) {
	if o.prompt != nil {
		m.Add(o.at, o.prompt)
	}
}

func (m inputMonitor) evaluate(now time.Time, advance bool, alpha float64) verdict {
	m.SetAlpha(alpha)
	r := pick(advance, m.Evaluate, m.Peek)(now)
	return verdict{signalDrift, r.State, r.State == inputdrift.StateDrift, r.State != inputdrift.StateUnknown, &r}
}

func (m inputMonitor) pin(at time.Time) error { return m.Pin(at) }

// confidenceMonitor is signal 2, confidence decay, on responses with
// logprobs.
type confidenceMonitor struct{ *confidence.Monitor }

func (m confidenceMonitor) observe(o *observation) {
	if o.summary != nil {
		m.Add(o.at, o.summary)
	}
}

func (m confidenceMonitor) evaluate(now time.Time, advance bool, alpha float64) verdict {
	m.SetAlpha(alpha)
	d := pick(advance, m.Evaluate, m.Peek)(now)
	return verdict{signalConfidence, d.State, d.State == confidence.StateDecay, d.State != confidence.StateUnknown, &d}
}

func (m confidenceMonitor) pin(at time.Time) error { m.Pin(at); return nil }

// outputMonitor is signal 4, output drift, on responses with logprobs. Its
// band needs no significance level.
type outputMonitor struct{ *output.Monitor }

func (m outputMonitor) observe(o *observation) {
	if o.summary != nil {
		m.Add(o.at, o.summary)
	}
}

func (m outputMonitor) evaluate(now time.Time, _ bool, _ float64) verdict {
	r := m.Evaluate(now)
	return verdict{signalOutput, r.State, r.State == output.StateDrift, r.State != output.StateUnknown, &r}
}

func (m outputMonitor) pin(at time.Time) error { m.Pin(at); return nil }

// latencyMonitor is signal 3, latency variance, on successful responses.
type latencyMonitor struct {
	*latency.Monitor
	records bool // reports anomalies in the observation
}

func (m latencyMonitor) observe(o *observation) {
	if o.sample == nil {
		return
	}
	if bad := m.Add(o.at, o.sample); m.records {
		o.anomalous = bad
	}
}

func (m latencyMonitor) evaluate(now time.Time, advance bool, alpha float64) verdict {
	m.SetAlpha(alpha)
	r := pick(advance, m.Evaluate, m.Peek)(now)
	return verdict{signalLatency, r.State, r.State == latency.StateAnomalous, r.State != latency.StateUnknown, &r}
}

func (m latencyMonitor) pin(at time.Time) error { m.Pin(at); return nil }

// byBackendMonitor is a model's latency per backend: a view, with no
// verdict of its own.
type byBackendMonitor struct{ *latency.ByBackend }

func (m byBackendMonitor) observe(o *observation) {
	if o.sample != nil && o.backend != "" {
		m.Add(o.at, o.backend, o.sample)
	}
}

func (m byBackendMonitor) evaluate(now time.Time, _ bool, _ float64) verdict {
	return verdict{signal: signalLatency, result: m.Evaluate(now)}
}

func (m byBackendMonitor) pin(time.Time) error { return nil }

// results are the signals of one evaluation of a set of monitors; nil:
// disabled.
type results struct {
	drift      *inputdrift.Result
	confidence *confidence.Decay
	output     *output.Output
	latency    *latency.Result
	backends   []latency.BackendStat // a segment's latency per backend
}

// evaluateAll evaluates ms and returns their results and verdicts.
func evaluateAll(ms []monitor, now time.Time, advance bool, alpha float64) (results, []verdict) {
	var r results
	vs := make([]verdict, 0, len(ms))
	for _, m := range ms {
		v := m.evaluate(now, advance, alpha)
		switch x := v.result.(type) {
		case *inputdrift.Result:
			r.drift = x
		case *confidence.Decay:
			r.confidence = x
		case *output.Output:
			r.output = x
		case *latency.Result:
			r.latency = x
		case []latency.BackendStat:
			r.backends = x
		}
		vs = append(vs, v)
	}
	return r, vs
}
