package analyzers

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/exchange"
)

// Run evaluates the signals every interval, feeds the alert engine every
// alert period and flushes the windows to the shared store when there is
// one, until ctx is done. Then it evaluates and flushes once more (for at
// most two seconds) and waits for the alert sender to drain. Cancel ctx
// only once no more observations come (the gateway's dispatcher drained),
// or they miss the last flush.
func (p *Pipeline) Run(ctx context.Context) error {
	var sender, flusher sync.WaitGroup // both end with ctx
	defer sender.Wait()
	sender.Go(func() { p.alerts.Run(ctx) })
	if p.embed != nil {
		sender.Go(func() { p.embed.Run(ctx) })
	}
	if p.share != nil {
		flusher.Go(func() { p.share.Run(ctx) })
	}
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	at := time.NewTicker(p.alertPeriod)
	defer at.Stop()
	for {
		select {
		case <-ctx.Done():
			flusher.Wait()
			p.Evaluate()
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			p.Flush(fctx)
			return nil
		case <-t.C:
			p.record(ctx, p.Evaluate())
		case <-at.C:
			p.ObserveAlerts(ctx)
		}
	}
}

// Flush shares the windows now (a no-op without Sharing).
func (p *Pipeline) Flush(ctx context.Context) {
	if p.share != nil {
		p.share.Flush(ctx)
	}
}

// Evaluate runs one evaluation of every signal now, publishes it and
// returns it. It counts towards the signals' alarm streaks
// (analyzers.consecutive): Run calls it every analyzers.interval.
func (p *Pipeline) Evaluate() *Signals { return p.evaluate(true) }

// peek evaluates like Evaluate without counting towards the alarm streaks:
// for reads between two evaluations (the admin API, alert periods).
func (p *Pipeline) peek() *Signals { return p.evaluate(false) }

// pick returns evaluate when advance, else peek.
func pick[F any](advance bool, evaluate, peek F) F {
	if advance {
		return evaluate
	}
	return peek
}

func (p *Pipeline) evaluate(advance bool) *Signals {
	now := p.now()
	s := &Signals{Evaluated: now.UTC(), Thresholds: p.alerts.Thresholds()}
	s.Window = Window{Start: now.UTC(), End: now.UTC()}
	s.Segments = p.evaluateSegments(now, advance)
	r, _ := evaluateAll(p.fleet, now, advance, 0)
	if d := r.drift; d != nil {
		s.Drift = d
		if p.embed != nil {
			st := p.embed.Stats()
			d.Embedder = &st
		}
		s.Window = Window{Start: d.CurrentStart, End: d.Evaluated, Requests: d.Current}
		p.m.publishDrift(d)
	}
	// The verdicts of confidence, output and latency are the models': the
	// fleet's figures move with the mix of models, which is no change of
	// any. Input drift keeps its own: the mix is a change of the inputs.
	if d := r.confidence; d != nil {
		d.State = segmentsState(s.Segments, signalConfidence, confidence.StateDecay, confidence.StateUnknown)
		if p.unscored.Load() > 0 {
			d.Sources = unscoredSources
		}
		rep := calibrate.Compute(p.calib.pairs(), p.cfg.Calibration.Bins)
		s.Confidence = &Confidence{Decay: *d, Calibration: rep}
		p.m.publishConfidence(d, &rep)
	}
	if o := r.output; o != nil {
		o.State = segmentsState(s.Segments, signalOutput, output.StateDrift, output.StateUnknown)
		if p.unscored.Load() > 0 {
			o.Sources = unscoredSources
		}
		s.Output = o
		p.m.publishOutput(o)
	}
	if l := r.latency; l != nil {
		l.State = segmentsState(s.Segments, signalLatency, latency.StateAnomalous, latency.StateUnknown)
		s.Latency = l
		p.m.publishLatency(l)
	}
	if p.prec != nil {
		r := pick(advance, p.prec.Evaluate, p.prec.Peek)(now)
		s.Precision = &r
		p.m.publishPrecision(&r)
	}
	p.last.Store(s)
	return s
}

// unscoredSources is the Sources note of the confidence and output signals
// once Messages API responses were served: they carry no logprobs, so
// those signals see only the other APIs' responses. Shared, never
// modified.
var unscoredSources = map[string]string{string(exchange.OpMessages): "no logprobs in the Messages API"}

