// Package confidence turns per-response token-logprob summaries into
// signal 2, confidence decay (the model grows less sure of its tokens), and
// signal 4, output drift (per-minute perplexity leaves its baseline band).
package confidence

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// States of the signals.
const (
	StateUnknown = "unknown"
	StateOK      = "ok"
	StateDecay   = "decay" // confidence decay
	StateDrift   = "drift" // output drift
)

// summary is what one time bucket holds: moments of the per-response
// statistics. It is a window.Summary.
type summary struct {
	meanLP, entropy, margin, low, ppl window.Moments
}

func (s *summary) Merge(o *summary) error {
	s.meanLP.Merge(&o.meanLP)
	s.entropy.Merge(&o.entropy)
	s.margin.Merge(&o.margin)
	s.low.Merge(&o.low)
	s.ppl.Merge(&o.ppl)
	return nil
}

func (s *summary) Reset() { *s = summary{} }

func count(s *summary) int64 { return s.meanLP.Count() }

// A Monitor keeps windows of response confidence and evaluates both
// signals. It is safe for concurrent use; Add takes a short lock.
type Monitor struct {
	cfg   config.Analyzers
	alpha atomic.Uint64 // SetAlpha's level, float64 bits; 0: cfg.Alpha

	mu      sync.Mutex
	buckets *window.Shared[summary, *summary]               // decay windows
	minutes *window.Shared[window.Moments, *window.Moments] // perplexity per minute
	pinned  *summary
	pinAt   time.Time
	band    *band // pinned perplexity baseline
	streak  int
}

// New returns a Monitor for validated analyzer settings.
func New(cfg config.Analyzers) *Monitor {
	span := int((cfg.Window+cfg.Reference)/cfg.Bucket) + 2
	mins := int(cfg.Reference/time.Minute) + cfg.Output.Minutes + 2
	return &Monitor{
		cfg:     cfg,
		buckets: window.NewShared[summary](cfg.Bucket, span, nil),
		minutes: window.NewShared[window.Moments](time.Minute, mins, nil),
	}
}

// SetAlpha sets the significance level of the monitor's tests in place
// of analyzers.alpha; zero restores it. The analyzers divide alpha among
// the segments they test (Bonferroni), so that many models do not alarm
// by chance more often than one. Safe for concurrent use.
func (m *Monitor) SetAlpha(a float64) { m.alpha.Store(math.Float64bits(a)) }

// level is the significance level in force.
func (m *Monitor) level() float64 {
	if b := m.alpha.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return m.cfg.Alpha
}

// Add records one response that ended at t. Responses without usable
// logprobs (Tokens == 0) are ignored.
func (m *Monitor) Add(t time.Time, s *logprob.Summary) {
	if s.Tokens == 0 || math.IsNaN(s.MeanLogprob) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if b := m.buckets.Bucket(t); b != nil {
		b.meanLP.Add(s.MeanLogprob)
		b.entropy.Add(s.MeanEntropy)
		if s.MarginTokens > 0 {
			b.margin.Add(s.MeanMargin)
		}
		b.low.Add(s.LowShare)
		b.ppl.Add(s.Perplexity)
	}
	if b := m.minutes.Bucket(t); b != nil {
		b.Add(s.Perplexity)
	}
}

// Pin makes the current window the reference of the decay signal and the
// last reference span of minutes the perplexity baseline.
func (m *Monitor) Pin(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	view, _ := m.buckets.View()
	cur, _, _, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	m.pinned, m.pinAt = cur, now
	b := m.baseline(now)
	m.band = &b
}

