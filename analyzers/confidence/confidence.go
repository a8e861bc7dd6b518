// Package confidence turns per-response token-logprob summaries into
// signal 2, confidence decay: the model grows less sure of its tokens.
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
	StateDecay   = "decay"
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
	buckets *window.Shared[summary, *summary] // decay windows
	pinned  *summary
	pinAt   time.Time
	streak  int
}

// New returns a Monitor for validated analyzer settings.
func New(cfg config.Analyzers) *Monitor {
	span := int((cfg.Window+cfg.Reference)/cfg.Bucket) + 2
	return &Monitor{
		cfg:     cfg,
		buckets: window.NewShared[summary](cfg.Bucket, span, nil),
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
}

// Pin makes the current window the reference.
func (m *Monitor) Pin(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	view, _ := m.buckets.View()
	cur, _, _, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	m.pinned, m.pinAt = cur, now
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

// Evaluate computes the signal as of now.
func (m *Monitor) Evaluate(now time.Time) Decay { return m.evaluate(now, true) }

// Peek is Evaluate without counting the evaluation: the alarm streak
// (analyzers.consecutive evaluations in a row) neither grows nor resets,
// so that reading the signals more often than analyzers.interval (the
// admin API, evaluating on read) does not change when they alarm.
func (m *Monitor) Peek(now time.Time) Decay { return m.evaluate(now, false) }

func (m *Monitor) evaluate(now time.Time, advance bool) Decay {
	m.mu.Lock()
	view, _ := m.buckets.View()
	cur, _, ref, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	d := Decay{Reference: "rolling"}
	if m.pinned != nil {
		*ref = *m.pinned
		d.Reference = "pinned"
	}
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
	return d
}

// Shared hands the monitor's series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f("confidence", m.buckets)
}

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *summary) MarshalBinary() ([]byte, error) {
	return window.EncodeParts(&s.meanLP, &s.entropy, &s.margin, &s.low, &s.ppl)
}

// UnmarshalBinary decodes s.
func (s *summary) UnmarshalBinary(b []byte) error {
	return window.DecodeParts(b, &s.meanLP, &s.entropy, &s.margin, &s.low, &s.ppl)
}
