package window

import (
	"cmp"
	"encoding"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

var (
	_ encoding.BinaryMarshaler   = (*Reservoir)(nil)
	_ encoding.BinaryUnmarshaler = (*Reservoir)(nil)
)

const (
	// DefaultReservoirSize is the capacity of a zero-value Reservoir.
	DefaultReservoirSize = 1024
	// MaxReservoirSize and MaxReservoirDim bound a Reservoir's capacity and
	// dimension (and so what a decoder will allocate).
	MaxReservoirSize = 1 << 20
	MaxReservoirDim  = 1 << 12
)

// Reservoir keeps a uniform random sample, without replacement, of at most
// Capacity vectors of one dimension out of all the vectors offered to it.
//
// It uses random priority keys (bottom-k sampling): each offered vector gets
// an independent uniform random 64-bit key u (the key u/2^64 in [0, 1), at
// 2^-64 resolution) and the reservoir keeps the
// Capacity vectors with the smallest keys. The kept set is then a uniform
// sample of what was offered, and since the smallest keys of a union are
// among the smallest keys of its parts, merging two reservoirs (keeping the
// smallest keys of both) is a uniform sample of the union of their streams.
// Ties between equal keys are broken by the vectors' bits, so the kept set is
// a function of the offered (key, vector) multiset and Merge is exactly
// associative and commutative.
//
// The zero value is an empty reservoir of capacity DefaultReservoirSize whose
// dimension is set by the first Add or Merge. A Reservoir is not safe for
// concurrent use; its owner serializes access.
type Reservoir struct {
	capacity int // 0: DefaultReservoirSize
	dim      int // 0: set by the first Add or Merge
	seen     int64
	// heap is a max-heap, on (key, row), of the kept items; row i of data
	// holds item slot i. An evicted item's slot is reused by its successor.
	heap []item
	data []float64
	rng  rand.Source // default key source, made on first need
}

type item struct {
	key  uint64
	slot int32
}

// NewReservoir returns an empty reservoir that keeps at most capacity vectors
// of dimension dim. A capacity of zero or less means DefaultReservoirSize (it
// is capped at MaxReservoirSize); a dim of zero or less means the first Add or
// Merge sets it. It panics if dim exceeds MaxReservoirDim.
func NewReservoir(capacity, dim int) *Reservoir {
	if capacity <= 0 {
		capacity = DefaultReservoirSize
	}
	if dim > MaxReservoirDim {
		panic(fmt.Sprintf("window: reservoir dimension %d above %d", dim, MaxReservoirDim))
	}
	return &Reservoir{capacity: min(capacity, MaxReservoirSize), dim: max(dim, 0)}
}

// Capacity returns the most vectors r keeps.
func (r *Reservoir) Capacity() int {
	if r.capacity == 0 {
		return DefaultReservoirSize
	}
	return r.capacity
}

// Dim returns the dimension of r's vectors, 0 while not yet set.
func (r *Reservoir) Dim() int { return r.dim }

// Len returns how many vectors r holds: min(Seen, Capacity).
func (r *Reservoir) Len() int { return len(r.heap) }

// Seen returns how many vectors were ever offered to r and to the reservoirs
// merged into it.
func (r *Reservoir) Seen() int64 { return r.seen }

func (r *Reservoir) row(slot int32) []float64 {
	i := int(slot) * r.dim
	return r.data[i : i+r.dim : i+r.dim]
}

// Add offers a copy of vec to the sample, drawing its key from rng. A nil rng
// uses r's own source, seeded at random on first use; pass an explicitly
// seeded source for reproducible samples. (A fixed default seed would be
// wrong: replicas would draw the same key sequence, and their merge would not
// be a uniform sample.)
//
// Add panics if len(vec) differs from r's dimension (a programming error: the
// dimension is fixed by the feature extractor, not by input). Once r is full
// it does not allocate: a kept vector overwrites the evicted one's storage.
func (r *Reservoir) Add(vec []float64, rng rand.Source) {
	r.setDim(len(vec))
	if rng == nil {
		if r.rng == nil {
			r.rng = rand.NewPCG(rand.Uint64(), rand.Uint64())
		}
		rng = r.rng
	}
	r.seen++
	r.offer(rng.Uint64(), vec)
}

func (r *Reservoir) setDim(dim int) {
	switch {
	case r.dim == dim && dim > 0:
	case r.dim == 0 && dim > 0 && dim <= MaxReservoirDim:
		r.dim = dim
	default:
		panic(fmt.Sprintf("window: reservoir of dimension %d offered a vector of length %d", r.dim, dim))
	}
}

// less orders items by key, then by the bits of their vectors.
func less(ka uint64, ra []float64, kb uint64, rb []float64) bool {
	if ka != kb {
		return ka < kb
	}
	return compareRows(ra, rb) < 0
}

func compareRows(a, b []float64) int {
	for i := range a {
		if c := cmp.Compare(math.Float64bits(a[i]), math.Float64bits(b[i])); c != 0 {
			return c
		}
	}
	return 0
}

func (r *Reservoir) offer(key uint64, vec []float64) {
	if len(r.heap) < r.Capacity() {
		slot := int32(len(r.heap))
		r.data = append(r.data, vec...)
		r.heap = append(r.heap, item{key, slot})
		r.up(len(r.heap) - 1)
		return
	}
	top := r.heap[0]
	if !less(key, vec, top.key, r.row(top.slot)) {
		return
	}
	copy(r.row(top.slot), vec)
	r.heap[0].key = key
	r.down(0)
}

func (r *Reservoir) above(i, j int) bool {
	a, b := r.heap[i], r.heap[j]
	return less(b.key, r.row(b.slot), a.key, r.row(a.slot))
}

func (r *Reservoir) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !r.above(i, p) {
			return
		}
		r.heap[i], r.heap[p] = r.heap[p], r.heap[i]
		i = p
	}
}

