package window

import "time"

// Split divides the live buckets of s as of now into the current window and
// a reference, as Vigil's signals compare them. The current window takes
// the newest buckets (from the one now falls in, backwards) until count of
// their merge reaches minCount or they span window; the reference merges the
// buckets that start within reference before the current window's start and
// end by it. It returns new summaries (made by the series' newT) and the
// current window's start. Merge errors, possible only between summaries of
// different parameters, are returned.
func (s *Series[T, P]) Split(now time.Time, window, reference time.Duration, minCount int64, count func(*T) int64) (cur *T, curStart time.Time, ref *T, err error) {
	cur, ref = s.newT(), s.newT()
	curStart = s.Start(now)
	oldest := now.Add(-window)
	type bucket struct {
		start time.Time
		v     *T
	}
	var live []bucket // oldest first
	for t, v := range s.All() {
		live = append(live, bucket{t, v})
	}
	i := len(live) - 1
	for ; i >= 0; i-- {
		b := live[i]
		if b.start.After(curStart) {
			continue // newer than now: a clock that went back
		}
		if !b.start.Add(s.width).After(oldest) || count(cur) >= minCount {
			break
		}
		if err = P(cur).Merge(b.v); err != nil {
			return
		}
		curStart = b.start
	}
	from := curStart.Add(-reference)
	for ; i >= 0; i-- {
		b := live[i]
		if b.start.Before(from) {
			break
		}
		if !b.start.Before(curStart) {
			continue
		}
		if err = P(ref).Merge(b.v); err != nil {
			return
		}
	}
	return
}
