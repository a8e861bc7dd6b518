package history

import (
	"testing"
	"time"
)

// TestHistoryBounded: the fine ring keeps fineCap points, the minute ring
// one point a minute for a day; a query returns minute points only where
// the fine ones are gone, oldest first.
func TestHistoryBounded(t *testing.T) {
	h := NewRing(time.Second)
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	const n = 3 * 3600 // three hours at one second
	for i := range n {
		h.Record(Point{Time: t0.Add(time.Duration(i) * time.Second)})
	}
	if len(h.fine) != fineCap || len(h.coarse) != 180 || len(h.unsent) != fineCap {
		t.Fatalf("fine %d, coarse %d, unsent %d; want %d, 180, %d", len(h.fine), len(h.coarse), len(h.unsent), fineCap, fineCap)
	}
	pts := h.local(t0)
	fineFrom := t0.Add((n - fineCap) * time.Second)
	wantLen := int(fineFrom.Sub(t0)/time.Minute) + fineCap
	if len(pts) != wantLen || !pts[0].Time.Equal(t0) || !pts[len(pts)-1].Time.Equal(t0.Add((n-1)*time.Second)) {
		t.Fatalf("%d points from %v to %v, want %d from %v", len(pts), pts[0].Time, pts[len(pts)-1].Time, wantLen, t0)
	}
	for i := 1; i < len(pts); i++ {
		if !pts[i].Time.After(pts[i-1].Time) {
			t.Fatalf("points out of order at %d: %v then %v", i, pts[i-1].Time, pts[i].Time)
		}
	}
	if got := Resample(pts, 10*time.Minute); len(got) != 18 || !got[0].Time.Equal(t0.Add(9*time.Minute)) {
		t.Errorf("resampled to 10 minutes: %d points, the first at %v; want 18, the first at 00:09", len(got), got[0].Time)
	}
}
