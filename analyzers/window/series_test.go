package window

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var t0 = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

func starts[T any, P Summary[T]](s *Series[T, P]) []time.Time {
	var out []time.Time
	for start := range s.All() {
		out = append(out, start)
	}
	return out
}

func TestSeriesAlignment(t *testing.T) {
	s := NewSeries[Moments](time.Minute, 3, nil)
	ist := time.FixedZone("IST", 5*3600+1800)
	cases := []struct {
		t, want time.Time
	}{
		{t0.Add(59 * time.Second), t0},
		{t0.Add(time.Minute), t0.Add(time.Minute)},
		{t0.Add(90 * time.Second).In(ist), t0.Add(time.Minute)}, // zone does not matter
		{time.Unix(-30, 0), time.Unix(-60, 0).UTC()},            // floor before 1970
		{time.Unix(0, 0), time.Unix(0, 0).UTC()},
	}
	for _, tc := range cases {
		if got := s.Start(tc.t); !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("Start(%v) = %v, want %v UTC", tc.t, got, tc.want)
		}
	}
	// Widths that do not divide an hour still align to the epoch, so
	// replicas agree.
	odd := NewSeries[Moments](7*time.Second, 3, nil)
	if got := odd.Start(t0).UnixNano() % int64(7*time.Second); got != 0 {
		t.Errorf("7s bucket start not epoch-aligned: remainder %d", got)
	}
}

func TestSeriesRotation(t *testing.T) {
	s := NewSeries[Moments](time.Minute, 3, nil)
	s.Bucket(t0).Add(1)
	s.Bucket(t0.Add(30 * time.Second)).Add(2)
	first := s.Bucket(t0)
	s.Bucket(t0.Add(time.Minute)).Add(10)
	s.Bucket(t0.Add(2 * time.Minute)).Add(20)
	if got := s.Bucket(t0).Count(); got != 2 {
		t.Errorf("first bucket count %d, want 2", got)
	}
	// Advancing to 10:03 drops 10:00 and recycles its storage.
	b := s.Bucket(t0.Add(3 * time.Minute))
	if b != first || b.Count() != 0 {
		t.Errorf("rotated bucket %p (count %d), want the recycled %p, empty", b, b.Count(), first)
	}
	b.Add(30)
	if got := s.Bucket(t0.Add(59 * time.Second)); got != nil {
		t.Errorf("bucket older than the span = %+v, want nil", got)
	}
	// Late data inside the span lands in its bucket.
	s.Bucket(t0.Add(70 * time.Second)).Add(11)
	want := []time.Time{t0.Add(time.Minute), t0.Add(2 * time.Minute), t0.Add(3 * time.Minute)}
	if d := cmp.Diff(want, starts(s)); d != "" {
		t.Errorf("buckets (-want +got):\n%s", d)
	}
	// A jump over the whole span leaves only the new bucket, and a gap
	// leaves no empty buckets behind.
	s.Bucket(t0.Add(time.Hour)).Add(1)
	s.Bucket(t0.Add(time.Hour + 2*time.Minute)).Add(1)
	if d := cmp.Diff([]time.Time{t0.Add(time.Hour), t0.Add(time.Hour + 2*time.Minute)}, starts(s)); d != "" {
		t.Errorf("after a jump (-want +got):\n%s", d)
	}
}

func TestSeriesRange(t *testing.T) {
	s := NewSeries[Moments](time.Minute, 10, nil)
	for i := range 5 {
		for j := range 3 {
			s.Bucket(t0.Add(time.Duration(i)*time.Minute + time.Duration(j)*time.Second)).Add(float64(i))
		}
	}
	cases := []struct {
		name     string
		from, to time.Time
		count    int64
		mean     float64
	}{
		{"all", t0.Add(-time.Hour), t0.Add(time.Hour), 15, 2},
		{"aligned minutes 1 and 2", t0.Add(time.Minute), t0.Add(3 * time.Minute), 6, 1.5},
		{"partial overlap counts the bucket", t0.Add(90 * time.Second), t0.Add(150 * time.Second), 6, 1.5},
		{"empty interval", t0.Add(time.Minute), t0.Add(time.Minute), 0, math.NaN()},
		{"in the future", t0.Add(time.Hour), t0.Add(2 * time.Hour), 0, math.NaN()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Range(tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count() != tc.count || !(got.Mean() == tc.mean || math.IsNaN(tc.mean) && math.IsNaN(got.Mean())) {
				t.Errorf("count %d mean %v, want %d and %v", got.Count(), got.Mean(), tc.count, tc.mean)
			}
		})
	}
}

// TestSeriesConstructor: summaries come from newT, so a series of sketches
// keeps its accuracy through recycling and Range.
func TestSeriesConstructor(t *testing.T) {
	s := NewSeries[Sketch](time.Second, 2, func() *Sketch { return mustSketch(t, 0.05, 128) })
	for i := range 5 {
		s.Bucket(t0.Add(time.Duration(i) * time.Second)).Add(float64(i + 1))
	}
	r, err := s.Range(t0, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.Alpha() != 0.05 || r.MaxBuckets() != 128 || r.Count() != 2 || r.Min() != 4 {
		t.Errorf("alpha %v max %d count %d min %v", r.Alpha(), r.MaxBuckets(), r.Count(), r.Min())
	}
	d := NewSeries[Counts](0, 0, nil)
	if d.Width() != DefaultWidth || d.Span() != DefaultSpan {
		t.Errorf("defaults: %v × %d", d.Width(), d.Span())
	}
}
