package analyzers

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// newAlerts builds the alert engine: adaptive thresholds kept in the shared
// store (or in memory), and the lease that makes one replica the sender.
func (p *Pipeline) newAlerts(o Options, reg prometheus.Registerer) *alert.Engine {
	cfg := alertConfig(o.Alerts)
	var store alert.Store = state.NewMemory()
	opts := []alert.Option{alert.WithLogger(p.log)}
	if p.share != nil {
		store = p.share.Config().Store
		opts = append(opts, alert.WithLeader(alert.Leader{Store: p.share.Config().Store, Owner: p.share.Config().Replica}))
	}
	e := alert.NewEngine(cfg, store, p.now, o.Notifier, opts...)
	reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		st := e.Stats()
		firing := 0
		for _, al := range e.Alerts() {
			if al.State == alert.Firing {
				firing++
			}
		}
		ch <- prometheus.MustNewConstMetric(alertsFiringDesc, prometheus.GaugeValue, float64(firing))
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Sent), "sent")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Failed), "failed")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Dropped), "dropped")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Retried), "retried")
		for name, v := range p.BackendSlowness() {
			ch <- prometheus.MustNewConstMetric(backendSlownessDesc, prometheus.GaugeValue, v, name)
		}
	}))
	return e
}

// BackendSlowness returns each backend's slowness as the backend_slow
// rule reads it (see speeds): how many times slower than the other
// backends it answers; absent for a backend with too few recent answers.
// Answers count for two analyzer windows: a backend the balancer has
// moved off answers seldom, and its last answers are what tells it is
// still slow.
func (p *Pipeline) BackendSlowness() map[string]float64 {
	return p.speeds.slowness(p.now(), 2*p.cfg.Window, p.alertPeriod)
}

// alertConfig is the alert engine's configuration from the alerts section.
func alertConfig(a config.Alerts) alert.Config {
	cfg := alert.Config{Period: a.Period, History: a.History, Percentile: a.Percentile, Factor: a.Factor, MinHistory: a.MinHistory,
		Consecutive: a.Consecutive, Silence: a.Silence, Severity: a.Severity, DashboardURL: a.DashboardURL,
		ColdStartErrorRate: a.ColdStart.ErrorRate, ColdStartLatencyFactor: a.ColdStart.LatencyFactor}
	if len(a.Fixed) > 0 {
		cfg.Fixed = maps.Clone(alert.DefaultFixed)
		maps.Copy(cfg.Fixed, a.Fixed)
	}
	return cfg
}

// backendLabels returns, per backend name, the labels of its alert
// series: backend; model when it serves exactly one; tier and the tier's
// severity when it has a tier.
func backendLabels(bs []config.Backend, a config.Alerts) map[string]map[string]string {
	out := make(map[string]map[string]string, len(bs))
	for _, b := range bs {
		l := map[string]string{"backend": b.Name}
		if len(b.Models) == 1 {
			l["model"] = b.Models[0]
		}
		if sev, ok := a.Tiers[b.Tier]; ok && b.Tier != "" {
			l["tier"], l["severity"] = b.Tier, sev
		}
		out[b.Name] = l
	}
	return out
}

// gatewayLabels returns the labels of the gateway-wide alert series: model
// when every backend serves that one model only; tier and its severity
// when every backend has that tier. Nil when neither holds.
func gatewayLabels(bs []config.Backend, a config.Alerts) map[string]string {
	if len(bs) == 0 {
		return nil
	}
	l := map[string]string{}
	model, tier := "", bs[0].Tier
	if len(bs[0].Models) == 1 {
		model = bs[0].Models[0]
	}
	for _, b := range bs[1:] {
		if len(b.Models) != 1 || b.Models[0] != model {
			model = ""
		}
		if b.Tier != tier {
			tier = ""
		}
	}
	if model != "" {
		l["model"] = model
	}
	if sev, ok := a.Tiers[tier]; ok && tier != "" {
		l["tier"], l["severity"] = tier, sev
	}
	if len(l) == 0 {
		return nil
	}
	return l
}

