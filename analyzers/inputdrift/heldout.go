package inputdrift

import (
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// EmbeddingFeature is the embedding test's name among the features.
const EmbeddingFeature = "embedding"

// HeldOutResult is a held-out classifier test's figures, as
// /admin/signals shows them: the content test's and the embedding test's.
type HeldOutResult struct {
	// AUC is the held-out classifier's area under the ROC curve among
	// prompts of like length (0.5: the windows alike).
	AUC       float64 `json:"auc"`
	PValue    float64 `json:"p_value"`
	AdjustedP float64 `json:"adjusted_p_value"`
	Drift     bool    `json:"drift"`
	// RefPrompts and CurPrompts are the held-out prompts compared.
	RefPrompts int `json:"reference_prompts"`
	CurPrompts int `json:"current_prompts"`
}

func heldOutOf(r content.Result) HeldOutResult {
	return HeldOutResult{AUC: r.AUC, PValue: r.P, RefPrompts: r.Ref, CurPrompts: r.Cur}
}

// classifierFeature is the feature a held-out classifier test adds.
func classifierFeature(name string, r content.Result) FeatureResult {
	return FeatureResult{Name: name, Test: "classifier", Statistic: r.AUC, PValue: r.P, PSI: r.PSI}
}

// EmbedderStats are the prompts sampled for the embedding test since the
// gateway started, by outcome, and those waiting, as /admin/signals shows
// them.
type EmbedderStats struct {
	Embedded int64 `json:"embedded"`
	Dropped  int64 `json:"dropped"` // the queue was full
	Failed   int64 `json:"failed"`  // their request failed
	Queued   int   `json:"queued"`
}

// heldOutRun is one held-out test before the correction: what a Peek takes
// from the last evaluation. One of content and embedding is set.
type heldOutRun struct {
	feature   FeatureResult
	content   *ContentResult
	embedding *HeldOutResult
}

// sampled is a summary whose sample a held-out test reads.
type sampled[T any] interface {
	window.Codec[T]
	full() bool // its sample holds as many prompts as it can
}

// heldOutWindows are a held-out test's windows, bucketed as the
// features' are, its pinned reference and its last run.
type heldOutWindows[T any, P sampled[T]] struct {
	fine, coarse *window.Shared[T, P]
	pinned       P
	last         *heldOutRun // nil: none, or against an older reference
	make         func() P
}

func newHeldOutWindows[T any, P sampled[T]](bucket time.Duration, fineSpan int, coarse time.Duration, coarseSpan int, make func() P) *heldOutWindows[T, P] {
	newT := func() *T { return make() }
	return &heldOutWindows[T, P]{
		fine:   window.NewShared[T, P](bucket, fineSpan, newT),
		coarse: window.NewShared[T, P](coarse, coarseSpan, newT),
		make:   make,
	}
}

// add calls f with the fine and the coarse bucket of t, where they are
// live.
func (w *heldOutWindows[T, P]) add(t time.Time, f func(P)) {
	for _, s := range []*window.Shared[T, P]{w.fine, w.coarse} {
		if b := s.Bucket(t); b != nil {
			f(P(b))
		}
	}
}

// current merges the newest fine buckets until their sample is full (it
// then holds as many prompts as it can) or they span the whole window: a
// held-out test needs more prompts than the features' tests do, and a
// sample fuller than min_requests costs nothing more to test.
func (w *heldOutWindows[T, P]) current(now time.Time, bucket, span time.Duration) (P, time.Time) {
	out := w.make()
	start := newest(w.fine, now, bucket, span, out, out.full)
	return out, start
}

// reference is the pinned sample, or the coarse buckets that end before
// curStart and begin within span of it.
func (w *heldOutWindows[T, P]) reference(curStart time.Time, span time.Duration) P {
	out := w.make()
	if w.pinned != nil {
		out.Merge((*T)(w.pinned))
		return out
	}
	from := curStart.Add(-span)
	coarse, _ := w.coarse.View()
	width := coarse.Width()
	for start, b := range coarse.All() {
		if !start.Add(width).After(curStart) && !start.Before(from.Truncate(width)) {
			out.Merge(b)
		}
	}
	return out
}

// pin makes the current window the reference.
func (w *heldOutWindows[T, P]) pin(now time.Time, bucket, span time.Duration) {
	w.pinned, _ = w.current(now, bucket, span)
	w.last = nil // against the old reference
}

// vecSummary is what one bucket or window of the embedding test holds: a
// sample of its prompts' projected embeddings.
type vecSummary struct{ vectors content.Vectors }

func newVecSummary(capacity int) *vecSummary {
	return &vecSummary{vectors: *content.NewVectors(capacity)}
}

func (s *vecSummary) Merge(o *vecSummary) error { return s.vectors.Merge(&o.vectors) }
func (s *vecSummary) Reset()                    { s.vectors.Reset() }
func (s *vecSummary) full() bool                { return s.vectors.Seen() >= int64(s.vectors.Capacity()) }

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *vecSummary) MarshalBinary() ([]byte, error) { return s.vectors.MarshalBinary() }

