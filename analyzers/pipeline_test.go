package analyzers

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// TestFeedback: a response with logprobs can be labelled by its id; the
// label shows in the calibration report; unknown ids are refused.
func TestFeedback(t *testing.T) {
	f := newFeeder(t, config.Default().Analyzers, 5)
	var ids []string
	for range 40 {
		var r struct{ ID string }
		if err := json.Unmarshal(f.send(), &r); err != nil || r.ID == "" {
			t.Fatalf("response id: %v", err)
		}
		ids = append(ids, r.ID)
	}
	for i, id := range ids {
		if err := f.p.Feedback(t.Context(), id, i%4 != 0); err != nil {
			t.Fatalf("Feedback(%s): %v", id, err)
		}
	}
	if err := f.p.Feedback(t.Context(), "chatcmpl-unknown", true); !errors.Is(err, ErrUnknownResponse) {
		t.Errorf("unknown id: %v, want ErrUnknownResponse", err)
	}
	c := f.p.Evaluate().Confidence.Calibration
	if c.Labels != 40 || c.Accuracy != 0.75 || !(c.ECE >= 0) || !(c.Temperature > 0) {
		t.Errorf("calibration: %+v", c)
	}
	if _, err := json.Marshal(f.p.Evaluate()); err != nil {
		t.Errorf("signals do not encode: %v", err)
	}
}

// TestSignalsEncodeEmpty: with no traffic every signal is unknown and the
// document still encodes (NaN statistics become null).
func TestSignalsEncodeEmpty(t *testing.T) {
	p, err := New(Options{Config: config.Default().Analyzers})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p.Evaluate())
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"drift", "confidence", "latency", "output", "precision"} {
		var v struct{ State string }
		if err := json.Unmarshal(s[k], &v); err != nil || v.State != "unknown" {
			t.Errorf("%s state %q (%v), want unknown: %s", k, v.State, err, b)
		}
	}
}

// TestErrorRatePerBackend: the error rate is one series per backend,
// labelled with its model and its tier's severity.
func TestErrorRatePerBackend(t *testing.T) {
	cfg := config.Default()
	cfg.Alerts.Tiers = map[string]string{"gold": "critical"}
	cfg.Alerts.Fixed = map[string]float64{alert.RuleErrorRate: 0.1}
	cfg.Alerts.Consecutive = 1
	p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Backends: []config.Backend{
		{Name: "a", Models: []string{"m"}, Tier: "gold"}, {Name: "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		r := &exchange.Request{Operation: "embeddings", Model: "m", Backend: []string{"a", "b"}[i%2], Start: time.Now()}
		resp := &exchange.Response{Status: 200}
		if r.Backend == "a" && i%4 == 0 {
			resp.Status, resp.ErrorClass = 502, "upstream_5xx"
		}
		p.OnRequest(r)
		p.OnResponse(r, resp)
	}
	p.ObserveAlerts(context.Background())
	got := map[string]alert.Alert{}
	for _, a := range p.alerts.Alerts() {
		if a.Rule == alert.RuleErrorRate {
			got[a.Labels["backend"]] = a
		}
	}
	a := got["a"]
	if a.State != alert.Firing || float64(a.Value) != 0.5 || a.Labels["model"] != "m" || a.Labels["tier"] != "gold" || a.Labels["severity"] != "critical" {
		t.Errorf("backend a: %+v, want firing at 0.5 with model m, tier gold, severity critical", a)
	}
	if b, ok := got["b"]; ok { // /admin/alerts lists only active alerts
		t.Errorf("backend b, without errors: %+v", b)
	}
}

func TestGatewayLabels(t *testing.T) {
	a := config.Alerts{Tiers: map[string]string{"gold": "critical", "bronze": "info"}}
	tests := []struct {
		bs   []config.Backend
		want map[string]string
	}{
		{nil, nil},
		{[]config.Backend{{Models: []string{"m"}, Tier: "gold"}, {Models: []string{"m"}, Tier: "gold"}},
			map[string]string{"model": "m", "tier": "gold", "severity": "critical"}},
		{[]config.Backend{{Models: []string{"m"}, Tier: "gold"}, {Models: []string{"n"}, Tier: "bronze"}}, nil},
		{[]config.Backend{{Models: []string{"m"}}, {Models: []string{"m", "n"}}}, nil},
		{[]config.Backend{{Tier: "bronze"}, {Tier: "bronze"}}, map[string]string{"tier": "bronze", "severity": "info"}},
		{[]config.Backend{{Models: []string{"m"}}, {Models: []string{"m"}}}, map[string]string{"model": "m"}},
	}
	for i, tt := range tests {
		if got := gatewayLabels(tt.bs, a); !maps.Equal(got, tt.want) {
			t.Errorf("case %d: %v, want %v", i, got, tt.want)
		}
	}
}

// TestGatewayAnsweredErrors: requests the gateway answered itself (no
// healthy backend) count in the error rate of their model, without a
// backend label; unknown models (a client's error) are not counted.
func TestGatewayAnsweredErrors(t *testing.T) {
	cfg := config.Default()
	cfg.Alerts.Consecutive = 1
	p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Backends: []config.Backend{{Name: "a", Models: []string{"m"}}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Start: time.Now()},
			&exchange.Response{Status: 503, ErrorClass: exchange.ClassNoBackend})
		p.OnResponse(&exchange.Request{Operation: "chat", Model: "nope", Start: time.Now()},
			&exchange.Response{Status: 404, ErrorClass: exchange.ClassUnknownModel})
	}
	p.ObserveAlerts(t.Context())
	var got []alert.Alert
	for _, a := range p.alerts.Alerts() {
		if a.Rule == alert.RuleErrorRate {
			got = append(got, a)
		}
	}
	if len(got) != 1 || got[0].Labels["model"] != "m" || got[0].Labels["backend"] != "" || got[0].State != alert.Firing ||
		float64(got[0].Value) != 1 || got[0].ThresholdSource != alert.ColdStart {
		t.Errorf("error-rate alerts %+v, want one firing for model m at 1 on the cold-start threshold", got)
	}
}

