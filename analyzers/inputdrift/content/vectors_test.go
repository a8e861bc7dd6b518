package content

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// bagEmbedder embeds a text as the sum of its distinct words' fixed random
// gaussian vectors, of dim components: texts that share words are close,
// as they are under a model's embedding, and its dimension is a model's,
// not VectorDim. It caches each prompt's projection.
type bagEmbedder struct {
	dim   int
	cache map[string]*[VectorDim]float32
}

func (e *bagEmbedder) project(t *testing.T, text string) *[VectorDim]float32 {
	if p := e.cache[text]; p != nil {
		return p
	}
	v := make([]float32, e.dim)
	seen := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsDigit(c) }) {
		if seen[w] {
			continue
		}
		seen[w] = true
		h := fnv.New64a()
		h.Write([]byte(w))
		r := rand.New(rand.NewPCG(h.Sum64(), 3))
		for j := range v {
			v[j] += float32(r.NormFloat64())
		}
	}
	p := new([VectorDim]float32)
	if !Project(p, v) {
		t.Fatalf("no projection of %q", text)
	}
	if e.cache == nil {
		e.cache = map[string]*[VectorDim]float32{}
	}
	e.cache[text] = p
	return p
}

// fillVectors adds n prompts of texts, each in a template, to s.
func (e *bagEmbedder) fill(t *testing.T, s *Vectors, rng *rand.Rand, texts []string, n int) {
	for range n {
		p := fmt.Sprintf(templates[rng.IntN(len(templates))], texts[rng.IntN(len(texts))])
		s.Add(rng.Uint64(), e.project(t, p), float64(len([]rune(p))))
	}
}

// TestCompareVectorsOnFortunes is TestCompareOnFortunes for embeddings of
// 384 components (a small sentence model's), at the same level: the level
// holds on resamples and on a length change alone, and a window wholly of
// other subjects is found in every seed. Bag-of-words vectors carry a
// subject that is 30 % of the window weakly: its mean AUC (0.533
// measured) must stay clear of chance's 0.5, whose spread over 20 seeds is
// about 0.004.
func TestCompareVectorsOnFortunes(t *testing.T) {
	testutil.SkipStatisticalUnderRace(t)
	e := &bagEmbedder{dim: 384}
	aucs := fortuneCases(t, 0, func(rng *rand.Rand, ref, pool []string, k int) (Result, bool) {
		r, cur := NewVectors(fortuneN), NewVectors(fortuneN)
		e.fill(t, r, rng, ref, 3*fortuneN)
		e.fill(t, cur, rng, pool, k)
		e.fill(t, cur, rng, ref, 2*fortuneN-k)
		return CompareVectors(r, cur)
	})
	if a := aucs["30% other subjects"]; a < 0.52 {
		t.Errorf("30%% other subjects: mean AUC %.3f, want at least 0.52", a)
	}
}

// TestVectorsMergeExact: Vectors merge as Samples do, bit for bit in
// either order, and survive their encoding; a row keeps its vector to
// within the quantization's step.
func TestVectorsMergeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := &bagEmbedder{dim: 100}
	texts := []string{"the oven bakes bread", "a comet crosses the sky", "courts hear the appeal", "fresh basil and tomato"}
	whole, a, b := NewVectors(16), NewVectors(16), NewVectors(16)
	for i := range 200 {
		key, text := rng.Uint64(), fmt.Sprintf("%s %d", texts[i%4], i)
		v := e.project(t, text)
		whole.Add(key, v, float64(len(text)))
		if rng.IntN(2) == 0 {
			a.Add(key, v, float64(len(text)))
		} else {
			b.Add(key, v, float64(len(text)))
		}
	}
	ab, ba := NewVectors(16), NewVectors(16)
	ab.Merge(a)
	ab.Merge(b)
	ba.Merge(b)
	ba.Merge(a)
	want, _ := whole.MarshalBinary()
	for name, s := range map[string]*Vectors{"a+b": ab, "b+a": ba} {
		got, _ := s.MarshalBinary()
		if !slices.Equal(got, want) {
			t.Errorf("%s: the merge differs from the whole stream's sample", name)
		}
		var dec Vectors
		if err := dec.UnmarshalBinary(got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if again, _ := dec.MarshalBinary(); !slices.Equal(again, want) {
			t.Errorf("%s: decoded and encoded again, it differs", name)
		}
		wv, _ := whole.Rows()
		dv, _ := dec.Rows()
		if d := cmp.Diff(wv, dv); d != "" {
			t.Errorf("%s: decoded vectors differ (-want +got):\n%s", name, d)
		}
	}
	// Quantization: each component within half a step of its value.
	s := NewVectors(1)
	v := e.project(t, "a comet crosses the sky")
	s.Add(1, v, 22)
	got, _ := s.Rows()
	var big float64
	for _, x := range v {
		big = max(big, math.Abs(float64(x)))
	}
	for j, x := range v {
		if d := math.Abs(got[0][j] - float64(x)); d > big/254*1.0001 {
			t.Errorf("component %d: %v kept as %v", j, x, got[0][j])
		}
	}
	if err := new(Vectors).UnmarshalBinary(append([]byte(nil), want[:len(want)-3]...)); err == nil {
		t.Error("a truncated encoding decoded")
	}
}
