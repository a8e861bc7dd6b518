package window

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"math"
)

var (
	_ encoding.BinaryMarshaler   = (*Sketch)(nil)
	_ encoding.BinaryUnmarshaler = (*Sketch)(nil)
)

const (
	// DefaultAlpha is the relative accuracy of a zero-value Sketch.
	DefaultAlpha = 0.01
	// DefaultMaxBuckets bounds each store of a zero-value Sketch. At
	// DefaultAlpha, 2048 buckets cover a ratio of about 6e17 between the
	// smallest and largest magnitude before any collapsing.
	DefaultMaxBuckets = 2048
	// SketchMinValue is the largest magnitude counted in a Sketch's zero
	// bucket: values in [-SketchMinValue, SketchMinValue] are estimated as 0.
	// It is part of the encoding (format version 1), not a parameter, so
	// every replica agrees on it.
	SketchMinValue = 1e-9

	// MinAlpha and MaxAlpha bound a Sketch's relative accuracy.
	MinAlpha = 1e-6
	MaxAlpha = 0.5
	// MaxSketchBuckets bounds a Sketch's MaxBuckets (and so what a decoder
	// will allocate).
	MaxSketchBuckets = 1 << 16
)

// Sketch is a DDSketch (Masson, Rim and Lee, "DDSketch: A Fast and
// Fully-Mergeable Quantile Sketch with Relative-Error Guarantees", VLDB 2019):
// a histogram over logarithmically sized buckets with relative accuracy α.
// With γ = (1+α)/(1−α), a value x > SketchMinValue falls in bucket
// i = ⌈log_γ x⌉, which covers (γ^(i−1), γ^i] and is represented by
// 2γ^i/(γ+1); negative values go to a mirrored store indexed by |x|, and
// values of magnitude at most SketchMinValue to a zero bucket.
//
// Error bound. Let x_1 ≤ … ≤ x_n be the finite values added (NaN and ±Inf are
// only counted in Invalid) and, for q in [0, 1], let x_q be the value of
// 0-based rank r = ⌊q·(n−1)⌋ (computed in float64; the paper's 1-based rank
// ⌊1+q(n−1)⌋). Quantile(q) returns x̃ with
//
//	|x̃ − x_q| ≤ α·|x_q|   when |x_q| > SketchMinValue,
//	|x̃ − x_q| ≤ SketchMinValue otherwise,
//
// up to floating-point rounding in the logarithm (a few ulps at bucket
// boundaries), provided x_q's bucket was not collapsed (below). Quantile(0)
// and Quantile(1) are the exact minimum and maximum.
//
// Memory is bounded by MaxBuckets buckets per sign. When the values of one
// sign span more buckets than that, the buckets of smallest magnitude are
// folded into the lowest bucket kept, and Collapsed reports it. The bound
// then holds only for values of large magnitude: the upper quantiles of
// positive data and the lower quantiles of negative data. At the default
// parameters this needs a ratio above 6e17 between magnitudes.
//
// Merging is exact: the buckets of a.Merge(b) equal, count for count, those
// of one sketch fed both streams, collapsing included, so Merge is exactly
// associative and commutative.
//
// The zero value is an empty sketch with DefaultAlpha and DefaultMaxBuckets.
// A Sketch is not safe for concurrent use; its owner serializes access.
type Sketch struct {
	alpha       float64 // 0 until first use: DefaultAlpha
	maxBuckets  int
	logGamma    float64 // ln γ
	invLogGamma float64
	repr        float64 // 2/(γ+1): bucket i is represented by repr·γ^i

	pos, neg store
	zero     uint64
	invalid  int64
	min, max float64 // of the finite values added; meaningless when empty
}

// NewSketch returns an empty sketch with relative accuracy alpha in
// [MinAlpha, MaxAlpha] and at most maxBuckets buckets per sign, in
// [1, MaxSketchBuckets]. Zero selects DefaultAlpha or DefaultMaxBuckets.
func NewSketch(alpha float64, maxBuckets int) (*Sketch, error) {
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if maxBuckets == 0 {
		maxBuckets = DefaultMaxBuckets
	}
	if err := checkSketchParams(alpha, maxBuckets); err != nil {
		return nil, err
	}
	s := &Sketch{}
	s.setParams(alpha, maxBuckets)
	return s, nil
}

func checkSketchParams(alpha float64, maxBuckets int) error {
	if !(alpha >= MinAlpha && alpha <= MaxAlpha) {
		return fmt.Errorf("sketch: alpha %v outside [%v, %v]", alpha, MinAlpha, MaxAlpha)
	}
	if maxBuckets < 1 || maxBuckets > MaxSketchBuckets {
		return fmt.Errorf("sketch: max buckets %d outside [1, %d]", maxBuckets, MaxSketchBuckets)
	}
	return nil
}

