package analyzers

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// TestPipelineTakesConfigValues: a pipeline runs with the values of its
// configuration, the defaults of config.Default() or others, never with
// values of its own.
func TestPipelineTakesConfigValues(t *testing.T) {
	def := config.Default()
	other := config.Default()
	other.Alerts.Period = 7 * time.Minute
	other.State.Redis.FlushInterval = 3 * time.Second
	for name, cfg := range map[string]config.Config{"default": def, "other": other} {
		t.Run(name, func(t *testing.T) {
			p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts,
				Sharing: &share.Config{Store: state.NewMemory(), Replica: "r", Interval: cfg.State.Redis.FlushInterval}})
			if err != nil {
				t.Fatal(err)
			}
			if p.alertPeriod != cfg.Alerts.Period {
				t.Errorf("alert period %v, want alerts.period %v", p.alertPeriod, cfg.Alerts.Period)
			}
			if p.share.Config().Interval != cfg.State.Redis.FlushInterval {
				t.Errorf("flush interval %v, want state.redis.flush_interval %v", p.share.Config().Interval, cfg.State.Redis.FlushInterval)
			}
		})
	}
	// Zero values, which only tests leave, mean config's defaults.
	p, err := New(Options{Config: def.Analyzers, Sharing: &share.Config{Store: state.NewMemory(), Replica: "r"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.alertPeriod != def.Alerts.Period || p.share.Config().Interval != def.State.Redis.FlushInterval {
		t.Errorf("zero options: alert period %v, flush interval %v; want config's %v, %v",
			p.alertPeriod, p.share.Config().Interval, def.Alerts.Period, def.State.Redis.FlushInterval)
	}
}

// TestAlertConfigFromConfig: every alerts key the engine reads is passed
// on, so that the engine never uses a default where the file set a value.
func TestAlertConfigFromConfig(t *testing.T) {
	a := config.DefaultAlerts()
	a.Period, a.History, a.Percentile, a.Factor, a.MinHistory = time.Minute, 2*time.Hour, 0.5, 2, 3
	a.Consecutive, a.Silence, a.Severity, a.DashboardURL = 1, time.Minute, "info", "http://d"
	a.ColdStart = config.ColdStart{ErrorRate: 0.5, LatencyFactor: 2}
	want := alert.Config{Period: time.Minute, History: 2 * time.Hour, Percentile: 0.5, Factor: 2, MinHistory: 3,
		Consecutive: 1, Silence: time.Minute, Severity: "info", DashboardURL: "http://d",
		ColdStartErrorRate: 0.5, ColdStartLatencyFactor: 2}
	if diff := cmp.Diff(want, alertConfig(a)); diff != "" {
		t.Errorf("alertConfig mismatch (-want +got):\n%s", diff)
	}
}

// TestComponentFallbacksAreConfigs: the pure packages below the pipeline
// keep a fallback for a zero option (their own tests build them bare), and
// the pipeline always passes config's values; a fallback that drifted from
// config would still change what a bare component does, so each must be
// config's default.
func TestComponentFallbacksAreConfigs(t *testing.T) {
	c := config.Default().Analyzers
	for _, tt := range []struct {
		name            string
		fallback, value float64
	}{
		{"calibrate.DefaultMaxPending vs analyzers.calibration.max_pending", calibrate.DefaultMaxPending, float64(c.Calibration.MaxPending)},
		{"calibrate.DefaultMaxLabels vs analyzers.calibration.max_labels", calibrate.DefaultMaxLabels, float64(c.Calibration.MaxLabels)},
		{"calibrate.DefaultBins vs analyzers.calibration.bins", calibrate.DefaultBins, float64(c.Calibration.Bins)},
		{"logprob.DefaultLowProb vs analyzers.confidence.low_prob", logprob.DefaultLowProb, c.Confidence.LowProb},
	} {
		if tt.fallback != tt.value {
			t.Errorf("%s: %v, config has %v", tt.name, tt.fallback, tt.value)
		}
	}
}
