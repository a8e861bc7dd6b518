package content

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// MaxSample bounds a Sample's capacity (and so what a decoder allocates).
const MaxSample = 1 << 14

// A Sample keeps a uniform random sample of at most Capacity prompts'
// terms, each with its prompt's length in characters. It is bottom-k
// sampling, as window.Reservoir is: each prompt comes with a uniform
// random 64-bit key and the Sample keeps the smallest keys, so the merge of
// two Samples (the smallest keys of both) is a uniform sample of the union
// of their prompts, whatever the order of merges. Ties between keys are
// broken by the rows' bytes, so Merge is exactly associative and
// commutative: replicas that share their windows agree bit for bit.
//
// A full Sample of capacity k takes about k·(12+4K) bytes. A Sample is
// not safe for concurrent use.
type Sample struct{ rows }

// NewSample returns an empty Sample of capacity (at least 1, at most
// MaxSample).
func NewSample(capacity int) *Sample {
	return &Sample{newRows(capacity, K)}
}

// Add offers d's terms, of a prompt of chars characters, under key.
// Once s is full it does not allocate.
func (s *Sample) Add(key uint64, d *Doc, chars float64) {
	var row [K]uint32
	for i, t := range d.Terms() {
		row[i] = t.Hash
	}
	slices.Sort(row[:d.n]) // the empty slots (0) after
	s.add(key, float32(chars), row[:])
}

// Merge adds o's prompts to s: s becomes the sample of both streams.
func (s *Sample) Merge(o *Sample) error { return s.merge(&o.rows) }

// Rows returns the kept prompts' terms and lengths, by key. A row's
// terms are ascending, without the empty slots.
func (s *Sample) Rows() (terms [][]uint32, chars []float64) {
	ord := s.order()
	terms, chars = make([][]uint32, len(ord)), make([]float64, len(ord))
	for i, slot := range ord {
		r := s.row(slot)
		n := len(r)
		for n > 0 && r[n-1] == 0 {
			n--
		}
		terms[i], chars[i] = r[:n:n], float64(s.chars[slot])
	}
	return terms, chars
}

const sampleVersion = 1

// rowBytes is the size of an encoded row of a Sample.
const rowBytes = 12 + 4*K

// MarshalBinary encodes s: a version byte; uvarint capacity, seen and
// kept count; then each row by key: its key (8 bytes), length (4 bytes)
// and K term hashes (4 bytes each).
func (s *Sample) MarshalBinary() ([]byte, error) { return s.marshal(sampleVersion), nil }

// UnmarshalBinary replaces s with the Sample encoded in data; on error s
// is unchanged.
func (s *Sample) UnmarshalBinary(data []byte) error {
	return s.unmarshal(data, sampleVersion, K, "content sample", func(row []uint32) error {
		// Ascending, then the empty slots: what Add keeps.
		m := len(row)
		for m > 0 && row[m-1] == 0 {
			m--
		}
		if !slices.IsSorted(row[:m]) || slices.Contains(row[:m], 0) || len(slices.Compact(slices.Clone(row[:m]))) != m {
			return errors.New("terms not ascending and distinct")
		}
		return nil
	})
}

// rows is the bottom-k sample under Sample and Vectors: rows of width
// uint32 words, each with a key and its prompt's length.
type rows struct {
	width    int
	capacity int
	seen     int64
	// heap is a max-heap on (key, row) of the kept rows' slots.
	heap  []int32
	keys  []uint64
	chars []float32
	words []uint32 // width per slot
}

func newRows(capacity, width int) rows {
	return rows{capacity: min(max(capacity, 1), MaxSample), width: width}
}

// Capacity returns the most prompts s keeps.
func (s *rows) Capacity() int { return s.capacity }

// Len returns how many prompts s keeps.
func (s *rows) Len() int { return len(s.heap) }

// Seen returns how many prompts were offered to s and the samples merged
// into it.
func (s *rows) Seen() int64 { return s.seen }

func (s *rows) add(key uint64, chars float32, row []uint32) {
	s.seen++
	s.offer(key, chars, row)
}

func (s *rows) row(slot int32) []uint32 {
	i := int(slot) * s.width
	return s.words[i : i+s.width : i+s.width]
}

// less orders kept rows by key, then by content.
func (s *rows) less(ka uint64, ca float32, ra []uint32, b int32) bool {
	if kb := s.keys[b]; ka != kb {
		return ka < kb
	}
	if c := cmp.Compare(math.Float32bits(ca), math.Float32bits(s.chars[b])); c != 0 {
		return c < 0
	}
	return slices.Compare(ra, s.row(b)) < 0
}

