package inputdrift

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/mat"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// States of the signal.
const (
	StateUnknown = "unknown" // too little data on either side
	StateOK      = "ok"
	StateDrift   = "drift"
)

// absent stands for a parameter the request did not set (max_tokens,
// temperature, top_p), so that starting or stopping to send one is a change
// of distribution like any other. Every feature is >= 0 otherwise.
const absent = -1

// minColumn is the fewest values a feature needs on each side to be tested.
const minColumn = 20

// A Monitor keeps windows of prompt features and compares the current one
// with the reference. Add is called for every prompt; Evaluate and Pin
// periodically. It is safe for concurrent use: Add and the copy of the
// windows take a short lock; the statistics run outside it.
type Monitor struct {
	cfg   config.Analyzers
	alpha atomic.Uint64 // SetAlpha's level, float64 bits; 0: cfg.Alpha
	num   []int         // numeric features tested, indexes into Features.Vector
	cat   []int         // categorical features tested
	mdim  []int         // positions in num of the features the joint test uses

	mu     sync.Mutex
	fine   *window.Shared[summary, *summary] // current window
	coarse *window.Shared[summary, *summary] // reference
	pinned *summary
	pinAt  time.Time
	keys   *rand.PCG
	vec    []float64 // scratch for Add
	streak int
	last   Result

	// The held-out tests' windows: the content test's (nil when
	// analyzers.drift.text is off) and the embedding test's (nil unless
	// analyzers.drift.text.embeddings names a backend).
	text *heldOutWindows[textSummary, *textSummary]
	emb  *heldOutWindows[vecSummary, *vecSummary]

	fitMu sync.Mutex // guards fit; held while fitting
	fit   *jointFit
}

// New returns a Monitor for cfg, which must be valid (config.Analyzers.Validate).
func New(cfg config.Analyzers, seed uint64) (*Monitor, error) {
	m := &Monitor{cfg: cfg, keys: rand.NewPCG(seed, 0x6a09e667f3bcc909)}
	want := func(name string) bool {
		return len(cfg.Drift.Features) == 0 || slices.Contains(cfg.Drift.Features, name)
	}
	for i, n := range FeatureNames {
		if want(n) {
			m.num = append(m.num, i)
		}
	}
	for i, n := range CategoricalNames {
		if want(n) {
			m.cat = append(m.cat, i)
		}
	}
	if len(m.num)+len(m.cat) == 0 {
		return nil, errors.New("drift: no feature selected")
	}
	for j, i := range m.num {
		if jointFeature[i] {
			m.mdim = append(m.mdim, j)
		}
	}
	newSummary := func() *summary { return newSummary(cfg.Drift.Reservoir, len(m.num), len(m.cat)) }
	fineSpan := int(cfg.Window/cfg.Bucket) + 1
	// The reference is kept in coarser buckets: a twelfth of its span, and
	// never finer than the current window's.
	coarse := max(cfg.Reference/12, cfg.Bucket)
	coarseSpan := int((cfg.Reference+cfg.Window)/coarse) + 2
	m.fine = window.NewShared[summary](cfg.Bucket, fineSpan, newSummary)
	m.coarse = window.NewShared[summary](coarse, coarseSpan, newSummary)
	m.vec = make([]float64, len(m.num))
	m.last = Result{State: StateUnknown}
	if cfg.Drift.Text.Enabled {
		m.text = newHeldOutWindows(cfg.Bucket, fineSpan, coarse, coarseSpan, func() *textSummary {
			return newTextSummary(cfg.Drift.Reservoir, cfg.Drift.Text.Terms)
		})
		if cfg.Drift.Text.Embeddings.On() {
			m.emb = newHeldOutWindows(cfg.Bucket, fineSpan, coarse, coarseSpan, func() *vecSummary {
				return newVecSummary(cfg.Drift.Reservoir)
			})
		}
	}
	return m, nil
}

