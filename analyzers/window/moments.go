package window

import (
	"encoding"
	"encoding/binary"
	"math"
)

var (
	_ encoding.BinaryMarshaler   = (*Moments)(nil)
	_ encoding.BinaryUnmarshaler = (*Moments)(nil)
)

// Moments summarizes a stream of numbers by count, mean, second central
// moment (M2, the sum of squared deviations from the mean), minimum and
// maximum, updated with Welford's method and merged with the parallel formula
// of Chan, Golub and LeVeque. NaN and ±Inf are not summarized but counted in
// Invalid.
//
// The zero value is an empty summary, ready to use. A Moments is not safe for
// concurrent use; its owner serializes access.
type Moments struct {
	n        int64
	invalid  int64
	mean, m2 float64
	min, max float64
}

// Add summarizes x; NaN and ±Inf only increment Invalid. It does not allocate.
func (m *Moments) Add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		m.invalid++
		return
	}
	if x == 0 {
		x = 0 // -0 → +0, so Min and Max cannot depend on the order of Adds
	}
	m.n++
	if m.n == 1 {
		m.mean, m.m2, m.min, m.max = x, 0, x, x
		return
	}
	d := x - m.mean
	m.mean += d / float64(m.n)
	m.m2 += d * (x - m.mean)
	m.min = min(m.min, x)
	m.max = max(m.max, x)
}

// Merge adds the values summarized by o to m, as if each had been added to m.
// It always returns nil; the error is there so that Moments fits Summary.
//
// The result does not depend on which operand is the receiver: the operands
// are put in a canonical order first, so a.Merge(b) and b.Merge(a) agree bit
// for bit. Regrouping merges changes Mean and M2 only by rounding.
func (m *Moments) Merge(o *Moments) error {
	m.invalid += o.invalid
	switch {
	case o.n == 0:
		return nil
	case m.n == 0:
		m.n, m.mean, m.m2, m.min, m.max = o.n, o.mean, o.m2, o.min, o.max
		return nil
	}
	a, b := *m, *o
	if !first(&a, &b) {
		a, b = b, a
	}
	n := a.n + b.n
	d := b.mean - a.mean
	fa, fb, fn := float64(a.n), float64(b.n), float64(n)
	m.mean = a.mean + d*(fb/fn)
	m.m2 = (a.m2 + b.m2) + d*d*(fa*fb/fn)
	m.n = n
	m.min = min(a.min, b.min)
	m.max = max(a.max, b.max)
	return nil
}

// first reports whether a goes first in Merge's canonical order: larger count
// first, then smaller mean, then smaller M2. Equal keys mean equal inputs to
// the formula, where the order does not matter.
func first(a, b *Moments) bool {
	switch {
	case a.n != b.n:
		return a.n > b.n
	case a.mean != b.mean:
		return a.mean < b.mean
	default:
		return a.m2 <= b.m2
	}
}

// Reset empties m.
func (m *Moments) Reset() { *m = Moments{} }

// Count returns how many finite values m summarizes.
func (m *Moments) Count() int64 { return m.n }

// Invalid returns how many NaN or infinite values were offered to Add.
func (m *Moments) Invalid() int64 { return m.invalid }

// Mean returns the arithmetic mean, or NaN when m is empty.
func (m *Moments) Mean() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.mean
}

// M2 returns the sum of squared deviations from the mean (0 when empty).
func (m *Moments) M2() float64 { return m.m2 }

// Var returns the population variance M2/n, the variance of the summarized
// values themselves, or NaN when m is empty. See SampleVar for the unbiased
// estimate of the variance of the distribution they were drawn from.
func (m *Moments) Var() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.m2 / float64(m.n)
}

// SampleVar returns the sample variance M2/(n-1) (Bessel's correction), or
// NaN when m holds fewer than two values.
func (m *Moments) SampleVar() float64 {
	if m.n < 2 {
		return math.NaN()
	}
	return m.m2 / float64(m.n-1)
}

// Std returns the population standard deviation, sqrt(Var()).
func (m *Moments) Std() float64 { return math.Sqrt(m.Var()) }

// SampleStd returns sqrt(SampleVar()).
func (m *Moments) SampleStd() float64 { return math.Sqrt(m.SampleVar()) }

// Min returns the smallest value, or NaN when m is empty.
func (m *Moments) Min() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.min
}

// Max returns the largest value, or NaN when m is empty.
func (m *Moments) Max() float64 {
	if m.n == 0 {
		return math.NaN()
	}
	return m.max
}

// MarshalBinary encodes m: the version byte, uvarint count and invalid count,
// then, when the count is not zero, mean, M2, min and max as 8-byte floats
// (at most 52 bytes; 3 when empty).
func (m *Moments) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+32)
	b = append(b, tagMoments)
	b = binary.AppendUvarint(b, uint64(m.n))
	b = binary.AppendUvarint(b, uint64(m.invalid))
	if m.n > 0 {
		b = appendFloat(b, m.mean)
		b = appendFloat(b, m.m2)
		b = appendFloat(b, m.min)
		b = appendFloat(b, m.max)
	}
	return b, nil
}

// UnmarshalBinary replaces m with the summary encoded in data. On error m is
// unchanged.
func (m *Moments) UnmarshalBinary(data []byte) error {
	d := decoder{what: "moments", b: data}
	d.header(tagMoments)
	var v Moments
	v.n = d.count()
	v.invalid = d.count()
	if v.n > 0 {
		v.mean = d.float()
		v.m2 = d.float()
		v.min = d.finite("min")
		v.max = d.finite("max")
		switch {
		case d.err != nil:
		case math.IsNaN(v.mean):
			d.fail("mean is NaN")
		case !(v.m2 >= 0):
			d.fail("M2 %v is negative", v.m2)
		case v.min > v.max:
			d.fail("min %v > max %v", v.min, v.max)
		}
		if v.mean == 0 {
			v.mean = 0
		}
	}
	if err := d.finish(); err != nil {
		return err
	}
	*m = v
	return nil
}