func (s *Sketch) setParams(alpha float64, maxBuckets int) {
	gamma := (1 + alpha) / (1 - alpha)
	s.alpha = alpha
	s.maxBuckets = maxBuckets
	s.logGamma = math.Log(gamma)
	s.invLogGamma = 1 / s.logGamma
	s.repr = 2 / (gamma + 1)
}

func (s *Sketch) init() {
	if s.alpha == 0 {
		s.setParams(DefaultAlpha, DefaultMaxBuckets)
	}
}

// index maps a magnitude above SketchMinValue to its bucket.
func (s *Sketch) index(x float64) int {
	return int(math.Ceil(math.Log(x) * s.invLogGamma))
}

// value returns bucket i's representative magnitude.
func (s *Sketch) value(i int) float64 {
	return s.repr * math.Exp(float64(i)*s.logGamma)
}

// Add counts x; NaN and ±Inf only increment Invalid. It does not allocate
// once the buckets x falls in exist.
func (s *Sketch) Add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		s.invalid++
		return
	}
	s.init()
	if x == 0 {
		x = 0 // -0 → +0, so Min and Max cannot depend on the order of Adds
	}
	if s.Count() == 0 {
		s.min, s.max = x, x
	} else {
		s.min = min(s.min, x)
		s.max = max(s.max, x)
	}
	switch {
	case x > SketchMinValue:
		s.pos.add(s.index(x), 1, s.maxBuckets)
	case x < -SketchMinValue:
		s.neg.add(s.index(-x), 1, s.maxBuckets)
	default:
		s.zero++
	}
}

// Merge adds the values counted by o to s. It fails with ErrIncompatible,
// leaving s unchanged, when the sketches differ in Alpha or MaxBuckets.
func (s *Sketch) Merge(o *Sketch) error {
	s.init()
	if a, b := s.Alpha(), o.Alpha(); a != b {
		return fmt.Errorf("sketch: alpha %v and %v: %w", a, b, ErrIncompatible)
	}
	if a, b := s.MaxBuckets(), o.MaxBuckets(); a != b {
		return fmt.Errorf("sketch: max buckets %d and %d: %w", a, b, ErrIncompatible)
	}
	if o == s {
		o = s.clone()
	}
	s.invalid += o.invalid
	if o.Count() == 0 {
		return nil
	}
	if s.Count() == 0 {
		s.min, s.max = o.min, o.max
	} else {
		s.min = min(s.min, o.min)
		s.max = max(s.max, o.max)
	}
	s.zero += o.zero
	s.pos.merge(&o.pos, s.maxBuckets)
	s.neg.merge(&o.neg, s.maxBuckets)
	return nil
}

func (s *Sketch) clone() *Sketch {
	c := *s
	c.pos.bins = append([]uint64(nil), s.pos.bins...)
	c.neg.bins = append([]uint64(nil), s.neg.bins...)
	return &c
}

// Reset empties s, keeping its parameters and its bucket storage.
func (s *Sketch) Reset() {
	s.pos.reset()
	s.neg.reset()
	s.zero, s.invalid, s.min, s.max = 0, 0, 0, 0
}

// Count returns how many finite values s counts.
func (s *Sketch) Count() int64 {
	return int64(s.zero + s.pos.total + s.neg.total)
}

// Invalid returns how many NaN or infinite values were offered to Add.
func (s *Sketch) Invalid() int64 { return s.invalid }

// Alpha returns the relative accuracy.
func (s *Sketch) Alpha() float64 {
	if s.alpha == 0 {
		return DefaultAlpha
	}
	return s.alpha
}

// MaxBuckets returns the bound on buckets per sign.
func (s *Sketch) MaxBuckets() int {
	if s.maxBuckets == 0 {
		return DefaultMaxBuckets
	}
	return s.maxBuckets
}

// Collapsed reports whether buckets of small magnitude were folded together
// to respect MaxBuckets, which voids the error bound for them (see Sketch).
func (s *Sketch) Collapsed() bool { return s.pos.collapsed || s.neg.collapsed }

// Min returns the smallest finite value added, or NaN when s is empty.
func (s *Sketch) Min() float64 {
	if s.Count() == 0 {
		return math.NaN()
	}
	return s.min
}

// Max returns the largest finite value added, or NaN when s is empty.
func (s *Sketch) Max() float64 {
	if s.Count() == 0 {
		return math.NaN()
	}
	return s.max
}

