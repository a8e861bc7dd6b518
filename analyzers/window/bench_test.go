package window

import (
	"math"
	"math/rand/v2"
	"testing"
)

func latencies(n int) []float64 {
	return draw(42, n, func(r *rand.Rand) float64 { return math.Exp(-2 + r.NormFloat64()) })
}

// fullSketch has all DefaultMaxBuckets positive buckets in use, with counts
// up to a few hundred: the largest a default sketch gets without collapsing.
func fullSketch(t testing.TB) *Sketch {
	s := mustSketch(t, 0, 0)
	for i := range DefaultMaxBuckets {
		x := s.value(i - DefaultMaxBuckets/2)
		for range 1 + i%300 {
			s.Add(x)
		}
	}
	if len(s.pos.bins) != DefaultMaxBuckets || s.Collapsed() {
		t.Fatalf("%d buckets, collapsed %v", len(s.pos.bins), s.Collapsed())
	}
	return s
}

func fullReservoir(capacity, dim int, seed uint64) *Reservoir {
	rng := rand.NewPCG(seed, seed)
	r := NewReservoir(capacity, dim)
	v := make([]float64, dim)
	for i := range 10 * capacity {
		for j := range v {
			v[j] = float64(i + j)
		}
		r.Add(v, rng)
	}
	return r
}

func TestAddDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	xs := latencies(1024)
	var m Moments
	s := mustSketch(t, 0, 0)
	for _, x := range xs {
		s.Add(x)
		s.Add(-x)
	}
	r := fullReservoir(1024, 12, 1)
	rng := rand.NewPCG(5, 5)
	vec := make([]float64, 12)
	c := countsOf(4, "a", "b", "c", "d", "e", "f")
	kept := c.Categories()[0]
	other := "z"
	for hashName(other) < c.worstHash { // a name that goes to Other
		other += "z"
	}
	i := 0
	cases := []struct {
		name string
		add  func()
	}{
		{"Moments.Add", func() { m.Add(xs[i%len(xs)]) }},
		{"Sketch.Add", func() { s.Add(xs[i%len(xs)]) }},
		{"Sketch.Add negative", func() { s.Add(-xs[i%len(xs)]) }},
		// Once full, a kept vector overwrites the evicted one's storage.
		{"Reservoir.Add full", func() { vec[0] = float64(i); r.Add(vec, rng) }},
		{"Counts.Add kept", func() { c.Add(kept) }},
		{"Counts.Add other", func() { c.Add(other) }},
	}
	for _, tc := range cases {
		if got := testing.AllocsPerRun(10000, func() { tc.add(); i++ }); got != 0 {
			t.Errorf("%s: %v allocs/op, want 0", tc.name, got)
		}
	}
	if r.Len() != 1024 {
		t.Errorf("reservoir len %d", r.Len())
	}
}

// TestEncodedSizes logs the encoded sizes the report quotes.
func TestEncodedSizes(t *testing.T) {
	var c Counts
	for _, s := range []string{"stop", "length", "tool_calls", "content_filter"} {
		for range 1000 {
			c.Add(s)
		}
	}
	sizes := []struct {
		name string
		b    []byte
	}{
		{"Moments empty", encode[Moments](t, new(Moments))},
		{"Moments 1e5 values", encode[Moments](t, momentsOf(latencies(100000)...))},
		{"Sketch empty", encode[Sketch](t, new(Sketch))},
		{"Sketch 1e5 lognormal latencies", encode[Sketch](t, sketchOf(t, 0, 0, latencies(100000)))},
		{"Sketch full (2048 buckets)", encode[Sketch](t, fullSketch(t))},
		{"Reservoir 1024×12 full", encode[Reservoir](t, fullReservoir(1024, 12, 1))},
		{"Reservoir 1024×1 full", encode[Reservoir](t, fullReservoir(1024, 1, 1))},
		{"Counts 4 finish reasons", encode[Counts](t, &c)},
	}
	for _, s := range sizes {
		t.Logf("%-32s %7d bytes", s.name, len(s.b))
	}
}

func BenchmarkMomentsAdd(b *testing.B) {
	xs := latencies(4096)
	var m Moments
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Add(xs[i&4095])
		i++
	}
}

func BenchmarkSketchAdd(b *testing.B) {
	xs := latencies(4096)
	var s Sketch
	for _, x := range xs {
		s.Add(x)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(xs[i&4095])
		i++
	}
}

// BenchmarkReservoirAdd is the steady state: a full 1024-row reservoir of
// 12-dimensional vectors, as the drift signal keeps.
func BenchmarkReservoirAdd(b *testing.B) {
	r := fullReservoir(1024, 12, 1)
	rng := rand.New(rand.NewPCG(3, 3))
	vec := make([]float64, 12)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		vec[0] = float64(i)
		r.Add(vec, rng)
		i++
	}
}

// BenchmarkReservoirMerge merges two full 1024×12 reservoirs; restoring the
// receiver between iterations is not timed.
func BenchmarkReservoirMerge(b *testing.B) {
	x, y := fullReservoir(1024, 12, 1), fullReservoir(1024, 12, 2)
	dst := NewReservoir(1024, 12)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		dst.Reset()
		dst.Merge(x)
		b.StartTimer()
		dst.Merge(y)
	}
}

func BenchmarkSketchMarshal(b *testing.B) {
	s := fullSketch(b)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		buf, _ := s.MarshalBinary()
		n = len(buf)
	}
	b.ReportMetric(float64(n), "bytes")
}

func BenchmarkSketchUnmarshal(b *testing.B) {
	buf, _ := fullSketch(b).MarshalBinary()
	var s Sketch
	b.ReportAllocs()
	for b.Loop() {
		if err := s.UnmarshalBinary(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSketchMerge(b *testing.B) {
	x, y := sketchOf(b, 0, 0, latencies(100000)), sketchOf(b, 0, 0, draw(7, 100000, datasets[0].gen))
	b.ReportAllocs()
	for b.Loop() {
		z := *x
		z.pos.bins = append(make([]uint64, 0, DefaultMaxBuckets), x.pos.bins...)
		z.Merge(y)
	}
}

func BenchmarkQuantile(b *testing.B) {
	s := sketchOf(b, 0, 0, latencies(100000))
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Quantile(0.99)
	}
}

func BenchmarkReservoirMarshal(b *testing.B) {
	r := fullReservoir(1024, 12, 1)
	var n int
	b.ReportAllocs()
	for b.Loop() {
		buf, _ := r.MarshalBinary()
		n = len(buf)
	}
	b.ReportMetric(float64(n), "bytes")
}
