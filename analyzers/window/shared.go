package window

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// Codec is a Summary that encodes to bytes, as every summary of this
// package does.
type Codec[T any] interface {
	Summary[T]
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// Encoded is one bucket's summary, encoded: bucket number (unix
// nanoseconds / width) and bytes.
type Encoded struct {
	Start   int64
	Payload []byte
}

// Shared is a Series whose buckets other replicas fill too. The owner
// writes to its local buckets (Bucket), exports the ones it touched since
// the last export (cumulative snapshots: exporting again is harmless), and
// imports the other replicas' snapshots; Merged is the union. A Shared is
// not safe for concurrent use.
type Shared[T any, P Codec[T]] struct {
	*Series[T, P]
	dirty   map[int64]struct{}
	remote  map[int64]map[string]*T // bucket number → replica → its latest snapshot
	dropped int64                   // touched buckets recycled before an Export took them
}

// NewShared returns an empty shared series (see NewSeries).
func NewShared[T any, P Codec[T]](width time.Duration, span int, newT func() *T) *Shared[T, P] {
	return &Shared[T, P]{Series: NewSeries[T, P](width, span, newT), dirty: map[int64]struct{}{}, remote: map[int64]map[string]*T{}}
}

// Bucket is Series.Bucket, marking the bucket for the next Export.
func (s *Shared[T, P]) Bucket(t time.Time) *T {
	head := s.head
	b := s.Series.Bucket(t)
	if b != nil {
		s.dirty[s.number(t)] = struct{}{}
		if s.head != head { // the series moved on: unexported buckets may have left it
			from, _ := s.Numbers()
			for n := range s.dirty {
				if n < from {
					delete(s.dirty, n)
					s.dropped++
				}
			}
		}
	}
	return b
}

// Dropped counts touched buckets that left the span before any Export
// took them: what a replica lost while its store was unreachable for
// longer than the span.
func (s *Shared[T, P]) Dropped() int64 { return s.dropped }

// Export encodes the buckets touched since the last Export and forgets
// them; Unexport puts them back after a failed write. Buckets that left the
// span meanwhile are gone: that, and the span, bound what a replica holds
// for a store that is down.
func (s *Shared[T, P]) Export() ([]Encoded, error) {
	var out []Encoded
	for n := range s.dirty {
		sl := s.slotOf(n)
		if !sl.used || sl.n != n {
			continue
		}
		b, err := P(sl.v).MarshalBinary()
		if err != nil {
			return nil, err
		}
		out = append(out, Encoded{Start: n, Payload: b})
	}
	clear(s.dirty)
	slices.SortFunc(out, func(a, b Encoded) int { return int(a.Start - b.Start) })
	return out, nil
}

// Touch marks every live bucket for the next Export: after the store lost
// data (a restart) or missed writes, the next flush rewrites everything.
func (s *Shared[T, P]) Touch() {
	for t := range s.All() {
		s.dirty[s.number(t)] = struct{}{}
	}
}

// Unexport marks buckets for the next Export again.
func (s *Shared[T, P]) Unexport(bs []Encoded) {
	for _, b := range bs {
		s.dirty[b.Start] = struct{}{}
	}
}

// Numbers returns the numbers of the oldest and newest buckets of the span.
func (s *Shared[T, P]) Numbers() (from, to int64) {
	return s.head - int64(len(s.slots)) + 1, s.head
}

// Import records replica's snapshot of a bucket, replacing its previous
// one. Snapshots older than the span are dropped.
func (s *Shared[T, P]) Import(replica string, e Encoded) error {
	from, _ := s.Numbers()
	if e.Start < from {
		return nil
	}
	v := s.newT()
	if err := P(v).UnmarshalBinary(e.Payload); err != nil {
		return fmt.Errorf("window: bucket %d of replica %s: %w", e.Start, replica, err)
	}
	reps := s.remote[e.Start]
	if reps == nil {
		reps = map[string]*T{}
		s.remote[e.Start] = reps
	}
	reps[replica] = v
	for n := range s.remote {
		if n < from {
			delete(s.remote, n)
		}
	}
	return nil
}

// Merged returns a new series holding, per bucket, the local summary merged
// with every imported replica's.
func (s *Shared[T, P]) Merged() (*Series[T, P], error) {
	m := NewSeries[T, P](s.width, len(s.slots), s.newT)
	var nums []int64
	for t := range s.All() {
		nums = append(nums, s.number(t))
	}
	for n := range s.remote {
		nums = append(nums, n)
	}
	slices.Sort(nums)
	nums = slices.Compact(nums)
	for _, n := range nums { // oldest first, so none falls out of the span
		dst := m.Bucket(s.startOf(n))
		if dst == nil {
			continue
		}
		if sl := s.slotOf(n); sl.used && sl.n == n {
			if err := P(dst).Merge(sl.v); err != nil {
				return nil, err
			}
		}
		for _, v := range s.remote[n] {
			if err := P(dst).Merge(v); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// EncodeParts encodes summaries one after the other, each with a uvarint
// length, for composite summaries.
func EncodeParts(parts ...encoding.BinaryMarshaler) ([]byte, error) {
	var out []byte
	for _, p := range parts {
		b, err := p.MarshalBinary()
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out, nil
}

// DecodeParts is the inverse of EncodeParts.
func DecodeParts(data []byte, parts ...encoding.BinaryUnmarshaler) error {
	for i, p := range parts {
		n, k := binary.Uvarint(data)
		if k <= 0 || uint64(len(data)-k) < n {
			return fmt.Errorf("%w: part %d of %d", ErrCorrupt, i, len(parts))
		}
		if err := p.UnmarshalBinary(data[k : k+int(n)]); err != nil {
			return err
		}
		data = data[k+int(n):]
	}
	if len(data) != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(data))
	}
	return nil
}

// Sharer is the part of a Shared series that the replica flusher uses.
type Sharer interface {
	Advance(t time.Time)
	Touch()
	Dropped() int64
	Export() ([]Encoded, error)
	Unexport([]Encoded)
	Import(replica string, e Encoded) error
	Numbers() (from, to int64)
}

var _ Sharer = (*Shared[Moments, *Moments])(nil)

// View is the series to evaluate: the local one while nothing was
// imported, else Merged.
func (s *Shared[T, P]) View() (*Series[T, P], error) {
	if len(s.remote) == 0 {
		return s.Series, nil
	}
	return s.Merged()
}
