package inputdrift

import (
	"encoding"
	"fmt"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/window"
)

// ContentFeature is the content test's name among the features.
const ContentFeature = "content"

// explainTerms is how many risen and fallen terms a result lists.
const explainTerms = 5

// ContentResult is the content test's detail, as /admin/signals shows it:
// the held-out classifier's figures and the terms whose share of the
// prompts rose and fell most.
type ContentResult struct {
	HeldOutResult
	// Rose and Fell are the terms whose share of the prompts rose and
	// fell most from the reference to the current window. A term is a
	// word only with analyzers.drift.text.explain; otherwise its hashed
	// id ("#" and 8 hex digits).
	Rose []TermShift `json:"rose"`
	Fell []TermShift `json:"fell"`
}

// TermShift is one term whose share of the prompts moved.
type TermShift struct {
	Term      string  `json:"term"`
	Reference float64 `json:"reference_share"`
	Current   float64 `json:"current_share"`
}

// explain returns the detail of r, the content test of tref against tcur.
func (m *Monitor) explain(r content.Result, tref, tcur *textSummary) *ContentResult {
	out := &ContentResult{HeldOutResult: heldOutOf(r), Rose: []TermShift{}, Fell: []TermShift{}}
	rose, fell := content.Explain(&tref.terms, &tcur.terms, explainTerms)
	shift := func(s content.Shift) TermShift {
		t := fmt.Sprintf("#%08x", s.Hash)
		if m.cfg.Drift.Text.Explain && s.Text != "" {
			t = s.Text
		}
		return TermShift{Term: t, Reference: s.Ref, Current: s.Cur}
	}
	for _, s := range rose {
		out.Rose = append(out.Rose, shift(s))
	}
	for _, s := range fell {
		out.Fell = append(out.Fell, shift(s))
	}
	return out
}

// textSummary is what one bucket or window of the content test holds: a
// sample of its prompts' terms and the counts of the terms most prompts
// contain.
type textSummary struct {
	sample content.Sample
	terms  content.Terms
}

func newTextSummary(capacity, terms int) *textSummary {
	return &textSummary{sample: *content.NewSample(capacity), terms: *content.NewTerms(terms)}
}

// Merge adds o to s.
func (s *textSummary) Merge(o *textSummary) error {
	s.sample.Merge(&o.sample)
	return s.terms.Merge(&o.terms)
}

func (s *textSummary) full() bool { return s.sample.Seen() >= int64(s.sample.Capacity()) }

// Reset empties s.
func (s *textSummary) Reset() {
	s.sample.Reset()
	s.terms.Reset()
}

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *textSummary) MarshalBinary() ([]byte, error) {
	return window.EncodeParts([]encoding.BinaryMarshaler{&s.sample, &s.terms}...)
}

// UnmarshalBinary decodes s.
func (s *textSummary) UnmarshalBinary(b []byte) error {
	return window.DecodeParts(b, []encoding.BinaryUnmarshaler{&s.sample, &s.terms}...)
}