// Decay is the confidence-decay result, as /admin/signals shows it.
type Decay struct {
	State       string    `json:"state"`
	MeanLogprob stats.Num `json:"mean_logprob"`
	// Confidence is exp(mean logprob): the geometric-mean token probability.
	Confidence     stats.Num `json:"confidence"`
	Entropy        stats.Num `json:"entropy"`
	Margin         stats.Num `json:"margin"`
	LowShare       stats.Num `json:"low_confidence_share"`
	Responses      int64     `json:"responses"`
	Reference      string    `json:"reference"` // rolling or pinned
	RefMeanLogprob stats.Num `json:"reference_mean_logprob"`
	RefResponses   int64     `json:"reference_responses"`
	// Drop is the relative fall of Confidence against the reference.
	Drop   stats.Num `json:"drop"`
	PValue stats.Num `json:"p_value"` // one-sided Welch test on per-response mean logprobs
	// LowRise is the rise of LowShare against the reference, in share
	// points; LowPValue its one-sided Welch test.
	LowRise   stats.Num `json:"low_share_rise"`
	LowPValue stats.Num `json:"low_share_p_value"`
	Streak    int       `json:"streak"`
	// Reason says why the state is "unknown"; empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Sources names the APIs whose responses were served but cannot be
	// scored, and why (the Anthropic Messages API has no logprobs); set by
	// the analyzers pipeline, absent when there were none.
	Sources map[string]string `json:"sources,omitempty"`
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
	// Sources is Decay.Sources.
	Sources map[string]string `json:"sources,omitempty"`
	// Reason says why the state is "unknown"; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// Evaluate computes both signals as of now.
func (m *Monitor) Evaluate(now time.Time) (Decay, Output) { return m.evaluate(now, true) }

// Peek is Evaluate without counting the evaluation: the alarm streak
// (analyzers.consecutive evaluations in a row) neither grows nor resets,
// so that reading the signals more often than analyzers.interval (the
// admin API, evaluating on read) does not change when they alarm.
func (m *Monitor) Peek(now time.Time) (Decay, Output) { return m.evaluate(now, false) }

func (m *Monitor) evaluate(now time.Time, advance bool) (Decay, Output) {
	m.mu.Lock()
	view, _ := m.buckets.View()
	cur, _, ref, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	d := Decay{Reference: "rolling"}
	if m.pinned != nil {
		*ref = *m.pinned
		d.Reference = "pinned"
	}
	out := m.output(now)
	m.mu.Unlock()

	d.Responses, d.RefResponses = count(cur), count(ref)
	mean, refMean := cur.meanLP.Mean(), ref.meanLP.Mean()
	drop := 1 - math.Exp(mean-refMean)
	d.MeanLogprob, d.RefMeanLogprob, d.Confidence, d.Drop = stats.Num(mean), stats.Num(refMean), stats.Num(math.Exp(mean)), stats.Num(drop)
	d.Entropy, d.Margin, d.LowShare = stats.Num(cur.entropy.Mean()), stats.Num(cur.margin.Mean()), stats.Num(cur.low.Mean())
	rise := cur.low.Mean() - ref.low.Mean()
	d.LowRise = stats.Num(rise)
	decayed := false
	min := int64(m.cfg.MinRequests)
	p, pLow := math.NaN(), math.NaN()
	if d.Responses >= min && d.RefResponses >= min {
		// Two one-sided tests, Bonferroni-corrected: the mean logprob fell,
		// or the share of low-confidence tokens rose (quantization noise
		// shows there first).
		alpha := m.level() / 2
		_, p = stats.WelchGreater(refMean, ref.meanLP.SampleVar(), ref.meanLP.Count(),
			mean, cur.meanLP.SampleVar(), cur.meanLP.Count())
		_, pLow = stats.WelchGreater(cur.low.Mean(), cur.low.SampleVar(), cur.low.Count(),
			ref.low.Mean(), ref.low.SampleVar(), ref.low.Count())
		decayed = (p < alpha && drop >= m.cfg.Confidence.MinDrop) ||
			(pLow < alpha && rise >= m.cfg.Confidence.MinDrop)
		d.State = StateOK
	} else {
		d.State = StateUnknown
		d.Reason = fmt.Sprintf("%d responses with logprobs in the current window and %d in the reference; %d needed in each", d.Responses, d.RefResponses, min)
	}
	d.PValue, d.LowPValue = stats.Num(p), stats.Num(pLow)

	m.mu.Lock()
	if advance {
		if decayed {
			m.streak++
		} else {
			m.streak = 0
		}
	}
	d.Streak = m.streak
	m.mu.Unlock()
	if d.Streak >= m.cfg.Consecutive && d.State != StateUnknown {
		d.State = StateDecay
	}
	return d, out
}

// Shared hands the monitor's series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f("confidence", m.buckets)
	f("perplexity", m.minutes)
}

// band is a perplexity baseline: mean and standard deviation of per-minute
// mean perplexity.
type band struct {
	mean, std float64
	minutes   int
}

// baseline computes the band over the complete minutes of the reference
// span before the newest Output.Minutes minutes. Callers hold m.mu.
func (m *Monitor) baseline(now time.Time) band {
	var per window.Moments
	minutes, _ := m.minutes.View()
	last := minutes.Start(now)                                          // the minute in progress
	end := last.Add(-time.Duration(m.cfg.Output.Minutes) * time.Minute) // the band excludes the minutes tested
	from := end.Add(-m.cfg.Reference)
	for t, b := range minutes.All() {
		if !t.Before(from) && t.Before(end) && b.Count() > 0 {
			per.Add(b.Mean())
		}
	}
	return band{mean: per.Mean(), std: per.SampleStd(), minutes: int(per.Count())}
}

// output evaluates the output-drift signal. Callers hold m.mu.
func (m *Monitor) output(now time.Time) Output {
	b := m.baseline(now)
	if m.band != nil {
		b = *m.band
	}
	o := Output{BaselineMean: stats.Num(b.mean), BaselineStd: stats.Num(b.std), BaselineMinutes: b.minutes,
		Perplexity: stats.Num(math.NaN()), Current: stats.Num(math.NaN())}
	// Per-minute means, the minute in progress included.
	means := map[time.Time]float64{}
	minutes, _ := m.minutes.View()
	for t, mm := range minutes.All() {
		if mm.Count() > 0 {
			means[t] = mm.Mean()
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
	// The complete minutes, newest first, are tested; a minute without
	// responses ends the run.
	// A perfectly steady baseline would make any wobble an alarm: the band
	// is at least ±0.1% of the mean wide.
	std := max(b.std, 1e-3*b.mean)
	half := m.cfg.Output.Sigma * std
	dist := math.Inf(1)
	for i := 1; i <= m.cfg.Output.Minutes; i++ {
		v, ok := means[last.Add(-time.Duration(i)*time.Minute)]
		if !ok {
			dist = 0
			break
		}
		dist = min(dist, math.Abs(v-b.mean)/std)
		if math.Abs(v-b.mean) <= half {
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

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *summary) MarshalBinary() ([]byte, error) {
	return window.EncodeParts(&s.meanLP, &s.entropy, &s.margin, &s.low, &s.ppl)
}

// UnmarshalBinary decodes s.
func (s *summary) UnmarshalBinary(b []byte) error {
	return window.DecodeParts(b, &s.meanLP, &s.entropy, &s.margin, &s.low, &s.ppl)
}
