package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/app"
	"github.com/vigil-gw/vigil/sim"
)

// The demo's models. demo-model is served by sim-a, sim-b and sim-a-int8,
// with the LoRA adapter sql-lora loaded on sim-a (vLLM's --lora-modules:
// the adapter is a model of its own to clients and to the analyzers);
// demo-small, a smaller and less confident model, by sim-small.
const (
	demoModel  = "demo-model"
	loraModel  = "sql-lora"
	SmallModel = "demo-small"
)

// Request rates of the demo traffic when --rps is not given: a story needs
// enough requests for its compressed windows to fill within seconds.
const (
	// PlainRPS is the rate without a scenario.
	PlainRPS = 2
	// ScenarioRPS is the rate of a scenario: each model's segment needs
	// analyzers.min_requests responses with logprobs (seven requests in
	// ten have them) within a window, and demo-small, the least used,
	// gets a fifth of the requests (NormalModels).
	ScenarioRPS = 20
)

// Options configure Run.
type Options struct {
	Listen   string        // gateway address
	Duration time.Duration // stop after this long; 0: run until ctx is done
	RPS      float64       // demo traffic; 0: none
	// Scenario is ScenarioIncident or ScenarioNone; Loop tells it again
	// and again until stopped. (The fault-isolation matrix is a scenario
	// of `vigil demo` too, told by internal/matrix with this package's
	// parts.)
	Scenario string
	Loop     bool
	// Alertmanager is an Alertmanager base URL to send alerts to; empty:
	// none.
	Alertmanager string
	Out          io.Writer    // the intro, the story and its summary
	Log          *slog.Logger // the gateway's log
	Access       *slog.Logger // nil: no access log
	Version      string       // the build's version, reported by the tracer
}

// Run runs four simulated backends serving two models and a LoRA adapter,
// a gateway in front of them with in-memory state and demo traffic and,
// unless the scenario is
// ScenarioNone, tells a scripted incident (scenario.go) until ctx is done
// or the duration passes. The options are validated by the caller (the
// flags of `vigil demo`).
func Run(ctx context.Context, o Options) error {
	var sc *scenario
	if o.Scenario == ScenarioIncident {
		sc = newIncident(1, false)
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	do := Setup{Listen: o.Listen, RPS: o.RPS, Log: o.Log, Access: o.Access, Alertmanager: o.Alertmanager,
		Version: o.Version}
	if sc != nil {
		do.Timings = &sc.timings
	}
	d, err := New(do)
	if err != nil {
		return err
	}
	// The gateway's address is printed once it routes each model to the
	// backends that serve it: a client that starts at once is then
	// answered, not given a 404 by a backend of another model.
	d.ready = func() { d.printIntro(o.Out) }
	var story func(context.Context) error
	if sc != nil {
		story = func(ctx context.Context) error { return tellStories(ctx, sc, d, o.Out, o.Loop) }
	}
	return d.Serve(ctx, story)
}

// tellStories tells sc once, or until ctx is done with loop, printing a
// summary after each telling (an interrupted one's too, when a phase
// began). An interruption is no error.
func tellStories(ctx context.Context, sc *scenario, d *Demo, out io.Writer, loop bool) error {
	for i := 1; ; i++ {
		res, err := sc.tell(ctx, d, out, i)
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			if res != nil && len(res.phases) > 0 {
				printSummary(out, res)
			}
			return nil
		}
		printSummary(out, res)
		if !loop {
			fmt.Fprintln(out, "\nThe story is over; the gateway keeps serving normal traffic (Ctrl-C stops).")
			return nil
		}
	}
}

