package window

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// fuzzDecode checks that UnmarshalBinary never panics, fails only with the
// package's errors, and that whatever it accepts encodes canonically: encode,
// decode and encode again gives the same bytes. use then exercises the
// decoded value, which must not panic either.
func fuzzDecode[T any, P codec[T]](f *testing.F, seeds [][]byte, use func(*T)) {
	for _, s := range seeds {
		f.Add(s)
		if len(s) > 1 {
			f.Add(s[:len(s)/2])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := new(T)
		if err := P(v).UnmarshalBinary(data); err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrVersion", err)
			}
			return
		}
		b1 := encode[T, P](t, v)
		w := new(T)
		if err := P(w).UnmarshalBinary(b1); err != nil {
			t.Fatalf("re-encoding of accepted input rejected: %v", err)
		}
		if b2 := encode[T, P](t, w); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not canonical:\n%x\n%x", b1, b2)
		}
		use(v)
	})
}

func FuzzMomentsUnmarshal(f *testing.F) {
	seeds := [][]byte{{}, {tagMoments}}
	for _, m := range []*Moments{{}, momentsOf(1), momentsOf(-1, 2, math.NaN())} {
		seeds = append(seeds, encode[Moments](f, m))
	}
	fuzzDecode[Moments](f, seeds, func(m *Moments) {
		m.Merge(m)
		m.Add(1)
		_ = m.Std() + m.SampleVar()
	})
}

func FuzzSketchUnmarshal(f *testing.F) {
	seeds := [][]byte{{}, {tagSketch}}
	for i, ds := range datasets {
		seeds = append(seeds, encode[Sketch](f, sketchOf(f, 0, 8*(i%2), draw(uint64(i), 50, ds.gen))))
	}
	seeds = append(seeds, encode[Sketch](f, new(Sketch)))
	fuzzDecode[Sketch](f, seeds, func(s *Sketch) {
		for _, q := range []float64{0, 0.3, 0.5, 0.99, 1} {
			if s.Count() > 0 && math.IsNaN(s.Quantile(q)) {
				panic("NaN quantile of a non-empty sketch")
			}
		}
		if err := s.Merge(s); err != nil {
			panic(err)
		}
		o, _ := NewSketch(s.Alpha(), s.MaxBuckets())
		o.Add(-1e300)
		o.Add(1e300)
		o.Add(1e-8)
		if err := s.Merge(o); err != nil {
			panic(err)
		}
		s.Add(3)
	})
}

func FuzzReservoirUnmarshal(f *testing.F) {
	seeds := [][]byte{{}, {tagReservoir}}
	for _, r := range []*Reservoir{new(Reservoir), reservoirOf(4, 2, rand.NewPCG(1, 2), vectors(0, 3, 2)), reservoirOf(3, 1, rand.NewPCG(1, 2), vectors(0, 9, 1))} {
		seeds = append(seeds, encode[Reservoir](f, r))
	}
	fuzzDecode[Reservoir](f, seeds, func(r *Reservoir) {
		_ = r.Rows()
		if r.Dim() > 0 {
			_ = r.Column(r.Dim() - 1)
			r.Add(make([]float64, r.Dim()), rand.NewPCG(1, 1))
		}
		if err := r.Merge(r); err != nil {
			panic(err)
		}
	})
}

func FuzzCountsUnmarshal(f *testing.F) {
	seeds := [][]byte{{}, {tagCounts}}
	for _, c := range []*Counts{new(Counts), countsOf(3, "a", "", "b"), countsOf(2, "x", "y", "z", "w", "x")} {
		seeds = append(seeds, encode[Counts](f, c))
	}
	fuzzDecode[Counts](f, seeds, func(c *Counts) {
		_ = c.Categories()
		c.Add("fuzz")
		c.Add("")
		if err := c.Merge(c); err != nil {
			panic(err)
		}
	})
}
