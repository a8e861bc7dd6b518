package analyzers

// The pipeline's admin views: the token usage and the history of the
// evaluations, each kept by its own package.

import (
	"context"
	"encoding/json"
	"maps"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/history"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/usage"
	"github.com/vigil-gw/vigil/state"
)

// Usage returns the token usage of the last hour and of the last day by
// tenant, model and backend, merged over every replica: this one's and
// what it last read of the others' (every usage.ReadEvery flushes).
// Responses the gateway answered itself are not counted. Labels are
// bounded whatever the traffic: tenants by the gateway (64, then
// "other"); models like the error-rate keys (configured ones by name,
// others "other", or the first 64 seen when some backend serves every
// model); and at most 4096 keys per bucket, beyond which usage is counted
// under "other" for all three labels (the keys kept are the same on every
// replica: see usage.Ledger).
func (p *Pipeline) Usage(context.Context) (usage.Report, error) {
	return p.usage.Report(p.now())
}

// UsageJSON is Usage as JSON, for GET /admin/usage.
func (p *Pipeline) UsageJSON(ctx context.Context) ([]byte, error) {
	u, err := p.Usage(ctx)
	if err != nil {
		return nil, err
	}
	return json.Marshal(u)
}

// History returns the evaluations since since, at most one per step.
func (p *Pipeline) History(ctx context.Context, since time.Time, step time.Duration) (history.Result, error) {
	now := p.now()
	if since.Before(now.Add(-24 * time.Hour)) {
		since = now.Add(-24 * time.Hour)
	}
	var st state.Store
	var replica string
	if p.share != nil {
		st, replica = p.share.Config().Store, p.share.Config().Replica
	}
	pts, err := p.hist.Points(ctx, st, replica, since, now)
	if err != nil {
		p.log.Debug("shared history not read", "err", err)
	}
	return history.Result{Resolution: p.cfg.Interval, Step: step, Points: history.Resample(pts, step)}, nil
}

// HistoryJSON is History as JSON, for GET /admin/history.
func (p *Pipeline) HistoryJSON(ctx context.Context, since time.Time, step time.Duration) ([]byte, error) {
	h, err := p.History(ctx, since, step)
	if err != nil {
		return nil, err
	}
	return json.Marshal(h)
}

// record adds an evaluation to the history, with the backends as the
// gateway sees them now and the alert engine's state.
func (p *Pipeline) record(_ context.Context, s *Signals) {
	pt := history.Point{Time: s.Evaluated, Thresholds: map[string]history.ThresholdPoint{}, Alerts: []history.AlertPoint{}}
	if d := s.Drift; d != nil {
		dp := &history.DriftPoint{State: d.State, Score: stats.Num(d.Score), Reference: d.Reference, Features: map[string]stats.Num{}}
		for _, f := range d.Features {
			if v, ok := dp.Features[f.Name]; !ok || f.PSI > float64(v) {
				dp.Features[f.Name] = stats.Num(f.PSI)
			}
		}
		pt.Drift = dp
	}
	if c := s.Confidence; c != nil {
		pt.Confidence = &history.ConfidencePoint{State: c.State, Confidence: c.Confidence, MeanLogprob: c.MeanLogprob,
			Entropy: c.Entropy, LowShare: c.LowShare, Drop: c.Drop}
	}
	if o := s.Output; o != nil {
		pt.Output = &history.OutputPoint{State: o.State, Perplexity: o.Perplexity, Current: o.Current,
			BaselineMean: o.BaselineMean, BaselineStd: o.BaselineStd}
	}
	if l := s.Latency; l != nil {
		pt.Latency = &history.LatencyPoint{State: l.State, TTFTP95: l.TTFT.P95, E2EP95: l.E2E.P95, ITLP95: l.ITL.P95}
	}
	if pr := s.Precision; pr != nil {
		for _, x := range pr.Pairs {
			pt.Precision = append(pt.Precision, history.PrecisionPoint{Backend: x.Backend, Reference: x.Reference, State: x.State,
				KL: x.KL, Top1Agreement: x.Top1Agreement})
		}
	}
	for _, t := range s.Thresholds {
		key := t.Rule // a gateway-wide series; the others name their label
		switch {
		case t.Labels["backend"] != "":
			key += "{backend=" + t.Labels["backend"] + "}"
		case t.Labels["window"] != "":
			key += "{window=" + t.Labels["window"] + "}"
		case t.Rule == alert.RuleErrorRate && t.Labels["model"] != "":
			key += "{model=" + t.Labels["model"] + "}"
		}
		pt.Thresholds[key] = history.ThresholdPoint{Threshold: t.Threshold, Source: t.Source}
	}
	if p.backendStates != nil {
		pt.Backends = p.backendStates()
	}
	for _, a := range p.alerts.Alerts() {
		if a.State != alert.Resolved {
			pt.Alerts = append(pt.Alerts, history.AlertPoint{Name: a.Name, Rule: a.Rule, State: a.State, Labels: maps.Clone(a.Labels)})
		}
	}
	p.hist.Record(pt)
}