// Setup configures New.
type Setup struct {
	Listen string  // gateway address
	RPS    float64 // demo traffic; 0: none
	Log    *slog.Logger
	Access *slog.Logger // nil: no access log
	// Timings, when set, compress the analyzers' and alerts' timings for a
	// scenario and make the demo run its alert receiver; nil: the plain
	// demo's settings.
	Timings *Timings
	// Alertmanager is an Alertmanager base URL to send alerts to; empty:
	// none.
	Alertmanager string
	Version      string // the build's version, reported by the tracer
	// Seed seeds the simulators, the analyzers' samplers and where the
	// traffic starts in its cycle; 0 or 1: the demo's usual run.
	Seed int64
	// Redis is the URL of the Redis the gateway's state goes to; empty:
	// in-memory state.
	Redis string
	// OTLP is the host:port of a plaintext OTLP/gRPC collector the spans
	// go to; empty: none unless OTEL_EXPORTER_OTLP_* says where.
	OTLP string
	// OutOfService counts a backend failing its active health checks as
	// out (SigEjection), not only a passively ejected one.
	OutOfService bool
	// Alike gives sim-small, too, the speed of demo-model's replicas
	// (which are alike always; sim-a-int8 keeps its noise, sim-small its
	// model's confidence): the matrix's faults then move only what they
	// inject, not which backend a request lands on. The models stay
	// unlike: a request's model, not the balancer, picks between them.
	Alike bool
}

// demoSim is one simulated backend of the demo and the knobs it starts with.
type demoSim struct {
	name, reference string
	model           string   // the base model it serves
	adapters        []string // the LoRA adapters it serves on top of model
	seed            int64
	srv             *sim.Server
	base            sim.Knobs // the knobs of normal operation
	ln              net.Listener
}

// Demo is the parts of `vigil demo`: simulators, gateway, traffic and, for
// a scenario, the built-in alert receiver. New makes them; Serve serves
// them until its context is done. The scenario reads and turns their knobs
// from its own goroutine; every part is safe for that.
type Demo struct {
	cfg     config.Config
	sims    []*demoSim
	app     *app.App
	ln      net.Listener // the gateway's
	base    string       // the gateway's URL
	rps     float64
	traffic *traffic  // nil when rps is 0
	recv    *receiver // nil without a scenario

	outOfService bool     // see Setup.OutOfService
	timings      *Timings // Setup.Timings
	// ready, when set, runs once the gateway has read every backend's
	// models (or given up waiting), before the traffic and the story.
	ready func()
	// infra is set when the gateway uses Redis or a collector: read then
	// watches the store's health and the spans dropped (infra.go).
	infra *infraWatch
}

