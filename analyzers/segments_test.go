package analyzers

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
)

// fleet is a gateway's view of two simulated models on a fake clock: each
// request goes to its model's simulator and then to the pipeline as the
// dispatcher hands it over.
type fleet struct {
	t    *testing.T
	p    *Pipeline
	rng  *rand.Rand
	sims map[string]*sim.Server
	now  time.Time
}

// newFleet serves "big" (confidence 0.9) and "small" (0.55) from
// simulators seeded with seed, behind a pipeline of compressed windows:
// 5 s buckets, 2 min current windows of 100 responses, 10 min references,
// evaluated every 10 s and alerting every 30 s.
func newFleet(t *testing.T, seed uint64) *fleet {
	cfg := config.Default()
	a := &cfg.Analyzers
	a.Bucket, a.Window, a.Reference, a.MinRequests, a.Interval = 5*time.Second, 2*time.Minute, 10*time.Minute, 100, 10*time.Second
	cfg.Alerts.Period = 30 * time.Second
	f := &fleet{t: t, rng: rand.New(rand.NewPCG(seed, 7)), sims: map[string]*sim.Server{},
		now: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	for model, conf := range map[string]float64{"big": 0.9, "small": 0.55} {
		k := sim.DefaultKnobs()
		k.Confidence, k.TTFT, k.ITL = conf, 0, 0
		f.sims[model] = sim.New(sim.Options{Model: model, Seed: int64(seed), Knobs: k})
	}
	p, err := New(Options{Config: *a, Alerts: cfg.Alerts, Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// run sends rps requests a second for d, a share big of them to "big",
// evaluating every interval and alerting every period as Pipeline.Run
// does; each alert period's alerts go to seen.
func (f *fleet) run(d time.Duration, rps, big float64, seen func([]alert.Alert)) {
	end := f.now.Add(d)
	interval, period := f.p.cfg.Interval, f.p.alertPeriod
	nextEval, nextAlert := f.now.Truncate(interval).Add(interval), f.now.Truncate(period).Add(period)
	for f.now.Before(end) {
		f.now = f.now.Add(time.Duration(f.rng.ExpFloat64() / rps * float64(time.Second)))
		for !f.now.Before(nextEval) {
			f.p.Evaluate()
			nextEval = nextEval.Add(interval)
		}
		for !f.now.Before(nextAlert) {
			f.p.ObserveAlerts(f.t.Context())
			if seen != nil {
				seen(f.p.alerts.Alerts())
			}
			nextAlert = nextAlert.Add(period)
		}
		model := "small"
		if f.rng.Float64() < big {
			model = "big"
		}
		f.send(model)
	}
}

// send makes one chat request of model that ends now.
func (f *fleet) send(model string) {
	body := fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"user","content":"question %d about things"}],"max_tokens":8,"logprobs":true}`,
		model, f.rng.IntN(1000))
	rec := httptest.NewRecorder()
	f.sims[model].Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		f.t.Fatalf("simulator %s answered %d: %s", model, rec.Code, rec.Body)
	}
	lat := 100*time.Millisecond + time.Duration(f.rng.IntN(50))*time.Millisecond
	r := &exchange.Request{Route: "/v1/chat/completions", Operation: exchange.OpChat, Model: model, Backend: "be-" + model,
		Start: f.now.Add(-lat), Body: body}
	f.p.OnPrompt(r.Start, r.Operation, r.Body)
	f.p.OnRequest(r)
	f.p.OnResponse(r, &exchange.Response{Status: 200, Latency: lat, Body: rec.Body.Bytes(), PromptTokens: 6, CompletionTokens: 8})
}

// setConfidence sets model's simulator's confidence.
func (f *fleet) setConfidence(model string, c float64) {
	k := f.sims[model].Knobs()
	k.Confidence = c
	f.sims[model].SetKnobs(k)
}

// quality are the rules that judge what a model answers.
var quality = []string{alert.RuleConfidenceDrop, alert.RulePerplexity}

// TestMixChangeIsNoDecay: 80 % of the traffic to the confident model,
// baseline pinned, then 20 %: the fleet's mean logprob falls by far more
// than a decay's minimum, yet no model changed, so neither the confidence
// nor the output signal alarms or alerts, in three seeds. With the fleet's
// own verdicts (before segments) the drop alarmed in every seed.
func TestMixChangeIsNoDecay(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, seed+1)
			f.run(15*time.Minute, 5, 0.8, nil) // the perplexity band needs 10 complete minutes
			if err := f.p.PinBaseline(t.Context()); err != nil {
				t.Fatal(err)
			}
			var alerted []alert.Alert
			f.run(12*time.Minute, 5, 0.2, func(as []alert.Alert) {
				for _, a := range as {
					if slices.Contains(quality, a.Rule) && a.State != alert.Resolved {
						alerted = append(alerted, a)
					}
				}
			})
			s := f.p.Evaluate()
			if d := s.Confidence; d == nil || d.State != confidence.StateOK || float64(d.Drop) < 0.1 {
				t.Errorf("fleet confidence %+v, want state ok with the mix's drop (> 10%%) in its figures", d)
			}
			if o := s.Output; o == nil || o.State != confidence.StateOK {
				t.Errorf("fleet output %+v, want ok", o)
			}
			for _, g := range s.Segments {
				if g.Model != "big" && g.Model != "small" {
					continue
				}
				if g.State != segmentOK {
					t.Errorf("segment %s: state %s (alarms %v), want ok", g.Model, g.State, g.Alarms)
				}
			}
			if len(alerted) > 0 {
				t.Errorf("quality alerts after a mix change: %+v", alerted)
			}
		})
	}
}

// TestSmallModelDecayNamed: 90 % big, 10 % small; small's confidence
// falls from 0.55 to 0.40. Its segment alarms and VigilConfidenceDecay
// fires labelled model="small", within as many alert periods as a fleet of
// small alone at that traffic needs (checked on one), and big stays quiet.
func TestSmallModelDecayNamed(t *testing.T) {
	periods := func(share float64, rps float64) int {
		f := newFleet(t, 1)
		f.run(15*time.Minute, rps, 1-share, nil)
		if err := f.p.PinBaseline(t.Context()); err != nil {
			t.Fatal(err)
		}
		f.setConfidence("small", 0.40)
		n, fired := 0, -1
		f.run(10*time.Minute, rps, 1-share, func(as []alert.Alert) {
			n++
			for _, a := range as {
				if a.Rule != alert.RuleConfidenceDrop || a.State != alert.Firing {
					continue
				}
				if a.Labels["model"] != "small" {
					t.Errorf("confidence alert %+v, want only model small's", a)
				}
				if fired < 0 {
					fired = n
				}
			}
		})
		if fired < 0 {
			t.Fatalf("share %.0f%%: VigilConfidenceDecay{model=small} not fired in %d periods; segments %+v", share*100, n, f.p.Evaluate().Segments)
		}
		return fired
	}
	mixed := periods(0.1, 20)
	alone := periods(1, 2) // small's own traffic, alone
	t.Logf("fired after %d alert periods in the mixed fleet, %d alone", mixed, alone)
	if mixed > alone+1 {
		t.Errorf("the mixed fleet took %d periods, the model alone %d", mixed, alone)
	}
}

// TestModelsAlertApart: small's decay fires its alert; big's decay, while
// small's still fires, fires big's own, not silenced or hidden by it:
// the silence and the series go by label set.
func TestModelsAlertApart(t *testing.T) {
	f := newFleet(t, 2)
	f.run(15*time.Minute, 20, 0.5, nil)
	if err := f.p.PinBaseline(t.Context()); err != nil {
		t.Fatal(err)
	}
	firing := func() map[string]alert.State {
		out := map[string]alert.State{}
		for _, a := range f.p.alerts.Alerts() {
			if a.Rule == alert.RuleConfidenceDrop {
				out[a.Labels["model"]] = a.State
			}
		}
		return out
	}
	f.setConfidence("small", 0.40)
	f.run(5*time.Minute, 20, 0.5, nil)
	if got := firing(); got["small"] != alert.Firing || got["big"] != "" {
		t.Fatalf("after small's decay: confidence alerts %v, want small firing alone", got)
	}
	f.setConfidence("big", 0.7)
	f.run(5*time.Minute, 20, 0.5, nil)
	if got := firing(); got["small"] != alert.Firing || got["big"] != alert.Firing {
		t.Errorf("after big's decay too: confidence alerts %v, want both firing", got)
	}
}
