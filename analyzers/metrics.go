package analyzers

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/output"
	"github.com/vigil-gw/vigil/analyzers/precision"
)

// metrics holds the analyzers' instruments. Labels come from fixed sets:
// feature, test and latency metric names.
type metrics struct {
	featureErrors prometheus.Counter
	parseErrors   prometheus.Counter
	abandoned     prometheus.Counter

	driftScore  prometheus.Gauge
	driftAlarm  prometheus.Gauge
	driftStat   *prometheus.GaugeVec
	driftP      *prometheus.GaugeVec
	driftPSI    *prometheus.GaugeVec
	evaluations prometheus.Counter

	respLogprob  prometheus.Histogram
	confMean     prometheus.Gauge
	confEntropy  prometheus.Gauge
	confMargin   prometheus.Gauge
	confLow      prometheus.Gauge
	confAlarm    prometheus.Gauge
	perplexity   prometheus.Gauge
	outputAlarm  prometheus.Gauge
	ece          prometheus.Gauge
	calibDropped prometheus.Counter
	temperature  prometheus.Gauge

	latencyAnomalies *prometheus.CounterVec
	latencyAlarm     prometheus.Gauge
	latencyConfCorr  prometheus.Gauge

	precisionKL      *prometheus.GaugeVec
	precisionTop1    *prometheus.GaugeVec
	precisionAlarm   *prometheus.GaugeVec
	precisionResults *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &metrics{
		featureErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_analyzer_feature_errors_total",
			Help: "Request bodies whose prompt features could not be read.",
		}),
		parseErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_logprob_parse_errors_total",
			Help: "Response bodies or SSE events that were not valid JSON for the logprob parser.",
		}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_analyzer_abandoned_responses_total",
			Help: "Responses whose analysis was abandoned because too many were open at once.",
		}),
		driftScore: gauge("vigil_drift_score", "Input drift score: the largest PSI among the tested prompt features."),
		driftAlarm: gauge("vigil_drift_alarm", "1 while the input drift signal is in its drift state, 0 otherwise."),
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
		respLogprob: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "vigil_confidence_response_mean_logprob",
			Help:    "Mean token logprob of each response with logprobs.",
			Buckets: []float64{-5, -3, -2, -1.5, -1, -0.75, -0.5, -0.35, -0.25, -0.15, -0.1, -0.05, -0.01, 0},
		}),
		confMean:    gauge("vigil_confidence_mean_logprob", "Mean token logprob of the current window's responses."),
		confEntropy: gauge("vigil_confidence_entropy", "Mean top-k token entropy (nats) of the current window."),
		confMargin:  gauge("vigil_confidence_margin", "Mean top-1/top-2 probability margin of the current window."),
		confLow:     gauge("vigil_confidence_low_share", "Mean share of low-confidence tokens in the current window."),
		confAlarm:   gauge("vigil_confidence_decay_alarm", "1 while the confidence signal is in its decay state."),
		perplexity:  gauge("vigil_perplexity", "Mean perplexity of the latest complete minute."),
		outputAlarm: gauge("vigil_output_drift_alarm", "1 while perplexity has been outside its band for the configured minutes."),
		ece:         gauge("vigil_calibration_ece", "Expected calibration error of labelled responses."),
		calibDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_calibration_unshared_total",
			Help: "Responses remembered for calibration that could not be queued for the shared store (feedback must reach the replica that served them).",
		}),
		temperature: gauge("vigil_calibration_temperature", "Temperature fitted to the labelled responses."),
		latencyAnomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_latency_anomalies_total",
			Help: "Responses beyond the reference's mean + k·σ (below mean − k·σ for tokens per second), by metric.",
		}, []string{"metric"}),
		latencyAlarm:    gauge("vigil_latency_anomalous_alarm", "1 while the latency signal is in its anomalous state."),
		latencyConfCorr: gauge("vigil_latency_confidence_correlation", "Pearson correlation of end-to-end latency and mean token logprob in the current window."),
		precisionKL: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_precision_kl",
			Help: "Mean per-token KL divergence (nats) of the reference's next-token distribution from the backend's, in the current window of shadow comparisons.",
		}, []string{"backend", "reference"}),
		precisionTop1: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_precision_top1_agreement",
			Help: "Share of compared positions whose most likely token is the same on the backend and its reference.",
		}, []string{"backend", "reference"}),
		precisionAlarm: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_precision_divergent",
			Help: "1 while a backend is in the divergent state against its reference.",
		}, []string{"backend", "reference"}),
		precisionResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_precision_comparisons_total",
			Help: "Shadow response pairs by outcome: compared, or unreadable (a body without logprobs or not JSON).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.featureErrors, m.parseErrors, m.abandoned,
		m.driftScore, m.driftAlarm, m.driftStat, m.driftP, m.driftPSI, m.evaluations,
		m.respLogprob, m.confMean, m.confEntropy, m.confMargin, m.confLow, m.confAlarm,
		m.perplexity, m.outputAlarm, m.ece, m.temperature, m.calibDropped,
		m.latencyAnomalies, m.latencyAlarm, m.latencyConfCorr,
		m.precisionKL, m.precisionTop1, m.precisionAlarm, m.precisionResults)
	m.precisionResults.WithLabelValues("compared")
	m.precisionResults.WithLabelValues("unreadable")
	for _, n := range latency.Names {
		m.latencyAnomalies.WithLabelValues(n)
	}
	return m
}