// New opens every listener and builds the gateway; nothing serves
// until Serve. Whatever it opened before a failing step is closed again.
func New(o Setup) (_ *Demo, err error) {
	d := &Demo{rps: o.RPS, outOfService: o.OutOfService, timings: o.Timings}
	seed := max(o.Seed, 1)
	var opened []io.Closer
	defer func() {
		if err != nil {
			for _, c := range opened {
				c.Close()
			}
		}
	}()
	// sim-a-int8 is sim-a's model "quantized": the same seed, a little
	// noise on its logprobs; it is shadow-compared against sim-a (signal 5).
	// sim-b is another replica of demo-model, as fast and as sure of its
	// tokens as sim-a: with unlike replicas demo-model's output and
	// latency would change whenever the balancer moved its requests
	// between them, as it does when the load changes (phase f changes the
	// load). sim-small is a smaller model: faster, less sure of its
	// tokens; no faster than a third of the others' time, though, or they
	// would read as slow beside it (backend_slow compares backends
	// whatever their model).
	a := demoKnobs(60*time.Millisecond, 15*time.Millisecond, 0.85)
	b, int8 := a, a
	small := demoKnobs(40*time.Millisecond, 10*time.Millisecond, SmallConfidence)
	if o.Alike {
		small = demoKnobs(a.TTFT, a.ITL, SmallConfidence)
	}
	int8.Noise = 0.05
	// sim-a-int8 shares sim-a's seed: the same model, quantized.
	d.sims = []*demoSim{
		{name: "sim-a", model: demoModel, adapters: []string{loraModel}, seed: 2*seed - 1, base: a},
		{name: "sim-b", model: demoModel, seed: 2 * seed, base: b},
		{name: "sim-a-int8", model: demoModel, reference: "sim-a", seed: 2*seed - 1, base: int8},
		{name: "sim-small", model: SmallModel, seed: 1000 + seed, base: small},
	}
	cfg := config.Default()
	cfg.Listen = o.Listen
	// The demo runs on a laptop, behind no load balancer: Ctrl-C stops it
	// without the delay that lets one take a replica out of rotation.
	cfg.Limits.ShutdownDelay = 0
	cfg.Limits.ShutdownGrace = 5 * time.Second
	// The demo needs no collector; set OTEL_EXPORTER_OTLP_ENDPOINT to send
	// its spans to one (e.g. Jaeger's OTLP port).
	var getenv func(string) string
	switch {
	case o.OTLP != "":
		// This gateway's own collector, whatever the process environment
		// says: the matrix runs several demos in one process. A short
		// export timeout makes a collector outage show within seconds.
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + o.OTLP, "OTEL_EXPORTER_OTLP_INSECURE": "true",
			"OTEL_EXPORTER_OTLP_TIMEOUT": "2000", "OTEL_SERVICE_NAME": "vigil-demo"}
		getenv = func(k string) string { return env[k] }
	case os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "":
		cfg.Tracing.Exporter = "none"
	}
	if o.Seed > 1 {
		cfg.Analyzers.Seed += o.Seed - 1
	}
	if o.Redis != "" {
		cfg.State.Redis.URL = o.Redis
	}
	// Ask for logprobs on a share of the demo's requests, so that the
	// confidence signals have data.
	cfg.Analyzers.Confidence.Inject.SampleRatio = 0.5
	// Compare every request sim-a-int8 serves (production samples 5%), so
	// that the precision signal has its tokens within a minute at 2 req/s.
	cfg.Analyzers.Precision.SampleRatio = 1
	// Name the words of a change of subject (phase h), not their hashes:
	// the demo's prompts are its own, and showing what a drift is about
	// is the point. In production this stays off unless chosen.
	cfg.Analyzers.Drift.Text.Explain = true
	cfg.Health.Interval = 2 * time.Second
	// sim-b's 500s (phase e) last 30 s: a back-off capped at 8 s has it
	// probed, and back, within seconds of their end.
	cfg.Health.MaxBackoff = 8 * time.Second
	if o.Timings != nil {
		o.Timings.apply(&cfg)
		if d.recv, err = newReceiver(); err != nil {
			return nil, err
		}
		opened = append(opened, d.recv.ln)
		cfg.Alerts.WebhookURL = d.recv.URL()
	}
	cfg.Alerts.AlertmanagerURL = o.Alertmanager
	for _, s := range d.sims {
		if s.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		opened = append(opened, s.ln)
		s.srv = sim.New(sim.Options{Model: s.model, Seed: s.seed, Knobs: s.base, LoRAModules: s.adapters})
		s.base = s.srv.Knobs() // normalized, as SetKnobs will store it
		// No models list: the gateway reads each backend's /v1/models
		// (it asks the backends whose metrics it reads), routes each
		// model to the backends that list it and learns the adapter's
		// base model from its "parent".
		url := "http://" + s.ln.Addr().String()
		cfg.Backends = append(cfg.Backends, config.Backend{
			Name: s.name, URL: url, Kind: "openai", Metrics: url + "/metrics", Weight: 100,
			Reference: s.reference,
		})
	}
	if err := cfg.ValidateServe(); err != nil {
		return nil, fmt.Errorf("invalid demo configuration:\n%w", err)
	}
	d.cfg = cfg
	if d.app, err = app.Build(cfg, app.Options{Log: o.Log, AccessLog: o.Access, Version: o.Version, Getenv: getenv}); err != nil {
		return nil, err
	}
	if d.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		d.app.Close()
		return nil, fmt.Errorf("gateway listen: %w", err)
	}
	d.base = "http://" + d.ln.Addr().String()
	if o.RPS > 0 {
		d.traffic = newTraffic(d.base, o.RPS)
		// Each seed starts the traffic's cycle elsewhere.
		d.traffic.start = int(7 * (seed - 1))
	}
	if o.Redis != "" || o.OTLP != "" {
		d.infra = &infraWatch{redis: o.Redis != "", otlp: o.OTLP != ""}
	}
	return d, nil
}

