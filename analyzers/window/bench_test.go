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

// TestEncodedSizes checks the encoded sizes the report quotes against the
// formats documented on each MarshalBinary. Sizes the format fixes are exact,
// derived in the comments, so any change to a format shows up here; the one
// that depends on sampled data has an upper bound that a per-bucket
// fixed-width count (or float) would break.
func TestEncodedSizes(t *testing.T) {
	var c Counts
	for _, s := range []string{"stop", "length", "tool_calls", "content_filter"} {
		for range 1000 {
			c.Add(s)
		}
	}
	lognormal := sketchOf(t, 0, 0, latencies(100000))
	sizes := []struct {
		name string
		b    []byte
		want int // exact size; 0: only max applies
		max  int
	}{
		// Version byte, uvarint count 0 and invalid count 0.
		{name: "Moments empty", b: encode[Moments](t, new(Moments)), want: 3},
		// 1 + uvarint 100000 (3) + uvarint 0 (1) + mean, M2, min, max (4×8).
		{name: "Moments 1e5 values", b: encode[Moments](t, momentsOf(latencies(100000)...)), want: 37},
		// 1 + alpha (8) + uvarint MaxBuckets 2048 (2) + invalid (1) + zero
		// (1) + an empty bucket count per sign (1+1); no min or max.
		{name: "Sketch empty", b: encode[Sketch](t, new(Sketch)), want: 15},
		// The 13-byte header, then about 450 positive buckets (the draws span
		// some 9 e-folds at 2% a bucket), each count below 16384 (the densest
		// bucket holds under 1000) so at most 2 bytes: at most
		// 13 + (2+3+1) + 2·450 + 1 + 16 ≈ 936 bytes. A fixed 8-byte count
		// or float per bucket would take over 3.5 KB.
		{name: "Sketch 1e5 lognormal latencies", b: encode[Sketch](t, lognormal), max: 1024},
		// 13-byte header; positive store: uvarint 2048 (2) + zig-zag lowest
		// index (2) + collapsed flag (1) + 2048 counts 1+i%300, of which 1159
		// are ≥ 128 and take 2 bytes (3207); empty negative store (1); min
		// and max (16).
		{name: "Sketch full (2048 buckets)", b: encode[Sketch](t, fullSketch(t)), want: 3242},
		// 1 + uvarint capacity 1024 (2), dimension 12 (1), seen 10240 (2),
		// kept 1024 (2); then 1024 rows of key (8) and 12 floats (96).
		{name: "Reservoir 1024×12 full", b: encode[Reservoir](t, fullReservoir(1024, 12, 1)), want: 8 + 1024*(8+8*12)},
		// The same header; 1024 rows of key (8) and one float (8).
		{name: "Reservoir 1024×1 full", b: encode[Reservoir](t, fullReservoir(1024, 1, 1)), want: 8 + 1024*(8+8)},
		// 1 + uvarint MaxCategories 64 (1), Other 0 (1), 4 categories (1);
		// then per category a length byte, the name (4+6+10+14 bytes) and
		// uvarint 1000 (2).
		{name: "Counts 4 finish reasons", b: encode[Counts](t, &c), want: 4 + 4*(1+2) + 34},
	}
	for _, s := range sizes {
		t.Logf("%-32s %7d bytes", s.name, len(s.b))
		switch {
		case s.want != 0 && len(s.b) != s.want:
			t.Errorf("%s: %d bytes, want %d", s.name, len(s.b), s.want)
		case s.max != 0 && len(s.b) > s.max:
			t.Errorf("%s: %d bytes, want at most %d", s.name, len(s.b), s.max)
		}
	}
	// The bound above assumes the sample fills about 450 buckets; more
	// would mean the bucket mapping changed, not the encoding.
	if n := len(lognormal.pos.bins); n > 500 {
		t.Errorf("lognormal sketch has %d buckets, want at most 500", n)
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
