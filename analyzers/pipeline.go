// Package analyzers turns what the gateway observes into Vigil's signals.
// A Pipeline receives requests, stream events and responses from the
// gateway's dispatcher goroutine (never from a client's request path),
// feeds the signal monitors and evaluates them on an interval.
package analyzers

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/drift"
	"github.com/vigil-gw/vigil/config"
)

// Options configure a Pipeline. Config is required.
type Options struct {
	Config config.Analyzers
	// Registry receives the signal metrics. Nil: they are not exported.
	Registry prometheus.Registerer
	// Log receives warnings. Nil: slog.Default().
	Log *slog.Logger
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Seed seeds the samplers' random keys. Zero: a fixed default.
	Seed uint64
}

// A Pipeline is the analyzers behind one gateway. Its On* methods are called
// by one goroutine (the gateway's dispatcher); Run, Signals and PinBaseline
// may be called concurrently with them.
type Pipeline struct {
	log   *slog.Logger
	now   func() time.Time
	drift *drift.Monitor // nil when disabled
	every time.Duration
	m     *metrics
	last  atomic.Pointer[drift.Result]
}

// New builds a pipeline from validated options.
func New(o Options) (*Pipeline, error) {
	p := &Pipeline{log: o.Log, now: o.Now, every: o.Config.Interval}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.now == nil {
		p.now = time.Now
	}
	if o.Config.Drift.Enabled {
		seed := o.Seed
		if seed == 0 {
			seed = 0x5eed
		}
		d, err := drift.New(o.Config, seed)
		if err != nil {
			return nil, err
		}
		p.drift = d
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	p.m = newMetrics(reg)
	return p, nil
}

// OnRequest is part of the gateway's Observer; prompts are analysed when
// their response ends, once the backend's token count is known.
func (p *Pipeline) OnRequest(*Request) {}

// OnEvent is part of the gateway's Observer.
func (p *Pipeline) OnEvent(*Request, []byte) {}

// OnResponse records the prompt's features (with the backend's prompt
// token count when it reported one) in the drift windows.
func (p *Pipeline) OnResponse(r *Request, resp *Response) {
	if p.drift == nil || !promptOperation(r.Operation) {
		return
	}
	f, err := drift.Extract(r.Body)
	if err != nil {
		p.m.featureErrors.Inc()
		return
	}
	if resp.PromptTokens > 0 {
		f.Vector[drift.FeatTokens] = float64(resp.PromptTokens)
	}
	p.drift.Add(r.Start, &f)
}

func promptOperation(op string) bool {
	switch op {
	case "chat", "text_completion", "generate", "embeddings":
		return true
	}
	return false
}

// Run evaluates the signals every interval until ctx is done.
func (p *Pipeline) Run(ctx context.Context) error {
	if p.drift == nil {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.Evaluate()
		}
	}
}

// Evaluate runs one evaluation of every signal now, publishes it and
// returns the drift result (zero when drift is disabled).
func (p *Pipeline) Evaluate() drift.Result {
	if p.drift == nil {
		return drift.Result{}
	}
	res := p.drift.Evaluate(p.now())
	p.last.Store(&res)
	p.m.publishDrift(&res)
	return res
}

// PinBaseline pins the current drift window as the reference.
func (p *Pipeline) PinBaseline(context.Context) error {
	if p.drift == nil {
		return errDriftDisabled
	}
	if err := p.drift.Pin(p.now()); err != nil {
		return err
	}
	p.Evaluate()
	return nil
}

// Signals is the picture /admin/signals shows.
type Signals struct {
	Window     Window  `json:"window"`
	Drift      any     `json:"drift"`
	Confidence unknown `json:"confidence"`
	Latency    unknown `json:"latency"`
	Output     unknown `json:"output"`
	Precision  unknown `json:"precision"`
}

// Window is the span the signals describe: the drift signal's current window.
type Window struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Requests int64     `json:"requests"`
}

// unknown is the state of a signal that is not computed yet.
type unknown struct {
	State string `json:"state"`
}

// Signals returns the latest evaluation.
func (p *Pipeline) Signals(context.Context) (any, error) {
	u := unknown{State: drift.StateUnknown}
	s := Signals{Drift: u, Confidence: u, Latency: u, Output: u, Precision: u}
	if res := p.last.Load(); res != nil {
		s.Drift = res
		s.Window = Window{Start: res.CurrentStart, End: res.Evaluated, Requests: res.Current}
	} else {
		s.Window = Window{Start: p.now().UTC(), End: p.now().UTC()}
	}
	return s, nil
}