// sim returns the simulator called name; nil when there is none.
func (d *Demo) sim(name string) *demoSim {
	for _, s := range d.sims {
		if s.name == name {
			return s
		}
	}
	return nil
}

// printIntro prints the demo's URLs and how to use them.
func (d *Demo) printIntro(w io.Writer) {
	var sims []string
	for i, s := range d.sims {
		sims = append(sims, s.name+" "+d.cfg.Backends[i].URL)
	}
	fmt.Fprintf(w, `Vigil demo: a gateway in front of four simulated vLLM backends (in-memory state) serving
two models and a LoRA adapter: %[2]s on sim-a, sim-b and sim-a-int8 (shadow-compared against
sim-a for precision divergence), the adapter %[3]s on sim-a, %[4]s on sim-small.

  gateway     %[1]s
  dashboard   %[1]s/dashboard
  metrics     %[1]s/metrics
  signals     %[1]s/admin/signals   (one model's: %[1]s/admin/signals?model=%[4]s)
  alerts      %[1]s/admin/alerts   (deliveries: %[1]s/admin/notifications)
  backends    %[1]s/admin/backends   (%[5]s)

Point any OpenAI or Anthropic client at it; only the base URL changes:
  export OPENAI_BASE_URL=%[1]s/v1 OPENAI_API_KEY=unused
  export ANTHROPIC_BASE_URL=%[1]s ANTHROPIC_API_KEY=unused
  curl -s %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[2]s","messages":[{"role":"user","content":"Hello"}]}'
  curl -s %[1]s/v1/responses -H 'Content-Type: application/json' -d '{"model":"%[3]s","input":"Hello"}'

Sending %.1[6]f requests/s of demo traffic (%[7]s; %[8]s). Ctrl-C stops.
`, d.base, demoModel, loraModel, SmallModel, strings.Join(sims, ", "), d.rps, NormalModels, mixNote)
}

// Serve serves the simulators, the alert receiver, the gateway and the
// traffic until ctx is done, and runs story (when not nil) beside them.
// A story that returns nil leaves the rest running; one that fails stops
// everything. The simulators and the receiver stop last, once the gateway
// has shut down: its final evaluation's resolutions still reach the
// receiver.
func (d *Demo) Serve(ctx context.Context, story func(context.Context) error) error {
	var g errgroup.Group
	backCtx, stopBack := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBack()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, s := range d.sims {
		h := s.srv.Handler()
		g.Go(func() error { return app.ServeHandler(backCtx, s.ln, h) })
	}
	if d.recv != nil {
		g.Go(func() error { return app.ServeHandler(backCtx, d.recv.ln, d.recv) })
	}
	g.Go(func() error {
		defer stopBack()
		defer cancel() // a gateway that failed ends the demo
		return d.app.Serve(ctx, d.ln)
	})
	ready := make(chan struct{})
	g.Go(func() error {
		d.awaitModels(ctx)
		if d.ready != nil {
			d.ready()
		}
		close(ready)
		if d.traffic == nil {
			return nil
		}
		return d.traffic.run(ctx)
	})
	if story != nil {
		g.Go(func() error {
			select {
			case <-ready:
			case <-ctx.Done():
				return nil
			}
			err := story(ctx)
			if err != nil {
				cancel()
			}
			return err
		})
	}
	return g.Wait()
}

// modelsWait bounds awaitModels: the gateway's first scrape round reads
// the lists at once, within balancer.scrape_interval (2 s).
const modelsWait = 10 * time.Second