func (r *Reservoir) down(i int) {
	n := len(r.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && r.above(c+1, c) {
			c++
		}
		if !r.above(c, i) {
			return
		}
		r.heap[i], r.heap[c] = r.heap[c], r.heap[i]
		i = c
	}
}

// Merge makes r the sample of the union of r's and o's streams: it keeps the
// Capacity items with the smallest keys among both. It fails with
// ErrIncompatible, leaving r unchanged, when the capacities differ or both
// dimensions are set and differ.
func (r *Reservoir) Merge(o *Reservoir) error {
	if a, b := r.Capacity(), o.Capacity(); a != b {
		return fmt.Errorf("reservoir: capacity %d and %d: %w", a, b, ErrIncompatible)
	}
	if r.dim != o.dim && r.dim != 0 && o.dim != 0 {
		return fmt.Errorf("reservoir: dimension %d and %d: %w", r.dim, o.dim, ErrIncompatible)
	}
	if o == r {
		o = r.clone()
	}
	if r.dim == 0 {
		r.dim = o.dim
	}
	r.seen += o.seen
	for _, it := range o.heap {
		r.offer(it.key, o.row(it.slot))
	}
	return nil
}

func (r *Reservoir) clone() *Reservoir {
	c := *r
	c.heap = slices.Clone(r.heap)
	c.data = slices.Clone(r.data)
	return &c
}

// Reset empties r, keeping its capacity, dimension, key source and storage.
func (r *Reservoir) Reset() {
	r.seen = 0
	r.heap = r.heap[:0]
	r.data = r.data[:0]
}

// sorted returns the kept items in increasing (key, row) order.
func (r *Reservoir) sorted() []item {
	s := slices.Clone(r.heap)
	slices.SortFunc(s, func(a, b item) int {
		if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		return compareRows(r.row(a.slot), r.row(b.slot))
	})
	return s
}

// Rows returns copies of the kept vectors in increasing key order, which is a
// uniformly random order. Two reservoirs holding the same sample return the
// same rows in the same order.
func (r *Reservoir) Rows() [][]float64 {
	items := r.sorted()
	flat := make([]float64, len(items)*r.dim)
	rows := make([][]float64, len(items))
	for i, it := range items {
		rows[i] = flat[i*r.dim : (i+1)*r.dim : (i+1)*r.dim]
		copy(rows[i], r.row(it.slot))
	}
	return rows
}

// Column returns element i of every kept vector, in the order of Rows. It
// panics if i is not in [0, Dim()).
func (r *Reservoir) Column(i int) []float64 {
	if i < 0 || i >= r.dim {
		panic(fmt.Sprintf("window: column %d of a reservoir of dimension %d", i, r.dim))
	}
	items := r.sorted()
	col := make([]float64, len(items))
	for j, it := range items {
		col[j] = r.row(it.slot)[i]
	}
	return col
}

// MarshalBinary encodes r: the version byte; uvarint capacity, dimension,
// seen count and kept count; then each kept item in Rows order as its 8-byte
// key and Dim 8-byte floats. A full reservoir of capacity k and dimension d
// takes about k·(8+8d) bytes.
func (r *Reservoir) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+len(r.heap)*(8+8*r.dim))
	b = append(b, tagReservoir)
	b = binary.AppendUvarint(b, uint64(r.Capacity()))
	b = binary.AppendUvarint(b, uint64(r.dim))
	b = binary.AppendUvarint(b, uint64(r.seen))
	b = binary.AppendUvarint(b, uint64(len(r.heap)))
	for _, it := range r.sorted() {
		b = binary.LittleEndian.AppendUint64(b, it.key)
		for _, f := range r.row(it.slot) {
			b = appendFloat(b, f)
		}
	}
	return b, nil
}

// UnmarshalBinary replaces r's sample with the one encoded in data, keeping
// r's key source. On error r is unchanged.
func (r *Reservoir) UnmarshalBinary(data []byte) error {
	d := decoder{what: "reservoir", b: data}
	d.header(tagReservoir)
	capacity := d.bounded("capacity", 1, MaxReservoirSize)
	dim := d.bounded("dimension", 0, MaxReservoirDim)
	seen := d.count()
	n := d.bounded("length", 0, capacity)
	switch {
	case d.err != nil:
		return d.err
	case n > 0 && dim == 0:
		d.fail("%d vectors of dimension 0", n)
	case seen < int64(n):
		d.fail("%d vectors kept of %d seen", n, seen)
	case n < capacity && seen != int64(n):
		d.fail("%d vectors kept of %d seen below capacity %d", n, seen, capacity)
	case len(d.b) != n*(8+8*dim):
		d.fail("%d bytes for %d vectors of dimension %d", len(d.b), n, dim)
	}
	if d.err != nil {
		return d.err
	}
	v := Reservoir{capacity: capacity, dim: dim, seen: seen, rng: r.rng}
	v.heap = make([]item, 0, n)
	v.data = make([]float64, 0, n*dim)
	for i := range n {
		v.heap = append(v.heap, item{key: d.uint64(), slot: int32(i)})
		for range dim {
			v.data = append(v.data, d.float())
		}
	}
	if err := d.finish(); err != nil {
		return err
	}
	for i := len(v.heap)/2 - 1; i >= 0; i-- {
		v.down(i)
	}
	*r = v
	return nil
}
