package alert

import (
	"maps"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

// TestRulesMatchConfig keeps the rule names that config validates
// (alerts.fixed) equal to the rules this package evaluates: config cannot
// import this package, so the list exists twice.
func TestRulesMatchConfig(t *testing.T) {
	want := slices.Sorted(maps.Keys(rules))
	got := slices.Sorted(slices.Values(config.AlertRules))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("config.AlertRules differs from the alert rules (-alert +config):\n%s", diff)
	}
}

// TestDefaultsFromConfig: a zero Config takes config.Default()'s alerts
// values, the one home of every default.
func TestDefaultsFromConfig(t *testing.T) {
	d := config.Default().Alerts
	got := Config{}.withDefaults()
	want := Config{Period: d.Period, History: 7 * 24 * 60 * 60 * 1e9, Percentile: d.Percentile, Factor: d.Factor,
		MinHistory: 12, Consecutive: d.Consecutive, Silence: d.Silence, Severity: d.Severity,
		ColdStartErrorRate: d.ColdStart.ErrorRate, ColdStartLatencyFactor: d.ColdStart.LatencyFactor}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("zero Config with defaults (-want +got):\n%s", diff)
	}
}
