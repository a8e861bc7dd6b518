package content

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/mat"

	"github.com/vigil-gw/vigil/analyzers/stats"
)

// VectorDim is the dimension prompt embeddings are projected to before a
// window keeps them: whatever the embedding model's, a row costs the same
// (12 bytes, a scale and VectorDim bytes), and a window's classifier
// fits VectorDim weights, which its few hundred held-in prompts can.
const VectorDim = 128

// vectorWords is a Vectors row's width: its scale, then VectorDim int8
// components four to a word.
// vectorStrata is how many length classes CompareVectors compares in.
const vectorStrata = 8

const vectorWords = 1 + VectorDim/4

// Project maps v, an embedding of any dimension, to the unit vector of
// dst: v scaled to unit length (embeddings compare by angle), then a fixed
// random ±1/√VectorDim projection (Achlioptas's), which keeps the
// distances between vectors, so the classifier's geometry (Johnson–
// Lindenstrauss). The projection is the same on every replica and for
// every model: component i's signs are the bits of one hash of i. ok is
// false for a zero or non-finite v.
func Project(dst *[VectorDim]float32, v []float32) bool {
	var norm float64
	for _, x := range v {
		norm += float64(x) * float64(x)
	}
	if !(norm > 0) || math.IsInf(norm, 0) {
		return false
	}
	var acc [VectorDim]float64
	for i, x := range v {
		for b := 0; b < VectorDim; b += 64 {
			signs := mix(uint64(i)*(VectorDim/64) + uint64(b/64) ^ 0x5bd1e995c0ffee)
			for j := b; j < b+64; j++ {
				if signs&(1<<(j-b)) != 0 {
					acc[j] += float64(x)
				} else {
					acc[j] -= float64(x)
				}
			}
		}
	}
	var out float64
	for _, a := range acc {
		out += a * a
	}
	if !(out > 0) {
		return false
	}
	out = math.Sqrt(out)
	for j, a := range acc {
		dst[j] = float32(a / out)
	}
	return true
}

// Vectors keeps a uniform random sample of at most Capacity prompts'
// projected embeddings, each with its prompt's length in characters:
// bottom-k, exactly mergeable, as Sample is. A vector is kept as a scale
// and VectorDim signed bytes (a relative error below 1/254 of its largest
// component), so a full Vectors of capacity k takes about k·80 bytes. A
// Vectors is not safe for concurrent use.
type Vectors struct{ rows }

// NewVectors returns an empty Vectors of capacity (at least 1, at most
// MaxSample).
func NewVectors(capacity int) *Vectors {
	return &Vectors{newRows(capacity, vectorWords)}
}

// Add offers v, the projection of a prompt of chars characters, under key.
func (s *Vectors) Add(key uint64, v *[VectorDim]float32, chars float64) {
	var big float32
	for _, x := range v {
		big = max(big, float32(math.Abs(float64(x))))
	}
	var row [vectorWords]uint32
	if big > 0 && !math.IsInf(float64(big), 0) {
		scale := big / 127
		row[0] = math.Float32bits(scale)
		for j, x := range v {
			q := int8(math.Round(float64(x / scale)))
			row[1+j/4] |= uint32(uint8(q)) << (8 * (j % 4))
		}
	}
	s.add(key, float32(chars), row[:])
}

// Merge adds o's prompts to s: s becomes the sample of both streams.
func (s *Vectors) Merge(o *Vectors) error { return s.merge(&o.rows) }

// Rows returns the kept prompts' vectors (of VectorDim components) and
// lengths, by key.
func (s *Vectors) Rows() (vecs [][]float64, chars []float64) {
	ord := s.order()
	vecs, chars = make([][]float64, len(ord)), make([]float64, len(ord))
	flat := make([]float64, len(ord)*VectorDim)
	for i, slot := range ord {
		r := s.row(slot)
		scale := float64(math.Float32frombits(r[0]))
		v := flat[i*VectorDim : (i+1)*VectorDim : (i+1)*VectorDim]
		for j := range v {
			v[j] = float64(int8(r[1+j/4]>>(8*(j%4)))) * scale
		}
		vecs[i], chars[i] = v, float64(s.chars[slot])
	}
	return vecs, chars
}

const vectorsVersion = 1

// MarshalBinary encodes s as Sample's encoding does, each row's words
// being its scale (a float32) and its components.
func (s *Vectors) MarshalBinary() ([]byte, error) { return s.marshal(vectorsVersion), nil }

// UnmarshalBinary replaces s with the Vectors encoded in data; on error s
// is unchanged.
func (s *Vectors) UnmarshalBinary(data []byte) error {
	return s.unmarshal(data, vectorsVersion, vectorWords, "content vectors", func(row []uint32) error {
		if sc := math.Float32frombits(row[0]); !(sc >= 0) || math.IsInf(float64(sc), 0) {
			return errors.New("scale not finite and >= 0")
		}
		return nil
	})
}

// CompareVectors is Compare for prompt embeddings: the same held-out
// test, the classifier being linear discriminant analysis on the first
// halves, w = Σ⁻¹(μ_cur − μ_ref) with Σ the pooled within-window
// covariance shrunk by Ledoit and Wolf's rule (stats.LedoitWolf): the
// classes' means differ where the subjects do, and the shrinkage keeps
// VectorDim weights stable on a few hundred prompts. A prompt's score is
// w·x. ok is false when either side holds fewer than 2·MinHeldOut
// prompts.
func CompareVectors(ref, cur *Vectors) (Result, bool) {
	rv, rc := ref.Rows()
	cv, cc := cur.Rows()
	if len(rv) < 2*MinHeldOut || len(cv) < 2*MinHeldOut {
		return Result{}, false
	}
	w, ok := lda(rv, cv)
	if !ok {
		return Result{}, false
	}
	score := func(vs [][]float64, cs []float64) ([]float64, []float64) {
		s, l := make([]float64, 0, len(vs)/2), make([]float64, 0, len(vs)/2)
		for i := 1; i < len(vs); i += 2 {
			var d float64
			for j, x := range vs[i] {
				d += w[j] * x
			}
			s, l = append(s, d), append(l, cs[i])
		}
		return s, l
	}
	rs, rl := score(rv, rc)
	cs, cl := score(cv, cc)
	return heldOut(rs, rl, cs, cl, vectorStrata), true
}

// lda fits the discriminant on the first halves (even rows) of ref and
// cur.
func lda(rv, cv [][]float64) ([]float64, bool) {
	var mean [2][VectorDim]float64
	var n [2]int
	for side, vs := range [2][][]float64{rv, cv} {
		for i := 0; i < len(vs); i += 2 {
			n[side]++
			for j, x := range vs[i] {
				mean[side][j] += x
			}
		}
		for j := range mean[side] {
			mean[side][j] /= float64(n[side])
		}
	}
	x := mat.NewDense(n[0]+n[1], VectorDim, nil)
	r := 0
	for side, vs := range [2][][]float64{rv, cv} {
		for i := 0; i < len(vs); i += 2 {
			for j, v := range vs[i] {
				x.Set(r, j, v-mean[side][j])
			}
			r++
		}
	}
	cov, _, err := stats.LedoitWolf(x, true)
	if err != nil {
		return nil, false
	}
	var ch mat.Cholesky
	if !ch.Factorize(cov) {
		return nil, false
	}
	d := mat.NewVecDense(VectorDim, nil)
	for j := range VectorDim {
		d.SetVec(j, mean[1][j]-mean[0][j])
	}
	var w mat.VecDense
	if err := ch.SolveVecTo(&w, d); err != nil {
		return nil, false
	}
	return w.RawVector().Data, true
}
