// Package output is signal 4, output drift: the per-minute mean
// perplexity of the responses (exp of minus their mean token logprob)
// leaves the band of its baseline, mean ± sigma·σ of the per-minute means,
// for analyzers.output.minutes consecutive minutes.
package output

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// States of the signal.
const (
	StateUnknown = "unknown"
	StateOK      = "ok"
	StateDrift   = "drift"
)

// A Monitor keeps the per-minute perplexity of responses and evaluates
// the signal. It is safe for concurrent use; Add takes a short lock.
type Monitor struct {
	cfg config.Analyzers

	mu      sync.Mutex
	minutes *window.Shared[window.Moments, *window.Moments] // perplexity per minute
	band    *band                                           // pinned baseline
}

// New returns a Monitor for validated analyzer settings.
func New(cfg config.Analyzers) *Monitor {
	mins := int(cfg.Reference/time.Minute) + cfg.Output.Minutes + 2
	return &Monitor{cfg: cfg, minutes: window.NewShared[window.Moments](time.Minute, mins, nil)}
}

// Add records one response that ended at t. Responses without usable
// logprobs (Tokens == 0) are ignored.
func (m *Monitor) Add(t time.Time, s *logprob.Summary) {
	if s.Tokens == 0 || math.IsNaN(s.Perplexity) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.minutes.Bucket(t); b != nil {
		b.Add(s.Perplexity)
	}
}

// Pin makes the last reference span of minutes, as of now, the baseline.
func (m *Monitor) Pin(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.baseline(now)
	m.band = &b
}

// Evaluate computes the signal as of now. The signal keeps no streak: its
// alarm already needs analyzers.output.minutes minutes outside the band.
func (m *Monitor) Evaluate(now time.Time) Output {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.output(now)
}

// Shared hands the monitor's series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f("perplexity", m.minutes)
}

// Output is the output-drift result.
type Output struct {
	State      string    `json:"state"`
	Perplexity stats.Num `json:"perplexity"` // latest complete minute's mean
	// Current is the mean perplexity of the minute in progress. Both are
	// reported whether or not the baseline exists yet.
	Current      stats.Num `json:"current_perplexity"`
	BaselineMean stats.Num `json:"baseline_mean"`
	BaselineStd  stats.Num `json:"baseline_std"`
	// Minutes is how many consecutive complete minutes, newest first, lie
	// outside the band.
	Minutes         int `json:"minutes_outside"`
	BaselineMinutes int `json:"baseline_minutes"`
	// Distance is the smallest distance from the baseline mean, in
	// baseline standard deviations, among the last analyzers.output.minutes
	// complete minutes (0 when one of them had no responses): above Sigma
	// exactly when all of them lie outside the band.
	Distance stats.Num `json:"band_distance"`
	// Sources names the APIs whose responses were served but cannot be
	// scored, and why; set by the analyzers pipeline.
	Sources map[string]string `json:"sources,omitempty"`
	// Reason says why the state is "unknown"; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// band is a perplexity baseline: mean and standard deviation of the
// per-minute mean perplexity, and that deviation split into its two
// sources. A minute's mean varies with the model (between), and with the
// responses it happens to hold, the more the fewer they are (within / n):
// a model whose share of the traffic falls answers fewer responses a
// minute, whose means scatter wider though the model did not change. So a
// minute is judged against between + within / its own count, not against
// the baseline's spread at the baseline's traffic.
type band struct {
	mean, std float64
	minutes   int
	// between is the variance of the per-minute means less their
	// sampling noise (at least 0); within the pooled variance of single
	// responses' perplexity within a minute, NaN when no baseline minute
	// held two responses.
	between, within float64
}

// stdFor is the standard deviation of the mean of a minute of n
// responses under the baseline: at least 0.1 % of the mean, since a
// perfectly steady baseline would make any wobble an alarm.
func (b *band) stdFor(n int64) float64 {
	std := b.std
	if !math.IsNaN(b.within) && n > 0 {
		std = math.Sqrt(b.between + b.within/float64(n))
	}
	return max(std, 1e-3*b.mean)
}

// baseline computes the band over the complete minutes of the reference
// span before the newest Output.Minutes minutes. Callers hold m.mu.
func (m *Monitor) baseline(now time.Time) band {
	var per window.Moments
	var m2, dof, invN float64
	minutes, _ := m.minutes.View()
	last := minutes.Start(now)                                          // the minute in progress
	end := last.Add(-time.Duration(m.cfg.Output.Minutes) * time.Minute) // the band excludes the minutes tested
	from := end.Add(-m.cfg.Reference)
	for t, b := range minutes.All() {
		if !t.Before(from) && t.Before(end) && b.Count() > 0 {
			per.Add(b.Mean())
			m2 += b.M2()
			dof += float64(b.Count() - 1)
			invN += 1 / float64(b.Count())
		}
	}
	bd := band{mean: per.Mean(), std: per.SampleStd(), minutes: int(per.Count()), within: math.NaN()}
	if dof > 0 {
		bd.within = m2 / dof
		bd.between = max(per.SampleVar()-bd.within*invN/float64(per.Count()), 0)
	}
	return bd
}

// output evaluates the output-drift signal. Callers hold m.mu.
func (m *Monitor) output(now time.Time) Output {
	b := m.baseline(now)
	if m.band != nil {
		b = *m.band
	}
	o := Output{BaselineMean: stats.Num(b.mean), BaselineStd: stats.Num(b.std), BaselineMinutes: b.minutes,
		Perplexity: stats.Num(math.NaN()), Current: stats.Num(math.NaN())}
	// Per-minute means and counts, the minute in progress included.
	means := map[time.Time]float64{}
	counts := map[time.Time]int64{}
	minutes, _ := m.minutes.View()
	for t, mm := range minutes.All() {
		if mm.Count() > 0 {
			means[t], counts[t] = mm.Mean(), mm.Count()
		}
	}
	last := m.minutes.Start(now)
	if v, ok := means[last]; ok {
		o.Current = stats.Num(v)
	}
	if v, ok := means[last.Add(-time.Minute)]; ok {
		o.Perplexity = stats.Num(v)
	}
	if b.minutes < m.cfg.Output.MinBaselineMinutes || math.IsNaN(b.std) {
		o.State = StateUnknown
		o.Reason = fmt.Sprintf("the baseline holds %d minutes with responses; %d needed", b.minutes, m.cfg.Output.MinBaselineMinutes)
		return o
	}
	o.State = StateOK
	// The complete minutes, newest first, are tested, each against the
	// spread of a minute of as many responses; a minute without responses
	// ends the run.
	dist := math.Inf(1)
	for i := 1; i <= m.cfg.Output.Minutes; i++ {
		t := last.Add(-time.Duration(i) * time.Minute)
		v, ok := means[t]
		if !ok {
			dist = 0
			break
		}
		d := math.Abs(v-b.mean) / b.stdFor(counts[t])
		dist = min(dist, d)
		if d <= m.cfg.Output.Sigma {
			break
		}
		o.Minutes++
	}
	o.Distance = stats.Num(dist)
	if o.Minutes >= m.cfg.Output.Minutes {
		o.State = StateDrift
	}
	return o
}
