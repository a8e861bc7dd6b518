package analyzers

import (
	"context"
	"encoding/json"
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// newAlerts builds the alert engine: adaptive thresholds kept in the shared
// store (or in memory), and the lease that makes one replica the sender.
func (p *Pipeline) newAlerts(o Options, reg prometheus.Registerer) *alert.Engine {
	a := o.Alerts
	cfg := alert.Config{Period: a.Period, Percentile: a.Percentile, Factor: a.Factor,
		Consecutive: a.Consecutive, Silence: a.Silence, Severity: a.Severity, DashboardURL: a.DashboardURL}
	if len(a.Fixed) > 0 {
		cfg.Fixed = maps.Clone(alert.DefaultFixed)
		maps.Copy(cfg.Fixed, a.Fixed)
	}
	var store alert.Store = state.NewMemory()
	opts := []alert.Option{alert.WithLogger(p.log)}
	if p.share != nil {
		store = p.share.cfg.Store
		opts = append(opts, alert.WithLeader(alert.Leader{Store: p.share.cfg.Store, Owner: p.share.cfg.Replica}))
	}
	e := alert.NewEngine(cfg, store, p.now, o.Notifier, opts...)
	reg.MustRegister(collectorFunc(func(ch chan<- prometheus.Metric) {
		st := e.Stats()
		firing := 0
		for _, al := range e.Alerts() {
			if al.State == "firing" {
				firing++
			}
		}
		ch <- prometheus.MustNewConstMetric(alertsFiringDesc, prometheus.GaugeValue, float64(firing))
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Sent), "sent")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Failed), "failed")
		ch <- prometheus.MustNewConstMetric(alertsSentDesc, prometheus.CounterValue, float64(st.Dropped), "dropped")
	}))
	return e
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

// ObserveAlerts feeds the latest signals, the period's error rates and
// the precision pairs to the alert engine; Run calls it every
// alerts.period. The gateway-wide signals make one series per rule; the
// error rate makes one per backend (and one, without a backend label, for
// requests that no backend answered), precision one per compared backend.
func (p *Pipeline) ObserveAlerts(ctx context.Context) {
	s := p.last.Load()
	if s == nil {
		s = p.Evaluate()
	}
	var values []alert.Value
	for rule, v := range gatewayValues(s) {
		v.Rule, v.Labels = rule, p.gatewayLabels
		values = append(values, v)
	}
	now := p.now()
	for backend, c := range p.errs.since(now.Add(-p.alertPeriod), now) {
		if c[0] == 0 {
			continue
		}
		v := alert.Value{Rule: alert.RuleErrorRate, V: float64(c[1]) / float64(c[0]), N: c[0]}
		v.Labels = p.gatewayLabels
		if backend != "" {
			v.Labels = p.labelsOf(backend)
		}
		values = append(values, v)
	}
	if pr := s.Precision; pr != nil {
		for _, pair := range pr.Pairs {
			if pair.State != precision.StateUnknown {
				values = append(values, alert.Value{Rule: alert.RulePrecision, V: float64(pair.KL), Labels: p.labelsOf(pair.Backend)})
			}
		}
	}
	p.alerts.ObserveValues(ctx, values)
}

// gatewayValues are the rule values of the gateway-wide signals in s.
func gatewayValues(s *Signals) map[string]alert.Value {
	in := alert.Signals{Drift: s.Drift, Output: s.Output, Latency: s.Latency}
	if s.Confidence != nil {
		in.Confidence = &s.Confidence.Decay
	}
	return alert.Values(in)
}

// Alerts lists the alerts for /admin/alerts.
func (p *Pipeline) Alerts(context.Context) ([]alert.Alert, error) { return p.alerts.Alerts(), nil }

// AlertsJSON is Alerts as JSON, for GET /admin/alerts.
func (p *Pipeline) AlertsJSON(ctx context.Context) ([]byte, error) {
	as, err := p.Alerts(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(as)
}
