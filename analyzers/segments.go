package analyzers

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/errrate"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/analyzers/segment"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// modelMonitors are one segment's monitors: every signal but precision
// (which is per backend pair already), for the requests of one model, or
// of every model without a segment of its own (segment.Other). It is
// immutable once in segments.m (a base model learnt later replaces it with
// a copy); each monitor is safe for concurrent use.
type modelMonitors struct {
	name     string
	base     string    // the base model of a LoRA adapter; empty otherwise
	monitors []monitor // the enabled signals'
}

// observe hands o to every monitor of the segment.
func (mm *modelMonitors) observe(o *observation) {
	for _, m := range mm.monitors {
		m.observe(o)
	}
}

// segments routes each request to its model's monitors and keeps them
// bounded (segment.Registry). It is safe for concurrent use: the
// dispatcher routes, Run evaluates and rebalances, the sharer flushes.
type segments struct {
	cfg      config.Analyzers // the segments' own: their drift reservoir, no model feature
	seed     uint64
	backends []string // the configured backends
	reg      *segment.Registry
	errs     *errrate.Rates // requests and failures by segment name
	// base names a LoRA adapter's base model (Options.BaseModel).
	base func(model string) string

	mu sync.Mutex
	m  map[string]*modelMonitors // the active names and segment.Other
}

// newSegments returns the segments of validated analyzer settings;
// errSpan is the longest span asked of the error counts.
func newSegments(c config.Analyzers, errSpan time.Duration, base func(string) string, known, backends []string) *segments {
	sc := c
	sc.Drift.Reservoir = c.Segments.Reservoir
	// Within a segment the model is constant (or, in "other", a mix of
	// the least used names that the fleet's model feature watches).
	var feats []string
	for _, n := range append(inputdrift.FeatureNames[:], inputdrift.CategoricalNames[:]...) {
		if n != "model" && (len(c.Drift.Features) == 0 || slices.Contains(c.Drift.Features, n)) {
			feats = append(feats, n)
		}
	}
	sc.Drift.Features = feats
	if len(feats) == 0 {
		sc.Drift.Enabled = false
	}
	if base == nil {
		base = func(string) string { return "" }
	}
	s := &segments{
		cfg: sc, seed: uint64(c.Seed), base: base, backends: backends,
		// Half-life: the current window's span, so that "most active"
		// follows the traffic the signals judge.
		reg:  segment.New(c.Segments.MaxModels, c.Window, c.Bucket, c.Window),
		errs: errrate.NewNamed("segments/errors", c.Bucket, errSpan, segment.MaxNames(c.Segments.MaxModels)),
		m:    map[string]*modelMonitors{},
	}
	s.reg.Pin(known...)
	for _, name := range s.reg.Active() {
		s.m[name] = s.newMonitors(name)
	}
	return s
}

// newMonitors builds the monitors of segment name.
func (s *segments) newMonitors(name string) *modelMonitors {
	mm := &modelMonitors{name: name}
	if name != segment.Other {
		mm.base = s.base(name)
	}
	// The configuration was validated and drift keeps a feature, so
	// this cannot fail.
	mm.monitors, _ = newMonitors(s.cfg, s.seed, true, s.backends)
	return mm
}

// get returns the monitors of segment name, made on first use.
func (s *segments) get(name string) *modelMonitors {
	s.mu.Lock()
	defer s.mu.Unlock()
	mm := s.m[name]
	if mm == nil {
		mm = s.newMonitors(name)
		s.m[name] = mm
	}
	return mm
}

// route returns the monitors of model's segment. A request a backend
// answered counts at t (response), and a prompt sent to one (prompt) may
// take a free segment; the gateway's own refusals (an unknown model) do
// neither, so that they never make a name active.
func (s *segments) route(t time.Time, model string, prompt, response bool) *modelMonitors {
	if response {
		return s.get(s.reg.Of(t, model))
	}
	return s.get(s.reg.Segment(t, model, prompt))
}

// rebalance gives the most active names their segments as of now (see
// segment.Registry.Rebalance) and drops the monitors of every name
// without one (those that lost theirs, and any a request routed just
// before it lost it made again); an adapter whose base model was not
// known yet is asked again.
func (s *segments) rebalance(now time.Time) {
	ch := s.reg.Rebalance(now)
	active := s.reg.Active()
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.m {
		if _, ok := slices.BinarySearch(active, name); !ok && name != segment.Other {
			delete(s.m, name)
		}
	}
	for _, name := range ch.Added {
		if s.m[name] == nil {
			s.m[name] = s.newMonitors(name)
		}
	}
	for name, mm := range s.m {
		if mm.base != "" || name == segment.Other {
			continue
		}
		// A copy: the old one may be read (evaluated, routed to) without
		// the lock; the monitors are the same.
		if base := s.base(name); base != "" {
			with := *mm
			with.base = base
			s.m[name] = &with
		}
	}
}

