package alert

import (
	"fmt"
	"math"
	"strings"

	"github.com/vigil-gw/vigil/analyzers/confidence"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/output"
)

// Rule names: the keys of the values passed to Engine.Observe, of
// Config.Fixed, and the "rule" label of every alert. Every rule breaches
// when its value is above its threshold (each value is oriented so that
// higher is worse).
const (
	// RuleDrift is the input-drift score: the largest PSI among the
	// tested prompt features.
	RuleDrift = "drift_score"
	// RuleConfidenceDrop is the relative fall of the geometric-mean token
	// probability against its reference (confidence.Decay.Drop).
	RuleConfidenceDrop = "confidence_drop"
	// RuleTTFT is the P95 of time to first token, in milliseconds.
	RuleTTFT = "latency_ttft_p95"
	// RuleE2E is the P95 of end-to-end latency, in milliseconds.
	RuleE2E = "latency_e2e_p95"
	// RuleErrorRate is the share of failed requests in the period,
	// supplied by the caller (the gateway counts errors, not the
	// analyzers).
	RuleErrorRate = "error_rate"
	// RulePerplexity is the perplexity's distance from its baseline band:
	// the smallest |ppl − mean| / σ among the last analyzers.output.minutes
	// per-minute means (output.Output.Distance). Its threshold is fixed
	// at 3 (the ±3σ band) unless Config.Fixed says otherwise, so it
	// breaches when every one of those minutes is outside the band: the
	// design's "±3σ for 5 minutes". One such period fires
	// (DefaultConsecutive).
	RulePerplexity = "perplexity_band"
	// RulePrecision is the precision divergence of a low-precision backend
	// against its reference: the mean per-token KL(reference ‖ backend) of
	// the shadow comparisons in the window, one series per backend.
	RulePrecision = "precision_divergence"
	// RuleErrorBudget is the error budget's burn rate over a window pair
	// of the SLO (alerts.slo): the smaller of the long and the short
	// window's burn rates, so that it is above the pair's burn factor (its
	// Value.Fixed threshold) when both are. One series per window pair,
	// told apart by the label "window" (e.g. "1h/5m"); one period fires.
	RuleErrorBudget = "error_budget_burn"
	// RuleBackendDown is 1 for a backend that has been out of service
	// (failing its health checks, or ejected) for a whole alert period and
	// is still out, else 0; its threshold is fixed at 0.5, one period
	// fires, and it resolves when the backend is back. It takes over from
	// the backend's error rate, which has nothing to measure once no
	// request reaches the backend.
	RuleBackendDown = "backend_down"
	// RuleBackendSlow is a backend's slowness: how many times slower than
	// the other backends' answers around them three quarters of its
	// latest good answers are (analyzers/slow.go). One series
	// per backend; its threshold is fixed at 3 (three times slower than
	// the others), so that a fleet-wide slowdown, which the latency rules
	// report, never makes one backend slow.
	RuleBackendSlow = "backend_slow"
)

// MinQuantileValues is the fewest values a window needs for its P95 to be
// a rule's value: 1/(1 − 0.95). Below it the "P95" is the window's largest
// value, and one slow response would breach.
const MinQuantileValues = 20

// DefaultFixed are the rules whose threshold is fixed unless Config.Fixed
// names them.
var DefaultFixed = map[string]float64{RulePerplexity: 3, RuleBackendDown: 0.5, RuleBackendSlow: 3}

// DefaultConsecutive are the rules that fire after their own number of
// breaching periods rather than Config.Consecutive. The perplexity band's
// value already requires analyzers.output.minutes minutes outside the band
// (the design's "±3σ for 5 minutes"): one period with it fires. Three
// periods would be too late, not only slow: a rolling baseline takes in
// the minutes after a lasting step, widens and swallows it.
var DefaultConsecutive = map[string]int{RulePerplexity: 1, RuleErrorBudget: 1, RuleBackendDown: 1}

// DefaultFloor are the least adaptive thresholds of the rules whose
// values hover around zero: the PSI "watch" level for drift, a 5 % fall of
// confidence, 1 % of errors, and 0.01 nats of KL per token for precision
// (a healthy 8-bit quantization reads 10⁻⁴ to 10⁻³: its wobbles are no
// divergence; a 4-bit one reads about 10⁻², where the adaptive threshold
// takes over).
var DefaultFloor = map[string]float64{RuleDrift: 0.1, RuleConfidenceDrop: 0.05, RuleErrorRate: 0.01, RulePrecision: 0.01}

// ruleInfo is what an alert of a rule says.
type ruleInfo struct {
	alertname string
	signal    string // the /admin/signals section
	summary   string
}