// UnmarshalBinary decodes s.
func (s *vecSummary) UnmarshalBinary(b []byte) error { return s.vectors.UnmarshalBinary(b) }

// AddEmbedding records the projected embedding v of a prompt of chars
// characters seen at t. It is a no-op when the embedding test is off. The
// embedder calls it once the backend answered: t may be some buckets
// back, and a bucket that left the window takes nothing.
func (m *Monitor) AddEmbedding(t time.Time, v *[content.VectorDim]float32, chars float64) {
	if m.emb == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := m.keys.Uint64()
	m.emb.add(t, func(b *vecSummary) { b.vectors.Add(key, v, chars) })
}

// clone copies r and its detail, which compare sets; nil stays nil.
func (r *heldOutRun) clone() *heldOutRun {
	if r == nil {
		return nil
	}
	c := *r
	if r.content != nil {
		d := *r.content
		c.content = &d
	}
	if r.embedding != nil {
		d := *r.embedding
		c.embedding = &d
	}
	return &c
}

// detail returns the figures of r's detail.
func (r *heldOutRun) detail() *HeldOutResult {
	if r.content != nil {
		return &r.content.HeldOutResult
	}
	return r.embedding
}

// heldOutInput is what an evaluation takes of a held-out test's windows
// under the monitor's lock: copies of the windows to test, or, for a
// Peek, the last evaluation's run.
type heldOutInput[T any, P sampled[T]] struct {
	test     bool
	ref, cur P
	last     *heldOutRun
	fresh    *heldOutRun // this evaluation's run, for keep
}

// heldOutInputs returns w's input to an evaluation as of now; nil when w
// is. Callers hold the monitor's lock.
func heldOutInputs[T any, P sampled[T]](w *heldOutWindows[T, P], now time.Time, cfg config.Analyzers, advance bool) *heldOutInput[T, P] {
	if w == nil {
		return nil
	}
	in := &heldOutInput[T, P]{last: w.last}
	if advance || w.last == nil {
		cur, start := w.current(now, cfg.Bucket, cfg.Window)
		in.test, in.cur, in.ref, in.last = true, cur, w.reference(start, cfg.Reference), nil
	}
	return in
}

// run returns a copy of the test's run: a new one, or the last; nil when
// the windows hold too few prompts to test.
func (in *heldOutInput[T, P]) run(test func(ref, cur P) *heldOutRun) *heldOutRun {
	if in == nil {
		return nil
	}
	r := in.last
	if in.test {
		r = test(in.ref, in.cur)
		in.fresh = r
	}
	return r.clone()
}

// keep records a new run as w's last. Callers hold the monitor's lock.
func (in *heldOutInput[T, P]) keep(w *heldOutWindows[T, P]) {
	if in != nil && in.test {
		w.last = in.fresh
	}
}

// testContent is the content test of ref against cur; nil when either
// holds too few prompts.
func (m *Monitor) testContent(ref, cur *textSummary) *heldOutRun {
	r, ok := content.Compare(&ref.sample, &cur.sample)
	if !ok {
		return nil
	}
	return &heldOutRun{feature: classifierFeature(ContentFeature, r), content: m.explain(r, ref, cur)}
}

// testEmbeddings is the embedding test of ref against cur; nil when
// either holds too few prompts.
func testEmbeddings(ref, cur *vecSummary) *heldOutRun {
	r, ok := content.CompareVectors(&ref.vectors, &cur.vectors)
	if !ok {
		return nil
	}
	d := heldOutOf(r)
	return &heldOutRun{feature: classifierFeature(EmbeddingFeature, r), embedding: &d}
}
