package analyzers

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/vigil-gw/vigil/config"
)

// TestFeedback: a response with logprobs can be labelled by its id; the
// label shows in the calibration report; unknown ids are refused.
func TestFeedback(t *testing.T) {
	f := newFeeder(t, config.Default().Analyzers, 5)
	var ids []string
	for range 40 {
		var r struct{ ID string }
		if err := json.Unmarshal(f.send(), &r); err != nil || r.ID == "" {
			t.Fatalf("response id: %v", err)
		}
		ids = append(ids, r.ID)
	}
	for i, id := range ids {
		if err := f.p.Feedback(t.Context(), id, i%4 != 0); err != nil {
			t.Fatalf("Feedback(%s): %v", id, err)
		}
	}
	if err := f.p.Feedback(t.Context(), "chatcmpl-unknown", true); !errors.Is(err, ErrUnknownResponse) {
		t.Errorf("unknown id: %v, want ErrUnknownResponse", err)
	}
	c := f.p.Evaluate().Confidence.(Confidence).Calibration
	if c.Labels != 40 || c.Accuracy != 0.75 || !(c.ECE >= 0) || !(c.Temperature > 0) {
		t.Errorf("calibration: %+v", c)
	}
	if _, err := json.Marshal(f.p.Evaluate()); err != nil {
		t.Errorf("signals do not encode: %v", err)
	}
}

// TestSignalsEncodeEmpty: with no traffic every signal is unknown and the
// document still encodes (NaN statistics become null).
func TestSignalsEncodeEmpty(t *testing.T) {
	p, err := New(Options{Config: config.Default().Analyzers})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p.Evaluate())
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"drift", "confidence", "latency", "output", "precision"} {
		var v struct{ State string }
		if err := json.Unmarshal(s[k], &v); err != nil || v.State != "unknown" {
			t.Errorf("%s state %q (%v), want unknown: %s", k, v.State, err, b)
		}
	}
}