// list returns the segments' monitors, by name.
func (s *segments) list() []*modelMonitors {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*modelMonitors, 0, len(s.m))
	for _, mm := range s.m {
		out = append(out, mm)
	}
	slices.SortFunc(out, func(a, b *modelMonitors) int { return cmp.Compare(a.name, b.name) })
	return out
}

// seriesPrefix starts the shared series of the segments' monitors, before
// the escaped model name: a name may hold any character, the store's keys
// not ("{}" are Redis hash tags).
const seriesPrefix = "m/"

// Shared hands every segment's series to the replica flusher: the
// registry's counts (which tell other replicas which segments exist), the
// error counts and each segment's monitors' series, named by segment.
func (s *segments) Shared(f func(name string, sh window.Sharer)) {
	s.reg.Shared(f)
	s.errs.Shared(f)
	for _, mm := range s.list() {
		prefix := seriesPrefix + url.QueryEscape(mm.name) + "/"
		g := func(name string, sh window.Sharer) { f(prefix+name, sh) }
		for _, m := range mm.monitors {
			m.Shared(g)
		}
	}
}

// Sharing keeps the error counts as long as the error rates read them
// (share.Policy); the other series take the sharer's defaults.
func (s *segments) Sharing(name string) (time.Duration, int) {
	if strings.HasPrefix(name, "segments/errors") {
		return s.errs.Sharing(name)
	}
	return 0, 1
}

// pin pins every segment's windows as of at; a segment with too few
// prompts keeps its rolling input-drift reference.
func (s *segments) pin(at time.Time) {
	for _, mm := range s.list() {
		for _, m := range mm.monitors {
			_ = m.pin(at)
		}
	}
}

// Segment is one model's signals, as /admin/signals shows them under
// "segments". A nil signal is disabled and shows as {"state": "unknown"}.
type Segment struct {
	Model     string
	BaseModel string
	// State is "alarm" while any of the segment's signals is in alarm
	// (Alarms names them), "ok" while one has a verdict, else "unknown",
	// and Reason then says why.
	State  string
	Alarms []string
	Reason string
	// Requests and ErrorRate are over the last analyzers.window, every
	// replica's: failed requests among those the service could have
	// served (client errors count in neither).
	Requests   int64
	ErrorRate  stats.Num
	Drift      *inputdrift.Result
	Confidence *confidence.Decay
	Output     *output.Output
	Latency    *latency.Result
	// Backends is the model's latency per backend over the last
	// analyzers.window.
	Backends []latency.BackendStat
}

// Segment states.
const (
	segmentAlarm   = "alarm"
	segmentOK      = "ok"
	segmentUnknown = "unknown"
)

// MarshalJSON writes s with each disabled signal as {"state": "unknown"}.
func (s Segment) MarshalJSON() ([]byte, error) {
	backends := s.Backends
	if backends == nil {
		backends = []latency.BackendStat{}
	}
	return json.Marshal(struct {
		Model      string                `json:"model"`
		BaseModel  string                `json:"base_model,omitempty"`
		State      string                `json:"state"`
		Alarms     []string              `json:"alarms,omitempty"`
		Reason     string                `json:"reason,omitempty"`
		Requests   int64                 `json:"requests"`
		ErrorRate  stats.Num             `json:"error_rate"`
		Drift      any                   `json:"drift"`
		Confidence any                   `json:"confidence"`
		Latency    any                   `json:"latency"`
		Output     any                   `json:"output"`
		Backends   []latency.BackendStat `json:"backends"`
	}{s.Model, s.BaseModel, s.State, s.Alarms, s.Reason, s.Requests, s.ErrorRate,
		orUnknown(s.Drift), orUnknown(s.Confidence), orUnknown(s.Latency), orUnknown(s.Output), backends})
}