// Quantile returns an estimate of the q-quantile, within the bound stated on
// Sketch, or NaN when s is empty or q is outside [0, 1].
func (s *Sketch) Quantile(q float64) float64 {
	n := s.Count()
	if n == 0 || !(q >= 0 && q <= 1) {
		return math.NaN()
	}
	switch q {
	case 0:
		return s.min
	case 1:
		return s.max
	}
	s.init()
	rank := uint64(q * float64(n-1))
	var v float64
	var cum uint64
	if i, ok := s.neg.find(rank, &cum, true); ok {
		v = -s.value(i)
	} else if cum += s.zero; cum > rank {
		v = 0
	} else if i, ok := s.pos.find(rank, &cum, false); ok {
		v = s.value(i)
	} else {
		v = s.max // unreachable: the counts sum to n > rank
	}
	// x_q lies in [min, max], so clamping can only bring the estimate closer.
	return min(max(v, s.min), s.max)
}

// MarshalBinary encodes s: the version byte; alpha (8-byte float); uvarint
// MaxBuckets, invalid count and zero-bucket count; the positive and the
// negative store, each as a uvarint bucket count and, when not zero, a
// zig-zag varint index of the lowest bucket, a collapsed flag byte and one
// uvarint count per bucket; then, when s is not empty, min and max as 8-byte
// floats.
func (s *Sketch) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 64+2*(len(s.pos.bins)+len(s.neg.bins)))
	b = append(b, tagSketch)
	b = appendFloat(b, s.Alpha())
	b = binary.AppendUvarint(b, uint64(s.MaxBuckets()))
	b = binary.AppendUvarint(b, uint64(s.invalid))
	b = binary.AppendUvarint(b, s.zero)
	b = s.pos.appendTo(b)
	b = s.neg.appendTo(b)
	if s.Count() > 0 {
		b = appendFloat(b, s.min)
		b = appendFloat(b, s.max)
	}
	return b, nil
}

// UnmarshalBinary replaces s with the sketch encoded in data. On error s is
// unchanged.
func (s *Sketch) UnmarshalBinary(data []byte) error {
	d := decoder{what: "sketch", b: data}
	d.header(tagSketch)
	alpha := d.float()
	maxBuckets := d.bounded("max buckets", 1, MaxSketchBuckets)
	if d.err != nil {
		return d.err
	}
	if err := checkSketchParams(alpha, maxBuckets); err != nil {
		d.fail("%v", err)
		return d.err
	}
	var v Sketch
	v.setParams(alpha, maxBuckets)
	v.invalid = d.count()
	v.zero = d.uvarint()
	var total int64
	d.addCount(&total, v.zero)
	lo := v.index(SketchMinValue) - 1
	hi := v.index(math.MaxFloat64) + 1
	v.pos.read(&d, "positive", maxBuckets, lo, hi, &total)
	v.neg.read(&d, "negative", maxBuckets, lo, hi, &total)
	if total > 0 {
		v.min = d.finite("min")
		v.max = d.finite("max")
	}
	switch {
	case d.err != nil:
	case v.min > v.max:
		d.fail("min %v > max %v", v.min, v.max)
	case len(v.pos.bins) > 0 && !(v.max > SketchMinValue):
		d.fail("positive buckets but max %v", v.max)
	case len(v.neg.bins) > 0 && !(v.min < -SketchMinValue):
		d.fail("negative buckets but min %v", v.min)
	}
	if err := d.finish(); err != nil {
		return err
	}
	*s = v
	return nil
}

// store counts one sign's buckets densely: bins[i] counts bucket offset+i.
// When not empty, its first and last bins are not zero, so a store's layout
// is a function of the values it counts.
type store struct {
	bins      []uint64
	offset    int
	total     uint64
	collapsed bool
}

func (st *store) reset() {
	st.bins = st.bins[:0]
	st.offset, st.total, st.collapsed = 0, 0, false
}

func (st *store) add(idx int, c uint64, maxBuckets int) {
	idx = st.cover(idx, maxBuckets)
	st.bins[idx-st.offset] += c
	st.total += c
}