// labelsOf returns backend's alert labels; an unknown name (a backend
// the options did not list) gets only its name.
func (p *Pipeline) labelsOf(backend string) map[string]string {
	if l, ok := p.backendLabels[backend]; ok {
		return l
	}
	return map[string]string{"backend": backend}
}

// ObserveAlerts evaluates the signals (so that they are fresh whatever
// analyzers.interval is) and feeds them, the period's error rates, the
// error budget's burn rates and the precision pairs to the alert engine;
// Run calls it every alerts.period. The gateway-wide signals make one
// series per rule; the error rate makes one per backend, and for the
// requests the gateway answered itself (no healthy backend) one per
// configured model, and one without a model for the others; precision one
// per compared backend; the SLO one per window pair; backend_down one per
// backend the gateway reports. A backend out of service (unhealthy or
// ejected) for a whole period without a request ends its error-rate
// alert, and backend_down fires for as long as it stays out.
func (p *Pipeline) ObserveAlerts(ctx context.Context) {
	s := p.peek()
	var values []alert.Value
	for rule, v := range gatewayValues(s) {
		v.Rule, v.Labels = rule, p.gatewayLabels
		values = append(values, v)
	}
	now := p.now()
	rates := p.errs.Since(now.Add(-p.alertPeriod), now)
	out := p.backendsOut(now)
	for backend, c := range rates {
		// The requests the gateway answered itself ("") count in their
		// model's series below.
		if c[0] == 0 || backend == "" {
			continue
		}
		values = append(values, alert.Value{Rule: alert.RuleErrorRate, V: float64(c[1]) / float64(c[0]), N: c[0], Labels: p.labelsOf(backend)})
	}
	values = append(values, p.segmentValues(s, now)...)
	for name, whole := range out {
		down := 0.0
		if whole {
			down = 1
			if rates[name][0] == 0 {
				// Out for a whole period without a request: its error
				// rate has nothing left to measure, and its alert gives
				// way to backend_down.
				values = append(values, alert.Value{Rule: alert.RuleErrorRate, Labels: p.labelsOf(name), Idle: true})
			}
		}
		values = append(values, alert.Value{Rule: alert.RuleBackendDown, V: down, Labels: p.labelsOf(name)})
	}
	for name, v := range p.BackendSlowness() {
		values = append(values, alert.Value{Rule: alert.RuleBackendSlow, V: v, Labels: p.labelsOf(name)})
	}
	values = append(values, p.burnRates(now)...)
	if pr := s.Precision; pr != nil {
		for _, pair := range pr.Pairs {
			if pair.State != precision.StateUnknown {
				divergent := pair.State == precision.StateDivergent
				values = append(values, alert.Value{Rule: alert.RulePrecision, V: float64(pair.KL), Labels: p.labelsOf(pair.Backend), Verdict: &divergent})
			}
		}
	}
	p.alerts.ObserveValues(ctx, values)
	p.alertPeriods.Add(1)
}

// backendsOut returns every backend the gateway reports (none without
// Options.BackendStates), each with whether it has been out of service
// (unhealthy or ejected) for a whole alert period: since a call at least
// a period before now, which first saw it out.
func (p *Pipeline) backendsOut(now time.Time) map[string]bool {
	if p.backendStates == nil {
		return nil
	}
	states := p.backendStates()
	p.outMu.Lock()
	defer p.outMu.Unlock()
	if p.outSince == nil {
		p.outSince = map[string]time.Time{}
	}
	out := make(map[string]bool, len(states))
	for _, b := range states {
		if b.Healthy {
			delete(p.outSince, b.Name)
			out[b.Name] = false
			continue
		}
		since, ok := p.outSince[b.Name]
		if !ok {
			since = now
			p.outSince[b.Name] = now
		}
		out[b.Name] = now.Sub(since) >= p.alertPeriod
	}
	return out
}

// AlertPeriods returns how many alert periods the alert engine has
// evaluated (ObserveAlerts calls): tests bound the time an alert takes in
// periods evaluated, which a busy machine does not make fewer, rather
// than in wall time.
func (p *Pipeline) AlertPeriods() int64 { return p.alertPeriods.Load() }