// TestErrorBudgetBurn: with an SLO, a window pair fires when both its
// windows burn the budget faster than its factor, and only then.
func TestErrorBudgetBurn(t *testing.T) {
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
	// send n requests, failed of them failing, in the minute before now.
	send := func(n, failed int) {
		for i := range n {
			resp := &exchange.Response{Status: 200}
			if i < failed {
				resp.Status, resp.ErrorClass = 500, exchange.ClassUpstream5xx
			}
			p.OnResponse(&exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: now.Add(-30 * time.Second)}, resp)
		}
	}
	burning := func() *alert.Alert {
		p.ObserveAlerts(t.Context())
		for _, a := range p.alerts.Alerts() {
			if a.Rule == alert.RuleErrorBudget && a.State == alert.Firing {
				return &a
			}
		}
		return nil
	}
	// 55 quiet minutes, then a burst of 50 % errors: the short window burns
	// at 50/500/0.01 = 10×, the hour at 50/5600/0.01 ≈ 0.9× — no page.
	for range 55 {
		send(100, 0)
		now = now.Add(time.Minute)
	}
	send(100, 50)
	if a := burning(); a != nil {
		t.Fatalf("a burst that barely dents the hour's budget fired: %+v", a)
	}
	// Twenty minutes at 20 %: the short window burns at 20×, the hour at
	// (50 + 400)/6000/0.01 = 7.5× — still no page.
	for range 20 {
		now = now.Add(time.Minute)
		send(100, 20)
	}
	if a := burning(); a != nil {
		t.Fatalf("an hour burning at 7.5× fired at 10×: %+v", a)
	}
	// Twenty more: the hour burns at 850/6000/0.01 ≈ 14×, the short
	// window at 20×: page.
	for range 20 {
		now = now.Add(time.Minute)
		send(100, 20)
	}
	a := burning()
	if a == nil {
		t.Fatalf("no error-budget alert with both windows above 10×: %+v", p.alerts.Alerts())
	}
	if a.Labels["window"] != "1h/5m" || a.Labels["severity"] != "critical" || a.ThresholdSource != alert.Fixed || float64(a.Threshold) != 10 {
		t.Errorf("error-budget alert %+v, want window 1h/5m, severity critical, fixed threshold 10", a)
	}
}
