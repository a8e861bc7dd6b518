package window

import (
	"iter"
	"time"
)

const (
	// DefaultWidth is the bucket width of a Series made with width 0.
	DefaultWidth = time.Minute
	// DefaultSpan is the bucket count of a Series made with span 0.
	DefaultSpan = 60
)

// Summary is what a Series holds: a pointer to T that can absorb another T
// and be emptied for reuse. *Moments, *Sketch, *Reservoir and *Counts are
// Summaries.
type Summary[T any] interface {
	*T
	Merge(o *T) error
	Reset()
}

// Each summary type satisfies Summary.
var (
	_ = NewSeries[Moments]
	_ = NewSeries[Sketch]
	_ = NewSeries[Reservoir]
	_ = NewSeries[Counts]
)

// Series is a ring of time buckets, each holding one summary. Bucket n covers
// [n·Width, (n+1)·Width) since the Unix epoch, UTC, so buckets of replicas
// with the same width line up and merge. A Series keeps the Span most recent
// buckets (counted back from the newest bucket it was asked for) and
// recycles older ones, so its memory is bounded by Span summaries.
//
// A Series is not safe for concurrent use; its owner serializes access,
// including to the summaries Bucket returns.
type Series[T any, P Summary[T]] struct {
	width   time.Duration
	newT    func() *T
	slots   []slot[T]
	head    int64 // newest bucket number
	started bool
}

type slot[T any] struct {
	n    int64 // bucket number held, valid when used
	used bool
	v    *T
}

// NewSeries returns an empty series of span buckets of the given width whose
// summaries newT makes (for instance a Sketch with a non-default accuracy).
// A width of zero or less means DefaultWidth, a span of zero or less
// DefaultSpan, and a nil newT new(T). Type inference needs only T:
//
//	s := window.NewSeries[window.Moments](time.Minute, 60, nil)
func NewSeries[T any, P Summary[T]](width time.Duration, span int, newT func() *T) *Series[T, P] {
	if width <= 0 {
		width = DefaultWidth
	}
	if span <= 0 {
		span = DefaultSpan
	}
	if newT == nil {
		newT = func() *T { return new(T) }
	}
	return &Series[T, P]{width: width, newT: newT, slots: make([]slot[T], span)}
}

// Width returns the bucket width.
func (s *Series[T, P]) Width() time.Duration { return s.width }

// Span returns the number of buckets kept.
func (s *Series[T, P]) Span() int { return len(s.slots) }

// Start returns the start of the bucket that t falls in.
func (s *Series[T, P]) Start(t time.Time) time.Time { return s.startOf(s.number(t)) }

func (s *Series[T, P]) number(t time.Time) int64 {
	ns, w := t.UnixNano(), int64(s.width)
	n := ns / w
	if ns%w < 0 {
		n-- // floor, for times before 1970
	}
	return n
}

func (s *Series[T, P]) startOf(n int64) time.Time {
	return time.Unix(0, n*int64(s.width)).UTC()
}

func (s *Series[T, P]) slotOf(n int64) *slot[T] {
	k := int64(len(s.slots))
	return &s.slots[((n%k)+k)%k]
}

// Bucket returns the summary of the bucket that t falls in, creating it, and
// advancing the series when t is newer than every bucket so far (buckets that
// fall out of the span are recycled). It returns nil when t is older than the
// span, counted back from the newest bucket: the caller drops the value.
func (s *Series[T, P]) Bucket(t time.Time) *T {
	n := s.number(t)
	switch {
	case !s.started || n > s.head:
		s.head, s.started = n, true
	case n <= s.head-int64(len(s.slots)):
		return nil
	}
	sl := s.slotOf(n)
	switch {
	case sl.v == nil:
		sl.v = s.newT()
	case !sl.used || sl.n != n:
		P(sl.v).Reset()
	}
	sl.n, sl.used = n, true
	return sl.v
}

// All yields the start and summary of every live bucket, oldest first. The
// summaries are the series' own: do not keep them past the next Bucket call.
func (s *Series[T, P]) All() iter.Seq2[time.Time, *T] {
	return func(yield func(time.Time, *T) bool) {
		if !s.started {
			return
		}
		for n := s.head - int64(len(s.slots)) + 1; n <= s.head; n++ {
			if sl := s.slotOf(n); sl.used && sl.n == n {
				if !yield(s.startOf(n), sl.v) {
					return
				}
			}
		}
	}
}

// Advance moves the newest bucket of the span to the one t falls in, when
// that is newer, without creating it: buckets that fall out of the span are
// recycled. A series that is only read (a replica without traffic of its
// own, reading the others') keeps its span current this way.
func (s *Series[T, P]) Advance(t time.Time) {
	if n := s.number(t); !s.started || n > s.head {
		s.head, s.started = n, true
	}
}

// Range returns a new summary, made by newT, that merges every live bucket
// overlapping [from, to), oldest first. It returns the first Merge error,
// which only summaries of different parameters in one series can cause.
func (s *Series[T, P]) Range(from, to time.Time) (*T, error) {
	out := s.newT()
	for start, v := range s.All() {
		if start.Before(to) && start.Add(s.width).After(from) {
			if err := P(out).Merge(v); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}