// offer keeps the row if it is among the smallest.
func (s *rows) offer(key uint64, chars float32, row []uint32) {
	if len(s.heap) < s.capacity {
		slot := int32(len(s.keys))
		s.keys = append(s.keys, key)
		s.chars = append(s.chars, chars)
		s.words = append(s.words, row...)
		s.heap = append(s.heap, slot)
		s.up(len(s.heap) - 1)
		return
	}
	top := s.heap[0]
	if key > s.keys[top] || key == s.keys[top] && !s.less(key, chars, row, top) {
		return
	}
	s.keys[top], s.chars[top] = key, chars
	copy(s.row(top), row)
	s.down(0)
}

// above says whether the row in heap slot i belongs above j (a larger
// (key, row)).
func (s *rows) above(i, j int) bool {
	a := s.heap[i]
	b := s.heap[j]
	return s.less(s.keys[b], s.chars[b], s.row(b), a)
}

func (s *rows) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.above(i, p) {
			return
		}
		s.heap[i], s.heap[p] = s.heap[p], s.heap[i]
		i = p
	}
}

func (s *rows) down(i int) {
	for {
		l, big := 2*i+1, i
		if l < len(s.heap) && s.above(l, big) {
			big = l
		}
		if r := l + 1; r < len(s.heap) && s.above(r, big) {
			big = r
		}
		if big == i {
			return
		}
		s.heap[i], s.heap[big] = s.heap[big], s.heap[i]
		i = big
	}
}

// merge adds o's rows to s, of the same width.
func (s *rows) merge(o *rows) error {
	if o.width != s.width {
		return fmt.Errorf("content: merging rows of %d words into rows of %d", o.width, s.width)
	}
	s.seen += o.seen
	for _, slot := range o.heap {
		s.offer(o.keys[slot], o.chars[slot], o.row(slot))
	}
	return nil
}

// Reset empties s, keeping its storage.
func (s *rows) Reset() {
	s.seen = 0
	s.heap, s.keys, s.chars, s.words = s.heap[:0], s.keys[:0], s.chars[:0], s.words[:0]
}

// order returns the kept slots by key, then row: the order in which
// Rows and the encoding list them.
func (s *rows) order() []int32 {
	out := slices.Clone(s.heap)
	slices.SortFunc(out, func(a, b int32) int {
		if s.less(s.keys[a], s.chars[a], s.row(a), b) {
			return -1
		}
		if a == b {
			return 0
		}
		return 1
	})
	return out
}

// marshal encodes s: the version byte; uvarint capacity, seen and kept
// count; then each row by key: its key (8 bytes), length (4 bytes) and
// width words (4 bytes each).
func (s *rows) marshal(version byte) []byte {
	b := make([]byte, 0, 1+3*binary.MaxVarintLen64+len(s.heap)*(12+4*s.width))
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(s.capacity))
	b = binary.AppendUvarint(b, uint64(s.seen))
	b = binary.AppendUvarint(b, uint64(len(s.heap)))
	for _, slot := range s.order() {
		b = binary.LittleEndian.AppendUint64(b, s.keys[slot])
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(s.chars[slot]))
		for _, w := range s.row(slot) {
			b = binary.LittleEndian.AppendUint32(b, w)
		}
	}
	return b
}

// unmarshal replaces s with the rows of width words encoded in data, each
// checked by valid; on error s is unchanged.
func (s *rows) unmarshal(data []byte, version byte, width int, what string, valid func(row []uint32) error) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf(what+": "+format, a...)
	}
	if len(data) == 0 || data[0] != version {
		return bad("unknown encoding")
	}
	b := data[1:]
	var vals [3]uint64
	for i := range vals {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return bad("truncated header")
		}
		vals[i], b = v, b[n:]
	}
	capacity, seen, n := vals[0], vals[1], vals[2]
	size := uint64(12 + 4*width)
	switch {
	case capacity < 1 || capacity > MaxSample:
		return bad("capacity %d outside [1, %d]", capacity, MaxSample)
	case n > capacity || n > seen || seen > math.MaxInt64:
		return bad("%d rows kept of %d seen, capacity %d", n, seen, capacity)
	case n < capacity && n != seen:
		return bad("%d rows kept of %d seen below capacity %d", n, seen, capacity)
	case uint64(len(b)) != n*size:
		return bad("%d bytes for %d rows", len(b), n)
	}
	v := rows{width: width, capacity: int(capacity), seen: int64(seen)}
	row := make([]uint32, width)
	for i := range int(n) {
		key := binary.LittleEndian.Uint64(b)
		chars := math.Float32frombits(binary.LittleEndian.Uint32(b[8:]))
		if !(chars >= 0) || math.IsInf(float64(chars), 0) {
			return bad("row %d: length %v", i, chars)
		}
		for j := range row {
			row[j] = binary.LittleEndian.Uint32(b[12+4*j:])
		}
		if err := valid(row); err != nil {
			return bad("row %d: %v", i, err)
		}
		v.offer(key, chars, row)
		b = b[size:]
	}
	*s = v
	return nil
}
