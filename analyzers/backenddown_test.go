package analyzers

import (
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// TestBackendDownReplacesErrorRate: a backend whose error rate fired and
// that is then taken out (ejected) sees no more requests. Once it has been
// out a whole alert period with no request, its error-rate alert resolves
// (with a notification) and VigilBackendDown fires instead, and stays
// firing as long as the backend is out; it resolves when the backend is
// back. A backend that is out but still answers requests keeps its error
// rate.
func TestBackendDownReplacesErrorRate(t *testing.T) {
	cfg := config.Default()
	cfg.Alerts.Consecutive = 1
	period := cfg.Alerts.Period
	now := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	healthy := map[string]bool{"a": true, "b": true}
	states := func() []exchange.BackendState {
		mu.Lock()
		defer mu.Unlock()
		return []exchange.BackendState{{Name: "a", Healthy: healthy["a"]}, {Name: "b", Healthy: healthy["b"]}}
	}
	setHealthy := func(name string, v bool) {
		mu.Lock()
		defer mu.Unlock()
		healthy[name] = v
	}
	p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now }, BackendStates: states,
		Backends: []config.Backend{{Name: "a", Models: []string{"m"}}, {Name: "b", Models: []string{"m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	send := func(backend string, n int, status int, class exchange.ErrorClass) {
		for range n {
			p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: backend, Start: now.Add(-30 * time.Second)},
				&exchange.Response{Status: status, ErrorClass: class})
		}
	}
	// state returns the state of rule's series for backend ("" when it
	// has none).
	state := func(rule, backend string) alert.State {
		for _, a := range p.alerts.Alerts() {
			if a.Rule == rule && a.Labels["backend"] == backend {
				return a.State
			}
		}
		return ""
	}
	step := func(what string, wantErr, wantDown alert.State) {
		t.Helper()
		p.ObserveAlerts(t.Context())
		if got := state(alert.RuleErrorRate, "b"); got != wantErr {
			t.Errorf("%s: b's error rate %q, want %q", what, got, wantErr)
		}
		if got := state(alert.RuleBackendDown, "b"); got != wantDown {
			t.Errorf("%s: b's backend_down %q, want %q", what, got, wantDown)
		}
		if got := state(alert.RuleBackendDown, "a"); got == alert.Firing {
			t.Errorf("%s: a, never out, has backend_down firing", what)
		}
		now = now.Add(period)
	}

	send("a", 20, 200, exchange.ClassNone)
	send("b", 20, 500, exchange.ClassUpstream5xx)
	step("b failing", alert.Firing, "")
	setHealthy("b", false) // ejected: no request reaches it any more
	send("a", 20, 200, exchange.ClassNone)
	step("b out, first seen", alert.Firing, "")
	send("a", 20, 200, exchange.ClassNone)
	step("b out a whole period without a request", alert.Resolved, alert.Firing)
	send("a", 20, 200, exchange.ClassNone)
	step("b still out", alert.Resolved, alert.Firing)
	setHealthy("b", true)
	send("a", 10, 200, exchange.ClassNone)
	send("b", 10, 200, exchange.ClassNone)
	step("b back", alert.Resolved, alert.Resolved)

	var names []string
	for _, d := range p.alerts.Deliveries() {
		if d.Labels["backend"] == "b" {
			st := "firing"
			if d.Resolved {
				st = "resolved"
			}
			names = append(names, d.Name+" "+st)
		}
	}
	// The resolution and the new alert come in one period, by rule name.
	want := []string{"VigilErrorRate firing", "VigilBackendDown firing", "VigilErrorRate resolved", "VigilBackendDown resolved"}
	if len(names) != len(want) {
		t.Fatalf("notifications for b: %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("notifications for b: %q, want %q", names, want)
			break
		}
	}

	// Out, but still failing the requests that reach it (in flight, or
	// an active-check flap): its error rate stays active (firing, or
	// silenced: notified less than alerts.silence ago).
	active := func(what, rule string) {
		t.Helper()
		if st := state(rule, "b"); st != alert.Firing && st != alert.Silenced {
			t.Errorf("%s: b's %s %q, want firing or silenced", what, rule, st)
		}
	}
	for i, what := range []string{"b failing again", "b out, first seen", "b out a whole period, still failing requests"} {
		if i == 1 {
			setHealthy("b", false)
		}
		send("b", 20, 500, exchange.ClassUpstream5xx)
		p.ObserveAlerts(t.Context())
		active(what, alert.RuleErrorRate)
		if i == 2 {
			active(what, alert.RuleBackendDown)
		}
		now = now.Add(period)
	}
}

// TestErrorBudgetServedOnly: the error budget and the error rate count
// only what the service did wrong among the requests it could serve:
// clients' 4xx (bad requests, unknown models, prompts too long, backends'
// 4xx answers, clients gone) count neither as failures nor as requests.
func TestErrorBudgetServedOnly(t *testing.T) {
	cfg := config.Default()
	cfg.Alerts.SLO = config.SLO{ErrorRate: 0.99, Windows: []config.BurnWindow{
		{Long: time.Hour, Short: 5 * time.Minute, Burn: 10, Severity: "critical"},
	}}
	now := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now },
		Backends: []config.Backend{{Name: "a", Models: []string{"m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	clientErrors := []exchange.Response{
		{Status: 400, ErrorClass: exchange.ClassBadRequest},
		{Status: 404, ErrorClass: exchange.ClassUnknownModel},
		{Status: 400, ErrorClass: exchange.ClassPromptTooLong},
		{Status: 429, ErrorClass: exchange.ClassUpstream4xx},
		{Status: 499, ErrorClass: exchange.ClassClientCancel},
		{Status: 422}, // a backend's 4xx without a class
	}
	// Each minute of the hour: 10 good answers, 2 backend 500s and 88
	// client errors. Served: 2 failed of 12, a burn of 16.7× the 1 %
	// budget; counting the 4xx as requests would make it 2 of 100, 2×.
	for range 60 {
		for i := range 100 {
			resp := exchange.Response{Status: 200}
			switch {
			case i < 2:
				resp = exchange.Response{Status: 500, ErrorClass: exchange.ClassUpstream5xx}
			case i >= 12:
				resp = clientErrors[i%len(clientErrors)]
			}
			p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: now.Add(-30 * time.Second)}, &resp)
		}
		now = now.Add(time.Minute)
	}
	now = now.Add(-time.Minute + time.Second)
	if total, failed := p.errs.Sum(now.Add(-time.Hour), now); total != 60*12 || failed != 60*2 {
		t.Errorf("the hour counts %d requests, %d failed; want %d, %d", total, failed, 60*12, 60*2)
	}
	vs := p.burnRates(now)
	if len(vs) != 1 || vs[0].V < 16 || vs[0].V > 17 {
		t.Fatalf("burn rates %+v, want one of 16.7", vs)
	}
	p.ObserveAlerts(t.Context())
	fired := false
	for _, a := range p.alerts.Alerts() {
		fired = fired || (a.Rule == alert.RuleErrorBudget && a.State == alert.Firing)
	}
	if !fired {
		t.Errorf("no error-budget alert at a 16.7× burn: %+v", p.alerts.Alerts())
	}
}
