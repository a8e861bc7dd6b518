package window

import (
	"testing"
	"time"
)

func TestSplit(t *testing.T) {
	s := NewSeries[Moments](time.Second, 100, nil)
	t0 := time.Unix(1000, 0)
	// Ten seconds of 10 values each, valued by their second.
	for sec := range 10 {
		for range 10 {
			s.Bucket(t0.Add(time.Duration(sec) * time.Second)).Add(float64(sec))
		}
	}
	now := t0.Add(9*time.Second + 500*time.Millisecond)
	count := func(m *Moments) int64 { return m.Count() }
	tests := []struct {
		name              string
		window, reference time.Duration
		min               int64
		wantCur, wantRef  int64
		wantCurMean       float64
		wantStart         time.Time
	}{
		{"by count", time.Minute, 3 * time.Second, 25, 30, 30, 8, t0.Add(7 * time.Second)},
		{"by span (buckets overlapping it)", 2 * time.Second, time.Hour, 1000, 30, 70, 8, t0.Add(7 * time.Second)},
		{"reference cut", time.Minute, 2 * time.Second, 10, 10, 20, 9, t0.Add(9 * time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur, start, ref, err := s.Split(now, tt.window, tt.reference, tt.min, count)
			if err != nil {
				t.Fatal(err)
			}
			if cur.Count() != tt.wantCur || ref.Count() != tt.wantRef || cur.Mean() != tt.wantCurMean || !start.Equal(tt.wantStart) {
				t.Errorf("cur %d (mean %v) from %v, ref %d; want %d (mean %v) from %v, ref %d",
					cur.Count(), cur.Mean(), start, ref.Count(), tt.wantCur, tt.wantCurMean, tt.wantStart, tt.wantRef)
			}
		})
	}
}