// jointFeature marks the features of the Mahalanobis test: the continuous
// ones, less those that would make the covariance singular. Parameters such
// as temperature are mostly constant; prompt_tokens follows prompt_chars;
// the script shares sum to one, so script_space is left out.
var jointFeature = [NumFeatures]bool{
	FeatChars: true, FeatMessages: true, FeatLatin: true, FeatCJK: true,
	FeatCyrillic: true, FeatDigits: true, FeatPunct: true,
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

// Add records the features of a prompt seen at t.
func (m *Monitor) Add(t time.Time, f *Features) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for j, i := range m.num {
		v := f.Vector[i]
		if math.IsNaN(v) {
			v = absent
		}
		m.vec[j] = v
	}
	for _, s := range []*window.Shared[summary, *summary]{m.fine, m.coarse} {
		if b := s.Bucket(t); b != nil {
			b.rows.Add(m.vec, m.keys)
			for j, i := range m.cat {
				b.cats[j].Add(f.Category(i))
			}
		}
	}
	if d := f.Content; m.text != nil && d != nil && d.Words > 0 {
		chars := f.Vector[FeatChars]
		m.text.add(t, func(b *textSummary) {
			b.sample.Add(m.keys.Uint64(), d, chars)
			b.terms.Add(d)
		})
	}
}

// Pin makes the current window, as of now, the reference until the next
// Pin. It fails when the window holds fewer than min_requests prompts.
func (m *Monitor) Pin(now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, _ := m.current(now)
	if n := cur.rows.Seen(); n < int64(m.cfg.MinRequests) {
		return fmt.Errorf("the current window holds %d prompts; %d are needed to pin a baseline", n, m.cfg.MinRequests)
	}
	m.pinned, m.pinAt = cur, now
	if m.text != nil {
		m.text.pin(now, m.cfg.Bucket, m.cfg.Window)
	}
	if m.emb != nil {
		m.emb.pin(now, m.cfg.Bucket, m.cfg.Window)
	}
	return nil
}

// current merges the newest fine buckets, newest first, until they hold
// min_requests prompts or span the whole window. It returns the merged
// summary and the start of its oldest bucket. Callers hold m.mu.
func (m *Monitor) current(now time.Time) (*summary, time.Time) {
	out := newSummary(m.cfg.Drift.Reservoir, len(m.num), len(m.cat))
	start := newest(m.fine, now, m.cfg.Bucket, m.cfg.Window, out, func() bool {
		return out.rows.Seen() >= int64(m.cfg.MinRequests)
	})
	return out, start
}

// newest merges into out the buckets of s (of width bucket) within span
// before now, newest first, until full says so, and returns the start of
// the oldest it merged (the current bucket's when none).
func newest[T any, P window.Codec[T]](s *window.Shared[T, P], now time.Time, bucket, span time.Duration, out P, full func() bool) time.Time {
	series, _ := s.View()
	start := series.Start(now)
	oldest := now.Add(-span)
	type live struct {
		start time.Time
		b     *T
	}
	var bs []live // oldest first
	for t, b := range series.All() {
		if !t.After(start) && t.Add(bucket).After(oldest) {
			bs = append(bs, live{t, b})
		}
	}
	for i := len(bs) - 1; i >= 0; i-- {
		out.Merge(bs[i].b)
		start = bs[i].start
		if full() {
			break
		}
	}
	return start
}

// reference merges the coarse buckets that end before the current window
// starts and begin within the reference span. Callers hold m.mu.
// The key identifies the reference's content, so that its robust
// covariance is fitted once per reference rather than once per evaluation.
func (m *Monitor) reference(curStart time.Time) (*summary, refKey) {
	if m.pinned != nil {
		return m.pinned.clone(), refKey{pinned: m.pinAt, seen: m.pinned.rows.Seen()}
	}
	out := newSummary(m.cfg.Drift.Reservoir, len(m.num), len(m.cat))
	from := curStart.Add(-m.cfg.Reference)
	coarse, _ := m.coarse.View()
	w := coarse.Width()
	var key refKey
	for start, b := range coarse.All() {
		if !start.Add(w).After(curStart) && !start.Before(from.Truncate(w)) {
			out.Merge(b)
			if key.from.IsZero() {
				key.from = start
			}
			key.to = start
		}
	}
	key.seen = out.rows.Seen()
	return out, key
}