// cover extends the store to bucket idx and returns the bucket that now
// counts idx. The store never spans more than maxBuckets: extending it upward
// folds the lowest buckets into the lowest one kept, and an index below the
// span maps to its lowest bucket. Either way the store keeps exact counts for
// buckets above top−maxBuckets+1 and the sum of all lower ones in that
// bucket, whatever the order of additions — which is what makes Merge exact.
func (st *store) cover(idx, maxBuckets int) int {
	if len(st.bins) == 0 {
		st.reserve(1, maxBuckets)
		st.bins = st.bins[:1]
		st.bins[0] = 0
		st.offset = idx
		return idx
	}
	top := st.offset + len(st.bins) - 1
	switch {
	case idx > top:
		if lo := idx - maxBuckets + 1; lo > st.offset {
			st.collapseTo(lo)
		}
		n := idx - st.offset + 1
		st.reserve(n, maxBuckets)
		old := len(st.bins)
		st.bins = st.bins[:n]
		clear(st.bins[old:])
	case idx < st.offset:
		if lo := top - maxBuckets + 1; idx < lo {
			idx = lo
			st.collapsed = true
		}
		if k := st.offset - idx; k > 0 {
			n := len(st.bins)
			st.reserve(n+k, maxBuckets)
			st.bins = st.bins[:n+k]
			copy(st.bins[k:], st.bins[:n])
			clear(st.bins[:k])
			st.offset = idx
		}
	}
	return idx
}

// collapseTo folds every bucket below lo into bucket lo and drops them.
func (st *store) collapseTo(lo int) {
	st.collapsed = true
	k := lo - st.offset
	if k >= len(st.bins) {
		var sum uint64
		for _, c := range st.bins {
			sum += c
		}
		st.bins = st.bins[:1]
		st.bins[0] = sum
		st.offset = lo
		return
	}
	var sum uint64
	for _, c := range st.bins[:k] {
		sum += c
	}
	st.bins[k] += sum
	n := copy(st.bins, st.bins[k:])
	st.bins = st.bins[:n]
	st.offset = lo
}

// reserve makes room for n bins, growing geometrically up to maxBuckets.
func (st *store) reserve(n, maxBuckets int) {
	if n <= cap(st.bins) {
		return
	}
	c := max(2*cap(st.bins), 32, n)
	c = min(c, maxBuckets)
	b := make([]uint64, len(st.bins), c)
	copy(b, st.bins)
	st.bins = b
}

func (st *store) merge(o *store, maxBuckets int) {
	if len(o.bins) == 0 {
		return
	}
	st.cover(o.offset+len(o.bins)-1, maxBuckets)
	lo := st.cover(o.offset, maxBuckets)
	for i, c := range o.bins {
		st.bins[max(o.offset+i, lo)-st.offset] += c
	}
	st.total += o.total
	st.collapsed = st.collapsed || o.collapsed
}

// find walks the buckets in increasing order of value (decreasing index for
// the negative store), adding their counts to *cum, and returns the first
// bucket where *cum exceeds rank.
func (st *store) find(rank uint64, cum *uint64, negative bool) (int, bool) {
	n := len(st.bins)
	for j := range n {
		i := j
		if negative {
			i = n - 1 - j
		}
		*cum += st.bins[i]
		if *cum > rank {
			return st.offset + i, true
		}
	}
	return 0, false
}

func (st *store) appendTo(b []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(st.bins)))
	if len(st.bins) == 0 {
		return b
	}
	b = binary.AppendVarint(b, int64(st.offset))
	flag := byte(0)
	if st.collapsed {
		flag = 1
	}
	b = append(b, flag)
	for _, c := range st.bins {
		b = binary.AppendUvarint(b, c)
	}
	return b
}

// read decodes a store whose bucket indices must lie in [lo, hi].
func (st *store) read(d *decoder, name string, maxBuckets, lo, hi int, total *int64) {
	n := d.bounded(name+" bucket count", 0, maxBuckets)
	if n == 0 || d.err != nil {
		return
	}
	off := d.varint()
	flag := d.byte()
	switch {
	case d.err != nil:
		return
	case off < int64(lo) || off > int64(hi-n+1):
		d.fail("%s buckets start at %d, outside [%d, %d]", name, off, lo, hi-n+1)
		return
	case flag > 1:
		d.fail("%s collapsed flag %d", name, flag)
		return
	case flag == 1 && n != maxBuckets:
		d.fail("%s store collapsed with %d < %d buckets", name, n, maxBuckets)
		return
	case n > len(d.b):
		d.fail("truncated") // each count takes at least a byte
		return
	}
	st.bins = make([]uint64, n)
	st.offset = int(off)
	st.collapsed = flag == 1
	for i := range st.bins {
		c := d.uvarint()
		st.bins[i] = c
		st.total += c
		d.addCount(total, c)
	}
	if d.err == nil && (st.bins[0] == 0 || st.bins[n-1] == 0) {
		d.fail("%s store has empty end buckets", name)
	}
}