// PinBaseline pins the current windows as every signal's reference, here
// and, through the shared store, on every replica.
func (p *Pipeline) PinBaseline(ctx context.Context) error {
	now := p.now()
	err := p.pinAt(now) // an error may concern one signal: the others are pinned
	if p.share != nil {
		if serr := p.share.Pin(ctx, now); serr != nil {
			p.log.Warn("baseline pinned here but not shared with other replicas", "err", serr)
		}
	}
	p.Evaluate()
	return err
}

// pinAt pins the windows as of at.
func (p *Pipeline) pinAt(at time.Time) error {
	if len(p.fleet) == 0 {
		return errors.New("every signal is disabled")
	}
	var err error
	for _, m := range p.fleet {
		// An error may concern one signal (input drift's window too
		// small): the others are pinned.
		err = errors.Join(err, m.pin(at))
	}
	p.segs.pin(at)
	return err
}

// Confidence is the confidence signal with the calibration of its
// confidences against feedback labels.
type Confidence struct {
	confidence.Decay
	Calibration calibrate.Report `json:"calibration"`
}

// Signals is the picture /admin/signals shows. A nil signal is disabled
// and shows as {"state": "unknown"}.
type Signals struct {
	Window     Window
	Evaluated  time.Time
	Drift      *inputdrift.Result
	Confidence *Confidence
	Latency    *latency.Result
	Output     *output.Output
	Precision  *precision.Result
	// Segments are the signals per model, worst first.
	Segments []Segment
	// Thresholds are the alert thresholds in force, per series, as of the
	// last alert period.
	Thresholds []alert.Threshold
}

// unknownSignal is how a disabled signal shows in JSON.
var unknownSignal = json.RawMessage(`{"state":"unknown"}`)

// MarshalJSON writes s with each disabled signal as {"state": "unknown"}.
func (s *Signals) MarshalJSON() ([]byte, error) {
	segs := s.Segments
	if segs == nil {
		segs = []Segment{}
	}
	return json.Marshal(struct {
		Window     Window            `json:"window"`
		Evaluated  time.Time         `json:"evaluated"`
		Drift      any               `json:"drift"`
		Confidence any               `json:"confidence"`
		Latency    any               `json:"latency"`
		Output     any               `json:"output"`
		Precision  any               `json:"precision"`
		Segments   []Segment         `json:"segments"`
		Thresholds []alert.Threshold `json:"thresholds"`
	}{s.Window, s.Evaluated, orUnknown(s.Drift), orUnknown(s.Confidence), orUnknown(s.Latency), orUnknown(s.Output), orUnknown(s.Precision), segs, s.Thresholds})
}

func orUnknown[T any](v *T) any {
	if v == nil {
		return unknownSignal
	}
	return v
}

// Window is the span the signals describe: the drift signal's current window.
type Window struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Requests int64     `json:"requests"`
}

// signalsMaxAge is how old an evaluation Signals may return: the admin
// API reflects traffic within about a second, whatever
// analyzers.interval is.
const signalsMaxAge = time.Second

// Signals returns the latest evaluation if it is under a second old, else
// evaluates now (without counting towards the alarm streaks).
func (p *Pipeline) Signals(context.Context) (*Signals, error) {
	if s := p.last.Load(); s != nil && p.now().Sub(s.Evaluated) < signalsMaxAge {
		return s, nil
	}
	return p.peek(), nil
}

// SegmentJSON is the segment that model's requests are counted in, as
// JSON, for GET /admin/signals?model=NAME: its own, or "other" when it has
// none; ok is false when no request of any model was seen yet.
func (p *Pipeline) SegmentJSON(ctx context.Context, model string) (b []byte, ok bool, err error) {
	s, err := p.Signals(ctx)
	if err != nil {
		return nil, false, err
	}
	name := p.segs.reg.Segment(time.Time{}, model, false)
	for i := range s.Segments {
		if s.Segments[i].Model == name {
			b, err := json.Marshal(&s.Segments[i])
			return b, err == nil, err
		}
	}
	return nil, false, nil
}

// SignalsJSON is Signals as JSON, for GET /admin/signals.
func (p *Pipeline) SignalsJSON(ctx context.Context) ([]byte, error) {
	s, err := p.Signals(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s)
}