// awaitModels waits, at most modelsWait, until the gateway has read every
// backend's model list: until then a backend serves every model as far as
// the gateway knows, and a request for demo-small could go to a server of
// demo-model and get its 404.
func (d *Demo) awaitModels(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	deadline := time.Now().Add(modelsWait)
	for time.Now().Before(deadline) {
		read := true
		for _, b := range d.app.Gateway().Pool().Backends() {
			read = read && b.DiscoveredModels() != nil
		}
		if read {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func demoKnobs(ttft, itl time.Duration, confidence float64) sim.Knobs {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.Confidence = ttft, itl, confidence
	return k
}

// PromptMix is what the demo traffic asks: an optional system prompt and
// user prompts taken in turn.
type PromptMix struct {
	system  string // empty: no system message
	prompts []string
}

// NormalMix is the demo's everyday traffic: short English questions.
var NormalMix = &PromptMix{prompts: []string{
	"Summarise the incident report in three bullet points.",
	"Translate 'good morning' into French and German.",
	"Write a haiku about load balancers.",
	"What is the capital of Australia?",
	"Explain KV-cache in one paragraph.",
}}

// TopicMix asks what NormalMix asks, about cooking: each prompt has the
// length, letters, spaces and punctuation of its counterpart (the same
// place in the list), so every shape feature stays where it was and only
// the content test can tell the change of subject (phase h).
var TopicMix = &PromptMix{prompts: []string{
	"Summarise the sourdough recipe in three simple steps.",
	"Translate 'fresh basil' into French and Italian.",
	"Write a haiku about sweet tomatoes.",
	"What is the origin of croissants?",
	"Explain stir-fry in one paragraph.",
}}

// SmallConfidence is demo-small's confidence: a smaller model is less
// sure of its tokens, so that a change in the mix of models moves the
// fleet's mean confidence (phase f).
const SmallConfidence = 0.55

// ModelMix is how the demo traffic spreads its requests over the models:
// a cycle of slots, each model taking as many as its weight, spread
// evenly (smooth weighted round robin). It is read-only once made.
type ModelMix struct {
	weights []modelWeight
	slots   []string // the model of each request of the cycle
}

// modelWeight is one model's weight in a ModelMix.
type modelWeight struct {
	model  string
	weight int
}

// newModelMix returns the mix of ws.
func newModelMix(ws ...modelWeight) *ModelMix {
	m := &ModelMix{weights: ws}
	total := 0
	for _, w := range ws {
		total += w.weight
	}
	cur := make([]int, len(ws))
	for range total {
		best := 0
		for i, w := range ws {
			cur[i] += w.weight
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		m.slots = append(m.slots, ws[best].model)
	}
	return m
}

// Share is model's share of the requests.
func (m *ModelMix) Share(model string) float64 {
	n := 0
	for _, s := range m.slots {
		if s == model {
			n++
		}
	}
	return float64(n) / float64(len(m.slots))
}

// String lists each model's share: "demo-model 52%, sql-lora 26%, ...".
func (m *ModelMix) String() string {
	parts := make([]string, len(m.weights))
	for i, w := range m.weights {
		parts[i] = fmt.Sprintf("%s %.0f%%", w.model, 100*m.Share(w.model))
	}
	return strings.Join(parts, ", ")
}

// The demo traffic's spreads over the models. NormalModels is the
// everyday one: about half the requests to demo-model, a quarter to its
// adapter, a fifth to demo-small, the least used. ShiftedModels is
// phase (f)'s: demo-model and demo-small swap their shares.
var (
	NormalModels  = newModelMix(modelWeight{demoModel, 12}, modelWeight{loraModel, 6}, modelWeight{SmallModel, 5})
	ShiftedModels = newModelMix(modelWeight{demoModel, 5}, modelWeight{loraModel, 6}, modelWeight{SmallModel, 12})
)

// servedModels are the models of the normal mix, most used first.
func servedModels() []string {
	out := make([]string, len(NormalModels.weights))
	for i, w := range NormalModels.weights {
		out[i] = w.model
	}
	return out
}

// traffic sends the demo's requests at a steady rate, spread over the
// models (ModelMix), each model's requests through the three analyzed
// APIs (apiSlots) in its own cycle of bodies, alternating streaming and
// non-streaming, with logprobs on every Responses request and on every
// other pair of chat requests; it counts how they ended, which model was
// asked and which backend answered (X-Vigil-Backend), and through which
// API. Its prompt and model mixes can change while it runs; Tally,
// setMix and setModels are safe for concurrent use with run.
type traffic struct {
	base   string
	rps    float64
	start  int // the first request's place in the cycles of models and bodies
	client *http.Client
	mix    atomic.Pointer[PromptMix]
	models atomic.Pointer[ModelMix]

	mu    sync.Mutex
	tally trafficTally
}

// api is an inference API the demo traffic speaks.
type api int

// The demo traffic's APIs.
const (
	apiChat      api = iota // OpenAI chat completions
	apiResponses            // OpenAI Responses
	apiMessages             // Anthropic Messages
	numAPIs
)

// apiPaths and apiNames are each API's route and its name in words.
var (
	apiPaths = [numAPIs]string{"/v1/chat/completions", "/v1/responses", "/v1/messages"}
	apiNames = [numAPIs]string{"chat completions", "Responses", "Messages"}
)

// apiSlots spreads the APIs over every 20 consecutive requests: 12 chat
// (60 %), 5 Responses (25 %), 3 Messages (15 %). Each API has even and odd
// slots, so that each streams some of its requests (the even ones), and
// the whole traffic still streams half.
var apiSlots = [20]api{
	apiChat, apiResponses, apiChat, apiMessages, apiChat,
	apiChat, apiResponses, apiChat, apiMessages, apiChat,
	apiResponses, apiChat, apiChat, apiMessages, apiChat,
	apiResponses, apiChat, apiChat, apiResponses, apiChat,
}

// mixNote says the traffic's share of each API, for the intro.
const mixNote = "60% chat completions, 25% Responses, 15% Messages"

// trafficTally counts the demo's requests: sent, answered 200, failed
// (another status or no answer), the 200s by the model asked and the
// backend that answered, and by the API they were sent through. The zero
// value is empty.
type trafficTally struct {
	Sent, OK, Failed int64
	Answers          map[answer]int64
	ByAPI            [numAPIs]int64
}

// answer is a model asked and the backend that answered.
type answer struct{ model, backend string }

// newTraffic returns traffic to the gateway at base, rps requests a second
// of the normal mixes.
func newTraffic(base string, rps float64) *traffic {
	t := &traffic{base: base, rps: rps, client: &http.Client{Timeout: 30 * time.Second}}
	t.mix.Store(NormalMix)
	t.models.Store(NormalModels)
	return t
}

// setMix makes the next requests ask from m.
func (t *traffic) setMix(m *PromptMix) { t.mix.Store(m) }

// setModels makes the next requests spread over the models as m does.
func (t *traffic) setModels(m *ModelMix) { t.models.Store(m) }

// Tally returns a copy of the counts so far.
func (t *traffic) Tally() trafficTally {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.tally
	c.Answers = maps.Clone(t.tally.Answers)
	if c.Answers == nil {
		c.Answers = map[answer]int64{}
	}
	return c
}

// sub returns the counts of a since b (a later tally of the same traffic).
func (a trafficTally) sub(b trafficTally) trafficTally {
	c := trafficTally{Sent: a.Sent - b.Sent, OK: a.OK - b.OK, Failed: a.Failed - b.Failed, Answers: map[answer]int64{}}
	for i := range c.ByAPI {
		c.ByAPI[i] = a.ByAPI[i] - b.ByAPI[i]
	}
	for k, v := range a.Answers {
		c.Answers[k] = v - b.Answers[k]
	}
	return c
}

// answered counts the 200s of model ("": every model) by backend ("":
// every backend).
func (a trafficTally) answered(model, backend string) int64 {
	var n int64
	for k, v := range a.Answers {
		if (model == "" || k.model == model) && (backend == "" || k.backend == backend) {
			n += v
		}
	}
	return n
}

// minShareRequests is the fewest answered requests a share is told of.
const minShareRequests = 20

// share is backend's share of the answered requests for model; NaN when
// fewer than minShareRequests were answered.
func (a trafficTally) share(backend, model string) float64 {
	all := a.answered(model, "")
	if all < minShareRequests {
		return math.NaN()
	}
	return float64(a.answered(model, backend)) / float64(all)
}

// modelShare is model's share of the answered requests; NaN when fewer
// than minShareRequests were answered.
func (a trafficTally) modelShare(model string) float64 {
	if a.OK < minShareRequests {
		return math.NaN()
	}
	return float64(a.answered(model, "")) / float64(a.OK)
}

// run sends requests until ctx is done and waits for those in flight.
func (t *traffic) run(ctx context.Context) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / t.rps))
	defer tick.Stop()
	var wg sync.WaitGroup // owns the request goroutines; waited for on return
	defer wg.Wait()
	sent := map[string]int{} // by model: its place in its own cycle of bodies
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		ms := t.models.Load()
		model := ms.slots[(t.start+i)%len(ms.slots)]
		a, body := t.body(model, t.start+sent[model])
		sent[model]++
		wg.Go(func() { t.send(ctx, model, a, body) })
	}
}

