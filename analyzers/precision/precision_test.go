package precision

import (
	"math"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
)

const chatBody = `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"a b c"},"logprobs":{"content":[
{"token":"a","logprob":-0.1,"top_logprobs":[{"token":"a","logprob":-0.1},{"token":"z","logprob":-2.5}]},
{"token":"b","logprob":-9999.0,"top_logprobs":[{"token":"b","logprob":-9999.0},{"token":"y","logprob":null}]},
{"token":"c","logprob":-0.3,"top_logprobs":[{"token":"c","logprob":-0.3},{"token":"x","logprob":-1.4}]}]}}]}`

func TestParseChat(t *testing.T) {
	pos, err := ParseChat([]byte(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	if len(pos) != 3 || pos[0].Token != "a" || pos[0].Logprob != -0.1 || len(pos[0].Top) != 2 {
		t.Fatalf("positions %+v", pos)
	}
	// vLLM's placeholder and null: no value, no alternatives.
	if !math.IsNaN(pos[1].Logprob) || len(pos[1].Top) != 0 {
		t.Errorf("placeholder position %+v", pos[1])
	}
	if _, err := ParseChat([]byte(`{"choices":[{"logprobs":null}]}`)); err != ErrNoLogprobs {
		t.Errorf("no logprobs: %v", err)
	}
	if _, err := ParseChat([]byte(`{"choices":[{"logprobs":{"content":[{"logprob":NaN}]}}]}`)); err == nil {
		t.Error("NaN literal parsed")
	}
}

func TestParseCompletion(t *testing.T) {
	body := `{"choices":[{"text":"a b","logprobs":{"tokens":["a","b"],"token_logprobs":[-0.2,null],
"top_logprobs":[{"a":-0.2,"q":-1.9},null]}}]}`
	pos, err := ParseCompletion([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(pos) != 2 || pos[0].Logprob != -0.2 || len(pos[0].Top) != 2 || !math.IsNaN(pos[1].Logprob) || pos[1].Top != nil {
		t.Fatalf("positions %+v", pos)
	}
}

func TestCompare(t *testing.T) {
	ref := []Position{
		{Token: "a", Logprob: -0.1, Top: []Alt{{"a", -0.1}, {"z", -2.5}}},
		{Token: "b", Logprob: -0.2, Top: []Alt{{"b", -0.2}, {"y", -1.8}}},
		{Token: "c", Logprob: -0.3, Top: []Alt{{"c", -0.3}, {"x", -1.4}}},
		{Token: "d", Logprob: -0.3, Top: []Alt{{"d", -0.3}, {"w", -1.4}}},
	}
	same := Compare(ref, ref)
	if same.Compared != 4 || same.Split || sum(same.KL) != 0 || sum(same.Top1) != 4 || sum(same.Delta) != 0 {
		t.Errorf("identical: %+v", same)
	}
	q := []Position{
		{Token: "a", Logprob: -0.15, Top: []Alt{{"a", -0.15}, {"z", -2.0}}},
		{Token: "b", Logprob: -0.9, Top: []Alt{{"y", -0.6}, {"b", -0.9}}}, // chose b, but y ranks first: top-1 disagrees
		{Token: "c", Logprob: -0.3},                                       // no distribution: skipped, still aligned
		{Token: "e", Logprob: -0.1, Top: []Alt{{"e", -0.1}}},              // different token: the walk stops
	}
	c := Compare(q, ref)
	if c.Compared != 2 || !c.Split || sum(c.Top1) != 1 {
		t.Fatalf("compare: %+v", c)
	}
	if math.Abs(c.Delta[0]-(-0.05)) > 1e-12 || math.Abs(c.Delta[1]-(-0.7)) > 1e-12 || !(c.KL[1] > c.KL[0]) {
		t.Errorf("deltas %v, KL %v", c.Delta, c.KL)
	}
	if c := Compare(ref[:2], ref); !c.Split || c.Compared != 2 {
		t.Errorf("shorter sequence: %+v", c)
	}
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func testConfig() config.Analyzers {
	c := config.Default().Analyzers
	c.Bucket, c.Window, c.Consecutive = time.Second, time.Minute, 2
	c.Precision.MinTokens = 10
	return c
}

func TestMonitorStates(t *testing.T) {
	pair := Pair{"int8", "fp16"}
	m := New(testConfig(), []Pair{pair})
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if r := m.Evaluate(now); r.State != StateUnknown || len(r.Pairs) != 1 || r.Pairs[0].State != StateUnknown {
		t.Fatalf("empty: %+v", r)
	}
	if m.Add(now, Pair{"x", "y"}, &Comparison{}) {
		t.Error("an unknown pair was recorded")
	}
	good := &Comparison{Compared: 4, KL: []float64{0.001, 0.002, 0.001, 0.0}, Top1: []float64{1, 1, 1, 1}, Delta: []float64{-0.01, 0.02, 0, math.NaN()}}
	for range 3 {
		m.Add(now, pair, good)
	}
	r := m.Evaluate(now)
	p := r.Pairs[0]
	if r.State != StateOK || p.Tokens != 12 || p.Responses != 3 || math.Abs(float64(p.KL)-0.001) > 1e-12 || p.Top1Agreement != 1 {
		t.Fatalf("good: %+v", r)
	}
	bad := &Comparison{Compared: 4, KL: []float64{0.3, 0.2, 0.4, 0.1}, Top1: []float64{1, 0, 0, 1}, Delta: []float64{-1, -1, -1, -1}, Split: true}
	now = now.Add(2 * time.Minute) // the good ones leave the window
	for range 3 {
		m.Add(now, pair, bad)
	}
	if r := m.Evaluate(now); r.Pairs[0].State != StateOK || r.Pairs[0].Streak != 1 {
		t.Fatalf("first bad evaluation: %+v (consecutive is 2)", r)
	}
	r = m.Evaluate(now)
	if p := r.Pairs[0]; r.State != StateDivergent || p.State != StateDivergent || p.SplitShare != 1 || p.Top1Agreement != 0.5 || p.LogprobDelta != -1 {
		t.Fatalf("bad: %+v", r)
	}
	// The summary survives encoding, as replicas exchange it.
	var got summary
	b, err := m.buckets[pair].Bucket(now).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := got.UnmarshalBinary(b); err != nil || got.kl.Count() != 12 || got.split.Mean() != 1 {
		t.Errorf("round trip: %v %+v", err, got)
	}
}