func alarm(on bool) float64 {
	if on {
		return 1
	}
	return 0
}

func (m *metrics) publishDrift(r *inputdrift.Result) {
	m.evaluations.Inc()
	m.driftScore.Set(r.Score)
	m.driftAlarm.Set(alarm(r.State == inputdrift.StateDrift))
	for _, f := range r.Features {
		m.driftStat.WithLabelValues(f.Name, f.Test).Set(f.Statistic)
		m.driftP.WithLabelValues(f.Name, f.Test).Set(f.PValue)
		if f.Test != "mahalanobis" {
			m.driftPSI.WithLabelValues(f.Name).Set(f.PSI)
		}
	}
}

func (m *metrics) observeResponse(s *logprob.Summary) {
	if s.Tokens > 0 {
		m.respLogprob.Observe(s.MeanLogprob)
	}
}

func (m *metrics) publishConfidence(d *confidence.Decay, c *calibrate.Report) {
	m.ece.Set(c.ECE)
	m.temperature.Set(c.Temperature)
	m.confMean.Set(float64(d.MeanLogprob))
	m.confEntropy.Set(float64(d.Entropy))
	m.confMargin.Set(float64(d.Margin))
	m.confLow.Set(float64(d.LowShare))
	m.confAlarm.Set(alarm(d.State == confidence.StateDecay))
}

func (m *metrics) publishOutput(o *output.Output) {
	m.perplexity.Set(float64(o.Perplexity))
	m.outputAlarm.Set(alarm(o.State == output.StateDrift))
}

func (m *metrics) publishLatency(l *latency.Result) {
	m.latencyAlarm.Set(alarm(l.State == latency.StateAnomalous))
	m.latencyConfCorr.Set(float64(l.Correlation))
}

func (m *metrics) publishPrecision(r *precision.Result) {
	for _, p := range r.Pairs {
		m.precisionKL.WithLabelValues(p.Backend, p.Reference).Set(float64(p.KL))
		m.precisionTop1.WithLabelValues(p.Backend, p.Reference).Set(float64(p.Top1Agreement))
		m.precisionAlarm.WithLabelValues(p.Backend, p.Reference).Set(alarm(p.State == precision.StateDivergent))
	}
}

var (
	alertsFiringDesc = prometheus.NewDesc("vigil_alerts_firing", "Alerts in the firing state.", nil, nil)
	// backendSlownessDesc: a series per configured backend with enough
	// recent answers; the label is bounded by the configuration.
	backendSlownessDesc = prometheus.NewDesc("vigil_backend_slowness",
		"How many times slower than the other backends a backend answers: the largest ratio that three quarters of its latest good answers reach against the upper quartile of the other backends' answers started around them (a stream's time to first token or longest pause, whichever ratio is larger; a non-streamed answer's latency against their streams' for as many tokens). Absent without enough recent answers.",
		[]string{"backend"}, nil)
	alertsSentDesc = prometheus.NewDesc("vigil_alert_notifications_total", "Alert notifications by outcome: sent; retried (a failed delivery tried again, once per attempt); failed (given up on); dropped (the delivery queue was full).", []string{"outcome"}, nil)
)

// collectorFunc is an unchecked prometheus.Collector made of a function
// (it describes nothing, so the registry checks its metrics as collected).
type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }
func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