// refKey identifies a reference: pinned at a time, or rolling over a range
// of coarse buckets; seen tells apart references still filling up.
type refKey struct {
	pinned, from, to time.Time
	seen             int64
}

// jointFit is the reference's side of the joint test, kept while the
// reference stays the same.
type jointFit struct {
	key    refKey
	cols   []int
	mcd    *stats.MCD
	cutoff float64
	kr, nr float64 // reference prompts beyond the cutoff, and in all
}

// Shared hands the monitor's series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	// Not "drift" and "drift-reference", the series' earlier names: their
	// buckets held the backend's prompt_tokens, which must not be merged
	// with the estimate these hold while a fleet is upgraded.
	f("prompts", m.fine)
	f("prompts-reference", m.coarse)
	if m.text != nil {
		f("prompt-text", m.text.fine)
		f("prompt-text-reference", m.text.coarse)
	}
	if m.emb != nil {
		f("prompt-embeddings", m.emb.fine)
		f("prompt-embeddings-reference", m.emb.coarse)
	}
}

// Result is one evaluation of the signal, as /admin/signals shows it.
type Result struct {
	State string `json:"state"`
	// Score is the largest PSI among the tested features (0.1: watch,
	// 0.25: alarm).
	Score     float64    `json:"score"`
	Reference string     `json:"reference"` // "rolling" or "pinned"
	PinnedAt  *time.Time `json:"pinned_at,omitempty"`
	Current   int64      `json:"current_requests"`
	Baseline  int64      `json:"reference_requests"`
	Streak    int        `json:"streak"` // evaluations in a row that found drift
	// CurrentStart is where the current window begins.
	CurrentStart time.Time       `json:"current_start"`
	Features     []FeatureResult `json:"features"`
	// Content is the content test's detail, when it ran.
	Content *ContentResult `json:"content,omitempty"`
	// Embedding is the embedding test's, when it ran.
	Embedding *HeldOutResult `json:"embedding,omitempty"`
	// Embedder counts the prompts sampled for the embedding test (the
	// fleet's result only, when the test is on).
	Embedder  *EmbedderStats `json:"embedder,omitempty"`
	Evaluated time.Time      `json:"evaluated"`
	// Reason says why the state is "unknown"; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// FeatureResult is one test of one feature.
type FeatureResult struct {
	Name      string  `json:"name"`
	Test      string  `json:"test"` // ks, chi2 or mahalanobis
	Statistic float64 `json:"statistic"`
	PValue    float64 `json:"p_value"`
	// AdjustedP is the p-value after the multiple-testing correction.
	AdjustedP float64 `json:"adjusted_p_value"`
	// PSI is the feature's population stability index (for mahalanobis:
	// the share of current prompts beyond the cutoff minus the reference's).
	PSI   float64 `json:"psi"`
	Drift bool    `json:"drift"`
}

// Last returns the latest evaluation.
func (m *Monitor) Last() Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// Evaluate compares the current window with the reference as of now,
// records the result as Last and returns it.
func (m *Monitor) Evaluate(now time.Time) Result { return m.evaluate(now, true) }

// Peek is Evaluate without counting the evaluation: the alarm streak
// (analyzers.consecutive evaluations in a row) neither grows nor resets,
// so that reading the signals more often than analyzers.interval (the
// admin API, evaluating on read) does not change when they alarm.
func (m *Monitor) Peek(now time.Time) Result { return m.evaluate(now, false) }

func (m *Monitor) evaluate(now time.Time, advance bool) Result {
	m.mu.Lock()
	cur, curStart := m.current(now)
	ref, key := m.reference(curStart)
	// A Peek (the admin API reading the signals) takes the held-out tests
	// of the last evaluation: their merges and classifiers cost far more
	// than the features' tests, and dashboards poll more often than
	// analyzers.interval. Their windows are copied here, under the lock,
	// and tested outside it.
	text := heldOutInputs(m.text, now, m.cfg, advance)
	emb := heldOutInputs(m.emb, now, m.cfg, advance)
	res := Result{Reference: "rolling", Evaluated: now.UTC(), CurrentStart: curStart.UTC()}
	if m.pinned != nil {
		res.Reference = "pinned"
		at := m.pinAt
		res.PinnedAt = &at
	}
	m.mu.Unlock()

	res.Current, res.Baseline = cur.rows.Seen(), ref.rows.Seen()
	drifted := false
	if res.Current >= int64(m.cfg.MinRequests) && res.Baseline >= int64(m.cfg.MinRequests) {
		var runs []*heldOutRun
		if r := text.run(func(ref, cur *textSummary) *heldOutRun { return m.testContent(ref, cur) }); r != nil {
			runs = append(runs, r)
		}
		if r := emb.run(testEmbeddings); r != nil {
			runs = append(runs, r)
		}
		res.Features = m.compare(ref, cur, key, runs)
		for _, r := range runs {
			if r.content != nil {
				res.Content = r.content
			}
			if r.embedding != nil {
				res.Embedding = r.embedding
			}
		}
		if advance {
			m.mu.Lock()
			text.keep(m.text)
			emb.keep(m.emb)
			m.mu.Unlock()
		}
		res.State = StateOK
		for _, f := range res.Features {
			res.Score = max(res.Score, f.PSI)
			drifted = drifted || f.Drift
		}
	} else {
		res.State = StateUnknown
		res.Reason = fmt.Sprintf("%d prompts in the current window and %d in the reference; %d needed in each", res.Current, res.Baseline, m.cfg.MinRequests)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if advance {
		if drifted {
			m.streak++
		} else {
			m.streak = 0
		}
	}
	res.Streak = m.streak
	if m.streak >= m.cfg.Consecutive && res.State != StateUnknown {
		res.State = StateDrift
	}
	if advance {
		m.last = res
	}
	return res
}

// compare runs every test of ref against cur, adds the held-out tests'
// runs and applies the correction, setting the runs' details' drift.
func (m *Monitor) compare(ref, cur *summary, key refKey, runs []*heldOutRun) []FeatureResult {
	var out []FeatureResult
	refRows, curRows := ref.rows.Rows(), cur.rows.Rows()
	for j, i := range m.num {
		a, b := column(refRows, j), column(curRows, j)
		if len(a) < minColumn || len(b) < minColumn {
			continue
		}
		ks, err := stats.KS2Samp(a, b)
		if err != nil {
			continue
		}
		psi, err := numericPSI(a, b, m.cfg.Drift.PSIBins)
		if err != nil {
			psi = 0
		}
		out = append(out, FeatureResult{Name: FeatureNames[i], Test: "ks", Statistic: ks.Statistic, PValue: ks.PValue, PSI: psi})
	}
	for j, i := range m.cat {
		rc, cc := ref.cats[j], cur.cats[j]
		cats := union(rc.Categories(), cc.Categories())
		if len(cats) < 2 {
			continue // one category on both sides: nothing can differ
		}
		r, c := make([]float64, len(cats)+1), make([]float64, len(cats)+1)
		for k, name := range cats {
			r[k], c[k] = float64(rc.Get(name)), float64(cc.Get(name))
		}
		r[len(cats)], c[len(cats)] = float64(rc.Other()), float64(cc.Other())
		chi, err := stats.ChiSquare([][]float64{r, c})
		if err != nil {
			continue
		}
		psi, err := stats.PSICategorical(r, c)
		if err != nil {
			psi = 0
		}
		out = append(out, FeatureResult{Name: CategoricalNames[i], Test: "chi2", Statistic: chi.Statistic, PValue: chi.PValue, PSI: psi})
	}
	if m.cfg.Drift.Mahalanobis {
		if r, ok := m.joint(key, refRows, curRows); ok {
			out = append(out, r)
		}
	}
	for _, r := range runs {
		out = append(out, r.feature)
	}
	adjust(out, m.cfg.Drift.Correction)
	for k := range out {
		f := &out[k]
		effect := f.PSI >= m.cfg.Drift.MinPSI
		if f.Test == "classifier" {
			// Its effect is the classifier's AUC, on the PSI scale
			// through two normal distributions of that AUC when that
			// says more than the held-out scores' PSI; a content
			// drift scores at least min_psi, so that the drift score
			// (and its alert) sees it.
			effect = f.Statistic >= m.cfg.Drift.Text.MinAUC
			f.PSI = max(f.PSI, content.BinormalPSI(f.Statistic))
			if effect {
				f.PSI = max(f.PSI, m.cfg.Drift.MinPSI)
			}
		}
		f.Drift = f.AdjustedP < m.level() && effect
	}
	for _, f := range out {
		for _, r := range runs {
			if f.Name == r.feature.Name {
				d := r.detail()
				d.Drift, d.AdjustedP = f.Drift, f.AdjustedP
			}
		}
	}
	return out
}

// minJointShift is the smallest rise in the share of prompts beyond the
// cutoff that counts as joint drift: 5 percentage points.
const minJointShift = 0.05

// joint fits the reference's robust covariance (FastMCD) on the continuous
// features and compares the share of reference and current prompts beyond
// the chi-square 0.975 cutoff, with a one-sided two-proportion z-test. The
// reference's own share is the baseline, since prompt features are far from
// gaussian. Columns that are constant in more than half of the reference are
// left out: the MCD support (about half the rows) could then be constant in
// them and the covariance singular.
func (m *Monitor) joint(key refKey, refRows, curRows [][]float64) (FeatureResult, bool) {
	fit := m.fitJoint(key, refRows)
	if fit == nil || len(curRows) < minColumn {
		return FeatureResult{}, false
	}
	kc, nc := fit.beyond(m, curRows), float64(len(curRows))
	pr, pc := fit.kr/fit.nr, kc/nc
	pooled := (fit.kr + kc) / (fit.nr + nc)
	pv := 1.0
	if se := math.Sqrt(pooled * (1 - pooled) * (1/fit.nr + 1/nc)); se > 0 {
		pv = 0.5 * math.Erfc((pc-pr)/se/math.Sqrt2)
	}
	res := FeatureResult{Name: "all", Test: "mahalanobis", Statistic: pc, PValue: pv, PSI: max(0, pc-pr)}
	if pc-pr >= minJointShift {
		// Let a large enough rise through the shared effect-size rule.
		res.PSI = max(m.cfg.Drift.MinPSI, pc-pr)
	}
	return res, true
}

// fitJoint returns the reference's fit, from the cache when the reference
// is unchanged; nil when no fit is possible.
func (m *Monitor) fitJoint(key refKey, refRows [][]float64) *jointFit {
	m.fitMu.Lock()
	defer m.fitMu.Unlock()
	if m.fit != nil && m.fit.key == key {
		return m.fit
	}
	m.fit = nil
	var cols []int
	for _, j := range m.mdim {
		if modeShare(refRows, j) <= 0.5 {
			cols = append(cols, j)
		}
	}
	p := len(cols)
	if p == 0 || len(refRows) < 4*(p+1) {
		return nil
	}
	x := mat.NewDense(len(refRows), p, nil)
	for r, row := range refRows {
		for k, j := range cols {
			x.Set(r, k, transform(m.num[j], row[j]))
		}
	}
	mcd, err := stats.FitMCD(x, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		return nil
	}
	fit := &jointFit{key: key, cols: cols, mcd: mcd, cutoff: stats.ChiSquareCutoff(p, 0.975), nr: float64(len(refRows))}
	fit.kr = fit.beyond(m, refRows)
	m.fit = fit
	return fit
}

// beyond counts the rows whose squared robust distance exceeds the cutoff.
func (f *jointFit) beyond(m *Monitor, rows [][]float64) float64 {
	vec := make([]float64, len(f.cols))
	n := 0
	for _, row := range rows {
		for k, j := range f.cols {
			vec[k] = transform(m.num[j], row[j])
		}
		if f.mcd.Mahalanobis(vec) > f.cutoff {
			n++
		}
	}
	return float64(n)
}

// numericPSI is stats.PSI, except for a reference with at most bins
// distinct values (a constant, a flag-like or a zero-inflated feature, whose
// quantile edges collapse into one or two bins and would hide any change):
// then each reference value is its own bin, plus one for values the
// reference never took.
func numericPSI(ref, cur []float64, bins int) (float64, error) {
	vals := slices.Clone(ref)
	slices.Sort(vals)
	vals = slices.Compact(vals)
	if len(vals) > bins {
		return stats.PSI(ref, cur, bins)
	}
	count := func(xs []float64) []float64 {
		c := make([]float64, len(vals)+1)
		for _, x := range xs {
			if i, ok := slices.BinarySearch(vals, x); ok {
				c[i]++
			} else {
				c[len(vals)]++
			}
		}
		return c
	}
	return stats.PSICategorical(count(ref), count(cur))
}

// transform puts counts on a log scale, as their spread grows with their size.
func transform(feature int, v float64) float64 {
	switch feature {
	case FeatChars, FeatTokens:
		return math.Log1p(max(v, 0))
	}
	return v
}

func modeShare(rows [][]float64, j int) float64 {
	counts := map[float64]int{}
	best := 0
	for _, r := range rows {
		counts[r[j]]++
		best = max(best, counts[r[j]])
	}
	if len(rows) == 0 {
		return 1
	}
	return float64(best) / float64(len(rows))
}

func column(rows [][]float64, j int) []float64 {
	out := make([]float64, len(rows))
	for i, r := range rows {
		out[i] = r[j]
	}
	return out
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// adjust sets AdjustedP: Benjamini–Hochberg step-up adjusted p-values
// (controlling the false-discovery rate) or Bonferroni (family-wise).
func adjust(rs []FeatureResult, method string) {
	n := len(rs)
	if n == 0 {
		return
	}
	if method == "bonferroni" {
		for i := range rs {
			rs[i].AdjustedP = min(1, rs[i].PValue*float64(n))
		}
		return
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return rs[idx[a]].PValue < rs[idx[b]].PValue })
	next := 1.0
	for k := n - 1; k >= 0; k-- {
		i := idx[k]
		next = min(next, rs[i].PValue*float64(n)/float64(k+1))
		rs[i].AdjustedP = next
	}
}

// summary is what one bucket or window holds: a uniform sample of feature
// vectors and the counts of each categorical feature.
type summary struct {
	rows window.Reservoir
	cats []window.Counts
}

func newSummary(capacity, dim, cats int) *summary {
	s := &summary{rows: *window.NewReservoir(capacity, dim), cats: make([]window.Counts, cats)}
	for i := range s.cats {
		s.cats[i] = *window.NewCounts(window.DefaultMaxCategories)
	}
	return s
}

// Merge adds o to s.
func (s *summary) Merge(o *summary) error {
	err := s.rows.Merge(&o.rows)
	for i := range s.cats {
		err = errors.Join(err, s.cats[i].Merge(&o.cats[i]))
	}
	return err
}

// Reset empties s.
func (s *summary) Reset() {
	s.rows.Reset()
	for i := range s.cats {
		s.cats[i].Reset()
	}
}

func (s *summary) clone() *summary {
	c := newSummary(s.rows.Capacity(), s.rows.Dim(), len(s.cats))
	c.Merge(s)
	return c
}

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *summary) MarshalBinary() ([]byte, error) {
	parts := []encoding.BinaryMarshaler{&s.rows}
	for i := range s.cats {
		parts = append(parts, &s.cats[i])
	}
	return window.EncodeParts(parts...)
}

// UnmarshalBinary decodes s, which must have been made by newSummary with
// the same number of categorical features.
func (s *summary) UnmarshalBinary(b []byte) error {
	parts := []encoding.BinaryUnmarshaler{&s.rows}
	for i := range s.cats {
		parts = append(parts, &s.cats[i])
	}
	return window.DecodeParts(b, parts...)
}