// evaluateSegments rebalances the segments and evaluates each as of now
// (counting towards their alarm streaks when advance), worst first: in alarm, then by
// requests. The segments share the significance level (Bonferroni): each
// tests at analyzers.alpha divided by their number, so that a fleet of
// many models alarms by chance no more often than one model does.
func (p *Pipeline) evaluateSegments(now time.Time, advance bool) []Segment {
	p.segs.rebalance(now)
	list := p.segs.list()
	alpha := p.cfg.Alpha / float64(max(1, len(list)))
	errs := p.segs.errs.Since(now.Add(-p.cfg.Window), now.Add(time.Nanosecond))
	out := make([]Segment, 0, len(list))
	for _, mm := range list {
		s := Segment{Model: mm.name, BaseModel: mm.base, State: segmentUnknown}
		c := errs[mm.name]
		s.Requests = c[0]
		s.ErrorRate = stats.Num(math.NaN())
		if c[0] > 0 {
			s.ErrorRate = stats.Num(float64(c[1]) / float64(c[0]))
		}
		r, vs := evaluateAll(mm.monitors, now, advance, alpha)
		s.Drift, s.Confidence, s.Output, s.Latency, s.Backends = r.drift, r.confidence, r.output, r.latency, r.backends
		for _, v := range vs {
			switch {
			case v.alarm:
				s.Alarms = append(s.Alarms, v.signal)
				s.State = segmentAlarm
			case v.known && s.State == segmentUnknown:
				s.State = segmentOK
			}
		}
		if s.State == segmentUnknown {
			s.Reason = fmt.Sprintf("too little traffic for a verdict: %d requests in the last %v", s.Requests, p.cfg.Window)
		}
		out = append(out, s)
	}
	rank := func(s *Segment) int {
		switch s.State {
		case segmentAlarm:
			return 0
		case segmentOK:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(out, func(a, b Segment) int {
		if c := cmp.Compare(rank(&a), rank(&b)); c != 0 {
			return c
		}
		if c := cmp.Compare(len(b.Alarms), len(a.Alarms)); c != 0 {
			return c
		}
		return cmp.Compare(b.Requests, a.Requests)
	})
	return out
}

// segmentsState is the fleet-wide state of signal, judged per model: its
// alarm when a segment is in it, "ok" when a segment has a verdict,
// unknown otherwise. A change in the mix of models moves the fleet's
// figures but no model's, so it is no alarm; a change in one model is
// one, however little of the traffic it serves.
func segmentsState(segs []Segment, signal, alarm, unknown string) string {
	st := unknown
	for i := range segs {
		g := &segs[i]
		if slices.Contains(g.Alarms, signal) {
			return alarm
		}
		if v := g.state(signal); v != "" && v != unknown {
			st = v
		}
	}
	return st
}

// state returns the state of signal in g, empty when it is disabled.
func (g *Segment) state(signal string) string {
	switch {
	case signal == signalDrift && g.Drift != nil:
		return g.Drift.State
	case signal == signalConfidence && g.Confidence != nil:
		return g.Confidence.State
	case signal == signalOutput && g.Output != nil:
		return g.Output.State
	case signal == signalLatency && g.Latency != nil:
		return g.Latency.State
	}
	return ""
}

// The segments' metrics: one series per segment (at most
// analyzers.segments.max_models names and "other"), from the latest
// evaluation, so that a segment's series end with it.
var (
	segmentAlarmDesc = prometheus.NewDesc("vigil_segment_alarm",
		"1 while a model's signal is in alarm, 0 while it is ok; absent while unknown. Per segment: a model with a segment of its own, or \"other\".",
		[]string{"model", "signal"}, nil)
	segmentRequestsDesc = prometheus.NewDesc("vigil_segment_requests",
		"Requests of a segment over the last analyzers.window, every replica's.", []string{"model"}, nil)
	segmentLogprobDesc = prometheus.NewDesc("vigil_segment_mean_logprob",
		"Mean token logprob of a segment's current window.", []string{"model"}, nil)
	segmentPerplexityDesc = prometheus.NewDesc("vigil_segment_perplexity",
		"Mean perplexity of a segment's latest complete minute.", []string{"model"}, nil)
	segmentDriftDesc = prometheus.NewDesc("vigil_segment_drift_score",
		"Input-drift score (largest PSI) of a segment's prompts.", []string{"model"}, nil)
	segmentLatencyDesc = prometheus.NewDesc("vigil_segment_latency_p95_seconds",
		"P95 of a segment's time to first token (ttft) and end-to-end latency (e2e) in its current window.", []string{"model", "metric"}, nil)
	segmentTrackedDesc = prometheus.NewDesc("vigil_segment_models_tracked",
		"Model names this replica counts to choose the segments: at most 4 × analyzers.segments.max_models, whatever the names sent.", nil, nil)
)

// collectSegments writes the segments' metrics of the latest evaluation.
func (p *Pipeline) collectSegments(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(segmentTrackedDesc, prometheus.GaugeValue, float64(p.segs.reg.Tracked()))
	s := p.last.Load()
	if s == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
	}
	for i := range s.Segments {
		g := &s.Segments[i]
		gauge(segmentRequestsDesc, float64(g.Requests), g.Model)
		state := func(signal, st, bad, unknown string) {
			if st != unknown {
				gauge(segmentAlarmDesc, alarm(st == bad), g.Model, signal)
			}
		}
		if d := g.Drift; d != nil {
			state(signalDrift, d.State, inputdrift.StateDrift, inputdrift.StateUnknown)
			if d.State != inputdrift.StateUnknown {
				gauge(segmentDriftDesc, d.Score, g.Model)
			}
		}
		if c := g.Confidence; c != nil {
			state(signalConfidence, c.State, confidence.StateDecay, confidence.StateUnknown)
			gauge(segmentLogprobDesc, float64(c.MeanLogprob), g.Model)
		}
		if o := g.Output; o != nil {
			state(signalOutput, o.State, output.StateDrift, output.StateUnknown)
			gauge(segmentPerplexityDesc, float64(o.Perplexity), g.Model)
		}
		if l := g.Latency; l != nil {
			state(signalLatency, l.State, latency.StateAnomalous, latency.StateUnknown)
			gauge(segmentLatencyDesc, float64(l.TTFT.P95)/1000, g.Model, "ttft")
			gauge(segmentLatencyDesc, float64(l.E2E.P95)/1000, g.Model, "e2e")
		}
	}
}
