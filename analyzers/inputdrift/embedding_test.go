package inputdrift

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// TestEmbeddingShift: with the embedding test on, prompts whose features
// stay alike but whose embeddings move to another subject (another centre
// in the embedding space) drift on the embedding feature alone, after no
// drift in as many evaluations of the same subject; a Peek between
// evaluations reads the last evaluation's test; the embedding windows are
// shared under their own names.
func TestEmbeddingShift(t *testing.T) {
	cfg := config.DefaultAnalyzers()
	cfg.Bucket, cfg.Window, cfg.Reference, cfg.MinRequests = time.Second, 30*time.Second, 2*time.Minute, 100
	cfg.Drift.Reservoir = 400
	cfg.Drift.Text.Embeddings.Backend, cfg.Drift.Text.Embeddings.Model = "emb", "e"
	m, err := New(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// A subject is a centre; a prompt's embedding is its subject's centre
	// plus noise ten times larger per component than the centres differ.
	centre := func() []float32 {
		v := make([]float32, 384)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	a, b := centre(), centre()
	embed := func(c []float32) *[content.VectorDim]float32 {
		v := make([]float32, len(c))
		for i := range v {
			v[i] = 0.1*c[i] + float32(rng.NormFloat64())
		}
		var p [content.VectorDim]float32
		if !content.Project(&p, v) {
			t.Fatal("no projection")
		}
		return &p
	}
	start := time.Unix(1_700_000_000, 0)
	now := start
	g := &topics{rng: rng, texts: []string{"tell me about the weather today", "what is the capital of france", "write a haiku about rain"}}
	run := func(subject []float32, seconds int) (drifts []int) {
		for s := range seconds {
			for range 20 {
				f, err := ExtractAPI(Chat, g.body())
				if err != nil {
					t.Fatal(err)
				}
				m.Add(now, &f)
				m.AddEmbedding(now, embed(subject), f.Vector[FeatChars])
				now = now.Add(50 * time.Millisecond)
			}
			r := m.Evaluate(now)
			if p := m.Peek(now).Embedding; r.Embedding != nil && (p == nil || p.AUC != r.Embedding.AUC) {
				t.Fatalf("a Peek read %+v where the evaluation had %+v", p, r.Embedding)
			}
			if slices.ContainsFunc(r.Features, func(f FeatureResult) bool { return f.Drift && f.Name != EmbeddingFeature }) {
				t.Fatalf("second %d: a feature other than the embedding drifted: %+v", s, r.Features)
			}
			if r.Embedding != nil && r.Embedding.Drift {
				drifts = append(drifts, s)
			}
		}
		return drifts
	}
	run(a, 40)
	if err := m.Pin(now); err != nil {
		t.Fatal(err)
	}
	if d := run(a, 40); len(d) > 0 {
		t.Errorf("the same subject: embedding drift at seconds %v", d)
	}
	d := run(b, 20)
	if len(d) == 0 || d[0] > 10 {
		t.Errorf("another subject: embedding drift at seconds %v, want from the 10th at the latest", d)
	}
	last := m.Last()
	t.Logf("embedding: %+v; drift from second %v", last.Embedding, d)
	var names []string
	m.Shared(func(name string, _ window.Sharer) { names = append(names, name) })
	if !slices.Contains(names, "prompt-embeddings") || !slices.Contains(names, "prompt-embeddings-reference") {
		t.Errorf("shared series %v lack the embedding windows", names)
	}
}
