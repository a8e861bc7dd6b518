package analyzers

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/drift"
)

var errDriftDisabled = errors.New("drift analysis is disabled (analyzers.drift.enabled)")

// metrics holds the analyzers' instruments. Labels come from fixed sets:
// feature names and test names.
type metrics struct {
	featureErrors prometheus.Counter
	driftScore    prometheus.Gauge
	driftAlarm    prometheus.Gauge
	driftStat     *prometheus.GaugeVec
	driftP        *prometheus.GaugeVec
	driftPSI      *prometheus.GaugeVec
	evaluations   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		featureErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_analyzer_feature_errors_total",
			Help: "Request bodies whose prompt features could not be read.",
		}),
		driftScore: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_drift_score",
			Help: "Input drift score: the largest PSI among the tested prompt features.",
		}),
		driftAlarm: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "vigil_drift_alarm",
			Help: "1 while the input drift signal is in its drift state, 0 otherwise.",
		}),
		driftStat: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_drift_statistic",
			Help: "Test statistic of the latest drift evaluation, by feature and test (ks, chi2, mahalanobis).",
		}, []string{"feature", "test"}),
		driftP: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_drift_p_value",
			Help: "P-value of the latest drift evaluation, before the multiple-testing correction.",
		}, []string{"feature", "test"}),
		driftPSI: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_drift_psi",
			Help: "Population stability index of the latest drift evaluation, by feature.",
		}, []string{"feature"}),
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_drift_evaluations_total",
			Help: "Drift evaluations run.",
		}),
	}
	reg.MustRegister(m.featureErrors, m.driftScore, m.driftAlarm, m.driftStat, m.driftP, m.driftPSI, m.evaluations)
	return m
}

func (m *metrics) publishDrift(r *drift.Result) {
	m.evaluations.Inc()
	m.driftScore.Set(r.Score)
	alarm := 0.0
	if r.State == drift.StateDrift {
		alarm = 1
	}
	m.driftAlarm.Set(alarm)
	for _, f := range r.Features {
		m.driftStat.WithLabelValues(f.Name, f.Test).Set(f.Statistic)
		m.driftP.WithLabelValues(f.Name, f.Test).Set(f.PValue)
		if f.Test != "mahalanobis" {
			m.driftPSI.WithLabelValues(f.Name).Set(f.PSI)
		}
	}
}
