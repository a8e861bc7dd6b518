package precision

import (
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// States of the signal and of each pair.
const (
	StateUnknown   = "unknown"
	StateOK        = "ok"
	StateDivergent = "divergent"
)

// summary is one bucket of one pair: per-position KL estimate and lower
// bound, top-1 agreement and logprob delta, and per-response split counts
// (1 when the sequences chose different tokens) and methods (1 when
// teacher-forced).
type summary struct {
	kl, klLower, top1, delta, split, forced window.Moments
}

func (s *summary) Merge(o *summary) error {
	for _, p := range [][2]*window.Moments{{&s.kl, &o.kl}, {&s.klLower, &o.klLower}, {&s.top1, &o.top1}, {&s.delta, &o.delta}, {&s.split, &o.split}, {&s.forced, &o.forced}} {
		if err := p[0].Merge(p[1]); err != nil {
			return err
		}
	}
	return nil
}

func (s *summary) Reset() { *s = summary{} }

func (s *summary) MarshalBinary() ([]byte, error) {
	return window.EncodeParts(&s.kl, &s.klLower, &s.top1, &s.delta, &s.split, &s.forced)
}

func (s *summary) UnmarshalBinary(b []byte) error {
	return window.DecodeParts(b, &s.kl, &s.klLower, &s.top1, &s.delta, &s.split, &s.forced)
}

// Pair names a backend and its reference.
type Pair struct {
	Backend, Reference string
}

// A Monitor keeps one window per pair. It is safe for concurrent use.
type Monitor struct {
	cfg   config.Analyzers
	pairs []Pair // fixed at New: bounded

	mu      sync.Mutex
	buckets map[Pair]*window.Shared[summary, *summary]
	streak  map[Pair]int
}

// New returns a Monitor for the given pairs (each backend with a reference).
func New(cfg config.Analyzers, pairs []Pair) *Monitor {
	m := &Monitor{cfg: cfg, pairs: slices.Clone(pairs), buckets: map[Pair]*window.Shared[summary, *summary]{}, streak: map[Pair]int{}}
	span := int(cfg.Window/cfg.Bucket) + 2
	for _, p := range pairs {
		m.buckets[p] = window.NewShared[summary](cfg.Bucket, span, nil)
	}
	return m
}

// Add records the comparison of one shadow pair of responses made at t. A
// pair the monitor was not made for is ignored (false).
func (m *Monitor) Add(t time.Time, p Pair, c *Comparison) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.buckets[p]
	if s == nil {
		return false
	}
	b := s.Bucket(t)
	if b == nil {
		return false
	}
	for i := range c.KL {
		b.kl.Add(c.KL[i])
		if i < len(c.KLLower) {
			b.klLower.Add(c.KLLower[i])
		}
		b.top1.Add(c.Top1[i])
		if !math.IsNaN(c.Delta[i]) {
			b.delta.Add(c.Delta[i])
		}
	}
	split := 0.0
	if c.Split {
		split = 1
	}
	b.split.Add(split)
	forced := 0.0
	if c.Method == MethodTeacherForced {
		forced = 1
	}
	b.forced.Add(forced)
	return true
}

// Shared hands the pairs' series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pairs {
		// v2: the buckets with the lower bound and the method decode
		// differently from the first version's, which are left alone.
		f("precision/v2/"+p.Backend+"/"+p.Reference, m.buckets[p])
	}
}

// PairResult is one pair's window, as /admin/signals shows it.
type PairResult struct {
	Backend   string `json:"backend"`
	Reference string `json:"reference"`
	State     string `json:"state"`
	// Method is how the window's comparisons were made: teacher_forced,
	// greedy_walk, mixed (both), or "" before any.
	Method string `json:"method"`
	// KL is the mean per-token KL(reference ‖ backend) estimate, nats;
	// KLMax is its largest per-token value in the window; KLLowerBound is
	// the mean of the per-token lower bounds, which the top-k lists
	// guarantee whatever the unlisted tokens' probabilities (Divergence).
	KL           stats.Num `json:"kl"`
	KLMax        stats.Num `json:"kl_max"`
	KLLowerBound stats.Num `json:"kl_lower_bound"`
	// Top1Agreement is the share of compared positions whose most likely
	// token is the same on both.
	Top1Agreement stats.Num `json:"top1_agreement"`
	// LogprobDelta is the mean logprob delta of the chosen tokens,
	// backend − reference; RMSLogprobDelta its root mean square.
	LogprobDelta    stats.Num `json:"logprob_delta"`
	RMSLogprobDelta stats.Num `json:"rms_logprob_delta"`
	// SplitShare is the share of response pairs whose greedy sequences
	// chose different tokens somewhere.
	SplitShare stats.Num `json:"split_share"`
	Responses  int64     `json:"responses"`
	Tokens     int64     `json:"tokens"`
	Streak     int       `json:"streak"`
}