// gatewayValues are the rule values of the gateway-wide signals in s:
// input drift, which watches the mix of models too. The others are judged
// per model (segmentValues): the fleet's confidence, perplexity and
// latency move with the mix of models, which is no change of any.
func gatewayValues(s *Signals) map[string]alert.Value {
	return alert.Values(alert.Signals{Drift: s.Drift})
}

// segmentValues are the rule values of every segment in s, each series
// labelled with its model (and an adapter's base_model), and the period's
// error rate of each model's requests, the gateway's own refusals
// included.
func (p *Pipeline) segmentValues(s *Signals, now time.Time) []alert.Value {
	rates := p.segs.errs.Since(now.Add(-p.alertPeriod), now)
	var out []alert.Value
	for i := range s.Segments {
		g := &s.Segments[i]
		labels := withLabel(p.gatewayLabels, "model", g.Model)
		if g.BaseModel != "" {
			labels["base_model"] = g.BaseModel
		}
		in := alert.Signals{Drift: g.Drift, Output: g.Output, Latency: g.Latency, Labels: labels}
		if g.Confidence != nil {
			in.Confidence = g.Confidence
		}
		if c := rates[g.Model]; c[0] > 0 {
			rate := float64(c[1]) / float64(c[0])
			in.ErrorRate = &rate
		}
		for rule, v := range alert.Values(in) {
			v.Rule = rule
			if rule == alert.RuleErrorRate {
				v.N = rates[g.Model][0]
			}
			out = append(out, v)
		}
	}
	return out
}

// Alerts lists the alerts for /admin/alerts.
func (p *Pipeline) Alerts(context.Context) ([]alert.Alert, error) { return p.alerts.Alerts(), nil }

// Notifications lists the newest notifications the alert engine handed on
// (at most 200, oldest first) and what became of each, for
// /admin/notifications.
func (p *Pipeline) Notifications(context.Context) ([]alert.Delivery, error) {
	return p.alerts.Deliveries(), nil
}

// NotificationsJSON is Notifications as JSON.
func (p *Pipeline) NotificationsJSON(ctx context.Context) ([]byte, error) {
	ds, err := p.Notifications(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ds)
}

// AlertsJSON is Alerts as JSON, for GET /admin/alerts.
func (p *Pipeline) AlertsJSON(ctx context.Context) ([]byte, error) {
	as, err := p.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(as)
}

// burnRates are the error budget's burn rates, one value per window pair
// of alerts.slo (none when it has no objective): the smaller of the long
// and the short window's, against the pair's burn factor. A burn rate is
// the window's error rate over the budget, 1 − objective.
func (p *Pipeline) burnRates(now time.Time) []alert.Value {
	if p.slo.ErrorRate <= 0 {
		return nil
	}
	budget := 1 - p.slo.ErrorRate
	burn := func(d time.Duration) (float64, bool) {
		total, failed := p.errs.Sum(now.Add(-d), now)
		if total == 0 {
			return 0, false
		}
		return float64(failed) / float64(total) / budget, true
	}
	var out []alert.Value
	for _, w := range p.slo.Windows {
		long, okL := burn(w.Long)
		short, okS := burn(w.Short)
		if !okL || !okS {
			continue
		}
		factor := w.Burn
		l := withLabel(p.gatewayLabels, "window", shortDuration(w.Long)+"/"+shortDuration(w.Short))
		l["severity"] = w.Severity
		out = append(out, alert.Value{Rule: alert.RuleErrorBudget, V: min(long, short), Labels: l, Fixed: &factor})
	}
	return out
}

// withLabel returns a copy of l (nil: empty) with k set to v.
func withLabel(l map[string]string, k, v string) map[string]string {
	out := maps.Clone(l)
	if out == nil {
		out = map[string]string{}
	}
	out[k] = v
	return out
}

// shortDuration writes d as Go does, without zero minor units: 1h, 5m,
// 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