var rules = map[string]ruleInfo{
	RuleDrift:          {"VigilInputDrift", "drift", "Input drift score above its threshold"},
	RuleConfidenceDrop: {"VigilConfidenceDecay", "confidence", "Token confidence fell below its usual level"},
	RuleTTFT:           {"VigilLatencyTTFT", "latency", "Time to first token P95 above its threshold"},
	RuleE2E:            {"VigilLatencyE2E", "latency", "End-to-end latency P95 above its threshold"},
	RuleErrorRate:      {"VigilErrorRate", "errors", "Error rate above its threshold"},
	RulePerplexity:     {"VigilOutputDrift", "output", "Perplexity outside its baseline band"},
	RulePrecision:      {"VigilPrecisionDivergence", "precision", "Precision divergence above its threshold"},
	RuleErrorBudget:    {"VigilErrorBudgetBurn", "errors", "Error budget burning faster than its SLO allows"},
	RuleBackendDown:    {"VigilBackendDown", "backend", "Backend out of service (unhealthy or ejected) for a whole alert period"},
	RuleBackendSlow:    {"VigilBackendSlow", "backend", "Backend answering far slower than the other backends"},
}

// info returns the description of rule; an unknown rule name is its own
// alert name and signal.
func info(rule string) ruleInfo {
	if r, ok := rules[rule]; ok {
		return r
	}
	return ruleInfo{alertname: rule, signal: rule, summary: rule + " above its threshold"}
}

// Signals is one evaluation of the analyzers, the input of Values. Nil
// fields are absent: their rules are skipped this period.
type Signals struct {
	Drift      *inputdrift.Result
	Confidence *confidence.Decay
	Output     *output.Output
	Latency    *latency.Result
	// ErrorRate is the share of failed requests in the period.
	ErrorRate *float64
	// Labels go on every value (backend, model); nil: none.
	Labels map[string]string
}

// Values maps one evaluation to the period values of the rules. A signal
// whose state is "unknown" (too little data) or whose value is not finite
// gives no value; the latency P95s need no verdict, only enough responses
// (MinQuantileValues), so that they alert from the first minutes.
func Values(s Signals) map[string]Value {
	out := map[string]Value{}
	put := func(rule string, v float64) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			out[rule] = Value{V: v, Labels: s.Labels}
		}
	}
	verdict := func(rule string, b bool) {
		if v, ok := out[rule]; ok {
			v.Verdict = &b
			out[rule] = v
		}
	}
	if d := s.Drift; d != nil && d.State != inputdrift.StateUnknown {
		put(RuleDrift, d.Score)
		verdict(RuleDrift, d.State == inputdrift.StateDrift)
		if v, ok := out[RuleDrift]; ok {
			v.Annotations = driftNotes(d)
			out[RuleDrift] = v
		}
	}
	if c := s.Confidence; c != nil && c.State != confidence.StateUnknown {
		put(RuleConfidenceDrop, float64(c.Drop))
		verdict(RuleConfidenceDrop, c.State == confidence.StateDecay)
	}
	if o := s.Output; o != nil && o.State != output.StateUnknown {
		put(RulePerplexity, float64(o.Distance))
	}
	if l := s.Latency; l != nil {
		for rule, metric := range map[string]string{RuleTTFT: "ttft", RuleE2E: "e2e"} {
			st := l.Metrics[metric]
			if st.Count < MinQuantileValues {
				continue
			}
			put(rule, float64(st.P95))
			if v, ok := out[rule]; ok && !math.IsNaN(float64(st.P95Lower)) {
				lower := float64(st.P95Lower)
				v.Lower = &lower
				out[rule] = v
			}
		}
	}
	if s.ErrorRate != nil {
		put(RuleErrorRate, *s.ErrorRate)
	}
	return out
}

// driftNotes says what drifted: the features, and for the content test
// the terms whose share of the prompts rose and fell most (words only
// with analyzers.drift.text.explain, hashed ids otherwise). Nil when
// nothing drifted.
func driftNotes(d *inputdrift.Result) map[string]string {
	var drifted []string
	for _, f := range d.Features {
		if f.Drift {
			drifted = append(drifted, f.Name)
		}
	}
	if len(drifted) == 0 {
		return nil
	}
	notes := map[string]string{"drifted": strings.Join(drifted, ", ")}
	if c := d.Content; c != nil && c.Drift {
		terms := func(ts []inputdrift.TermShift) string {
			var parts []string
			for _, t := range ts {
				parts = append(parts, fmt.Sprintf("%s %.0f%% → %.0f%%", t.Term, 100*t.Reference, 100*t.Current))
			}
			return strings.Join(parts, ", ")
		}
		if len(c.Rose) > 0 {
			notes["terms_rose"] = terms(c.Rose)
		}
		if len(c.Fell) > 0 {
			notes["terms_fell"] = terms(c.Fell)
		}
	}
	return notes
}