// Result is the signal, as /admin/signals shows it: "divergent" when any
// pair is.
type Result struct {
	State string       `json:"state"`
	Pairs []PairResult `json:"pairs"`
}

// Evaluate computes every pair's window as of now: the buckets of the last
// analyzers.window. A pair is divergent after analyzers.consecutive
// evaluations in a row whose mean KL is above precision.max_kl or whose
// top-1 agreement is below precision.min_top1_agreement, with at least
// precision.min_tokens compared tokens.
func (m *Monitor) Evaluate(now time.Time) Result { return m.evaluate(now, true) }

// Peek is Evaluate without counting the evaluation: the alarm streak
// (analyzers.consecutive evaluations in a row) neither grows nor resets,
// so that reading the signals more often than analyzers.interval (the
// admin API, evaluating on read) does not change when they alarm.
func (m *Monitor) Peek(now time.Time) Result { return m.evaluate(now, false) }

func (m *Monitor) evaluate(now time.Time, advance bool) Result {
	pc := m.cfg.Precision
	res := Result{State: StateUnknown, Pairs: []PairResult{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pairs {
		pr := PairResult{Backend: p.Backend, Reference: p.Reference, State: StateUnknown}
		view, _ := m.buckets[p].View()
		cur, _ := view.Range(now.Add(-m.cfg.Window), now.Add(m.cfg.Bucket))
		pr.Responses, pr.Tokens = cur.split.Count(), cur.kl.Count()
		nan := math.NaN()
		pr.KL, pr.KLMax, pr.KLLowerBound, pr.Top1Agreement = stats.Num(nan), stats.Num(nan), stats.Num(nan), stats.Num(nan)
		pr.LogprobDelta, pr.RMSLogprobDelta, pr.SplitShare = stats.Num(nan), stats.Num(nan), stats.Num(nan)
		if pr.Tokens > 0 {
			pr.KL, pr.KLMax, pr.Top1Agreement = stats.Num(cur.kl.Mean()), stats.Num(cur.kl.Max()), stats.Num(cur.top1.Mean())
			pr.KLLowerBound = stats.Num(cur.klLower.Mean())
		}
		switch f := cur.forced; {
		case f.Count() == 0:
		case f.Mean() == 1:
			pr.Method = MethodTeacherForced
		case f.Mean() == 0:
			pr.Method = MethodGreedyWalk
		default:
			pr.Method = "mixed"
		}
		if cur.delta.Count() > 0 {
			mean := cur.delta.Mean()
			pr.LogprobDelta = stats.Num(mean)
			pr.RMSLogprobDelta = stats.Num(math.Sqrt(cur.delta.Var() + mean*mean))
		}
		if pr.Responses > 0 {
			pr.SplitShare = stats.Num(cur.split.Mean())
		}
		if pr.Tokens >= int64(pc.MinTokens) {
			pr.State = StateOK
			switch {
			case !advance:
			case float64(pr.KL) > pc.MaxKL || float64(pr.Top1Agreement) < pc.MinTop1Agreement:
				m.streak[p]++
			default:
				m.streak[p] = 0
			}
			if m.streak[p] >= m.cfg.Consecutive {
				pr.State = StateDivergent
			}
		}
		pr.Streak = m.streak[p]
		switch {
		case pr.State == StateDivergent:
			res.State = StateDivergent
		case pr.State == StateOK && res.State == StateUnknown:
			res.State = StateOK
		}
		res.Pairs = append(res.Pairs, pr)
	}
	slices.SortFunc(res.Pairs, func(a, b PairResult) int {
		return strings.Compare(a.Backend+"\x00"+a.Reference, b.Backend+"\x00"+b.Reference)
	})
	return res
}
