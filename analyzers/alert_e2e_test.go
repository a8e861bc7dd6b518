package analyzers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/test/alertmanagertest"
)

// TestDegradationAlerts: the simulator answers for two stable hours of
// simulated time, then its confidence falls 10%. The pipeline's alert engine
// (5-minute periods, adaptive thresholds) fires confidence_drop, and the
// alert reaches a real Alertmanager; the stable hours raise nothing.
func TestDegradationAlerts(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	am := alertmanagertest.Start(t)
	f := newFeeder(t, config.Default().Analyzers, 2)
	// Simulated time ends about now: Alertmanager judges startsAt and
	// endsAt by its own clock.
	f.now = time.Now().Add(-2*time.Hour - 15*time.Minute).Truncate(time.Minute)
	cfg := config.Default()
	p, err := New(Options{Config: f.p.cfg, Now: func() time.Time { return f.now },
		Alerts: cfg.Alerts, Notifier: &alert.AlertmanagerNotifier{URL: am.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.alerts.Run(ctx)

	firing := func() (rules, names []string) {
		for _, a := range p.alerts.Alerts() {
			if a.State == "firing" {
				rules, names = append(rules, a.Rule), append(names, a.Name)
			}
		}
		return rules, names
	}
	period := cfg.Alerts.Period
	// run sends traffic for d, evaluating and observing every period, and
	// stops early once every rule in want has fired; it returns when each
	// fired, from the start of the run.
	run := func(d time.Duration, want ...string) map[string]time.Duration {
		start, next := f.now, f.now.Add(period)
		at := map[string]time.Duration{}
		for end := f.now.Add(d); f.now.Before(end) && (len(want) == 0 || len(at) < len(want)); {
			f.send()
			if !f.now.Before(next) {
				next = next.Add(period)
				p.Evaluate()
				p.ObserveAlerts(ctx)
				rules, _ := firing()
				for _, r := range want {
					if _, ok := at[r]; !ok && slices.Contains(rules, r) {
						at[r] = f.now.Sub(start)
					}
				}
			}
		}
		return at
	}
	run(2 * time.Hour)
	if rules, _ := firing(); len(rules) != 0 {
		t.Fatalf("stable hours fired %v", rules)
	}
	f.knobs(func(k *sim.Knobs) { k.Confidence *= 0.9 })
	// Confidence decay and, since the perplexity rises with it, output
	// drift (its ±3σ band for 5 minutes).
	after := run(time.Hour, alert.RuleConfidenceDrop, alert.RulePerplexity)
	rules, names := firing()
	for _, r := range []string{alert.RuleConfidenceDrop, alert.RulePerplexity} {
		if _, ok := after[r]; !ok {
			t.Errorf("%s did not fire in the hour after the confidence fell 10%%: %+v", r, p.alerts.Alerts())
		}
	}
	if !slices.Contains(rules, alert.RuleConfidenceDrop) {
		t.FailNow()
	}
	t.Logf("fired %v (%v) after the confidence fell 10%%: %v", rules, names, after)
	want := names[slices.Index(rules, alert.RuleConfidenceDrop)]
	var got []string
	testutil.WaitFor(t, "Alertmanager to have "+want, func() bool {
		got = got[:0]
		for _, a := range am.Alerts(t) {
			if l, ok := a["labels"].(map[string]any); ok {
				got = append(got, fmt.Sprint(l["alertname"]))
			}
		}
		return slices.Contains(got, want)
	})
}
