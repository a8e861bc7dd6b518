package share

import (
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// TestReadSchedule: how far back a flush reads between whole reads, and
// how often it reads whole, from the interval and the bucket width.
func TestReadSchedule(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		interval  time.Duration
		width     time.Duration
		every     int   // the series' read rate (Policy)
		last      int64 // the newest bucket at the last read, relative to now's
		never     bool  // not read yet
		wantBack  int64 // the oldest bucket read, back from now's
		wantWhole int   // flushes between whole reads
	}{
		{name: "default", interval: time.Second, width: 10 * time.Second, every: 1, last: 0, wantBack: 2, wantWhole: 10},
		{name: "new bucket since", interval: time.Second, width: 10 * time.Second, every: 1, last: -1, wantBack: 3, wantWhole: 10},
		{name: "buckets of an interval", interval: time.Second, width: time.Second, every: 1, last: -1, wantBack: 4, wantWhole: 10},
		{name: "minute buckets", interval: time.Second, width: time.Minute, every: 1, last: 0, wantBack: 2, wantWhole: 10},
		{name: "slow flushes", interval: 5 * time.Second, width: 10 * time.Second, every: 1, last: 0, wantBack: 2, wantWhole: 2},
		{name: "flushes beyond the bound", interval: 30 * time.Second, width: 10 * time.Second, every: 1, last: -3, wantBack: 10, wantWhole: 1},
		{name: "read every third flush", interval: time.Second, width: 10 * time.Second, every: 3, last: 0, wantBack: 2, wantWhole: 12},
		{name: "read every tenth flush", interval: time.Second, width: time.Minute, every: 10, last: 0, wantBack: 2, wantWhole: 10},
		{name: "long ago", interval: time.Second, width: 10 * time.Second, every: 1, last: -500, wantBack: 99, wantWhole: 10},
		{name: "clock went back", interval: time.Second, width: 10 * time.Second, every: 1, last: 5, wantBack: 2, wantWhole: 10},
		{name: "never read", interval: time.Second, width: 10 * time.Second, every: 1, never: true, wantBack: 99, wantWhole: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := window.NewShared[window.Counts](tc.width, 100, nil)
			sh.Advance(now)
			from, to := sh.Numbers()
			s := &Sharer{cfg: Config{Interval: tc.interval}}
			if !tc.never {
				s.readTo = map[string]int64{"x": to + tc.last}
			}
			if got := to - s.readFrom("x", sh, from, to); got != tc.wantBack {
				t.Errorf("reads back %d buckets from the newest, want %d", got, tc.wantBack)
			}
			if got := s.fullReadPeriod(tc.every); got != tc.wantWhole {
				t.Errorf("reads whole every %d flushes, want %d", got, tc.wantWhole)
			}
		})
	}
}