// body is the i-th request for model of the current mix and the API it is
// for (apiSlots): streaming every other request, 16 to 47 output tokens
// (ten lengths in turn);
// chat asks for logprobs on every other pair (the gateway injects them
// into a share of the rest), Responses always (the gateway injects none
// there), Messages never (the API has none). The prompt turns one further
// every 20 requests, so that every API asks every prompt of the mix.
// Everything but the prompt and its number repeats every 20 requests,
// and any 20 in a row ask every prompt alike: a window of 40 or 80 prompts (the
// compressed analyzers.min_requests) holds the same mix as any other, and
// its input-drift scores against a pinned window stay low. (Output
// lengths that repeated every 32 requests read as a PSI of 0.2–0.4 on
// max_tokens between one model's windows of 40 prompts, above the alert's
// floor of 0.1.)
func (t *traffic) body(model string, i int) (api, []byte) {
	m := t.mix.Load()
	a := apiSlots[i%len(apiSlots)]
	// Each request's prompt ends in its own number, of fixed width: the
	// simulators answer a prompt always alike (a pure function of seed
	// and text), so a few prompts sent again and again would make every
	// window's responses a handful of samples repeated, whose chance
	// differences the confidence tests take for many.
	user, _ := json.Marshal(fmt.Sprintf("%s (ref %06d)", m.prompts[(i+i/len(apiSlots))%len(m.prompts)], i%1000000))
	msgs := `{"role":"user","content":` + string(user) + `}`
	var sys []byte
	if m.system != "" {
		sys, _ = json.Marshal(m.system)
	}
	maxTokens, stream := 16+i%10*31/9, i%2 == 0
	switch a {
	case apiResponses:
		// The system prompt is the instructions; the messages are input
		// items. Nothing follows up on a response, so none is stored.
		instr := ""
		if sys != nil {
			instr = `"instructions":` + string(sys) + `,`
		}
		return a, fmt.Appendf(nil, `{"model":%q,%s"input":[%s],"max_output_tokens":%d,"stream":%t,"store":false,`+
			`"include":["message.output_text.logprobs"],"top_logprobs":3}`, model, instr, msgs, maxTokens, stream)
	case apiMessages:
		system := ""
		if sys != nil {
			system = `"system":` + string(sys) + `,`
		}
		return a, fmt.Appendf(nil, `{"model":%q,"max_tokens":%d,%s"messages":[%s],"stream":%t}`,
			model, maxTokens, system, msgs, stream)
	}
	lp := ""
	if i%4 < 2 {
		lp = `,"logprobs":true,"top_logprobs":3`
	}
	if sys != nil {
		msgs = `{"role":"system","content":` + string(sys) + `},` + msgs
	}
	return a, fmt.Appendf(nil, `{"model":%q,"messages":[%s],"max_tokens":%d,"stream":%t%s}`,
		model, msgs, maxTokens, stream, lp)
}

// send posts one request for model through API a and counts its outcome.
// Every API answers with the same statuses and X-Vigil-Backend; only the
// error bodies differ (Anthropic's shape on Messages), and they are not
// read.
func (t *traffic) send(ctx context.Context, model string, a api, body []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+apiPaths[a], bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if err != nil && ctx.Err() != nil {
		return // the demo stopped: no failure
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tally.Sent++
	if err != nil || resp.StatusCode != http.StatusOK {
		t.tally.Failed++
		return
	}
	t.tally.OK++
	t.tally.ByAPI[a]++
	if t.tally.Answers == nil {
		t.tally.Answers = map[answer]int64{}
	}
	t.tally.Answers[answer{model, resp.Header.Get("X-Vigil-Backend")}]++
}
