package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrIncompatible reports a Merge of summaries with different
	// parameters (sketch accuracy or bucket bound, reservoir capacity or
	// dimension, category bound).
	ErrIncompatible = errors.New("window: incompatible summaries")
	// ErrCorrupt reports an encoding that is truncated, has trailing bytes,
	// belongs to another type or describes an impossible summary.
	ErrCorrupt = errors.New("window: corrupt encoding")
	// ErrVersion reports an encoding of the right type in a format version
	// this build does not know (written by a newer replica).
	ErrVersion = errors.New("window: unknown encoding version")
)

// Leading bytes: type in the high nibble, format version in the low one.
const (
	tagMoments   byte = 0x11
	tagSketch    byte = 0x21
	tagReservoir byte = 0x31
	tagCounts    byte = 0x41
)

func appendFloat(b []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
}

// decoder reads an encoding front to back. The first failure sticks: later
// reads return zero values, so callers check d.err once, at the end or
// before allocating on the strength of a decoded length.
type decoder struct {
	what string
	b    []byte
	err  error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: %s: %w", d.what, fmt.Sprintf(format, args...), ErrCorrupt)
	}
	d.b = nil
}

func (d *decoder) header(tag byte) {
	if len(d.b) == 0 {
		d.fail("empty")
		return
	}
	v := d.b[0]
	d.b = d.b[1:]
	switch {
	case v>>4 != tag>>4:
		d.fail("version byte %#02x is not a %s", v, d.what)
	case v != tag:
		d.err = fmt.Errorf("%s: version byte %#02x: %w", d.what, v, ErrVersion)
		d.b = nil
	}
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a uvarint that must fit an int64 counter.
func (d *decoder) count() int64 {
	v := d.uvarint()
	if v > math.MaxInt64 {
		d.fail("count %d overflows int64", v)
		return 0
	}
	return int64(v)
}

// bounded reads a uvarint that must lie in [lo, hi].
func (d *decoder) bounded(name string, lo, hi int) int {
	v := d.uvarint()
	if d.err == nil && (v < uint64(lo) || v > uint64(hi)) {
		d.fail("%s %d outside [%d, %d]", name, v, lo, hi)
		return 0
	}
	return int(v)
}

func (d *decoder) uint64() uint64 {
	if len(d.b) < 8 {
		d.fail("truncated")
		return 0
	}
	v := binary.LittleEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) float() float64 { return math.Float64frombits(d.uint64()) }

// finite reads a float that must be finite; -0 becomes +0, as Add would.
func (d *decoder) finite(name string) float64 {
	f := d.float()
	if math.IsNaN(f) || math.IsInf(f, 0) {
		d.fail("%s is %v", name, f)
		return 0
	}
	if f == 0 {
		f = 0
	}
	return f
}

func (d *decoder) bytes(n int) []byte {
	if n < 0 || len(d.b) < n {
		d.fail("truncated")
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) finish() error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return d.err
}

// addCount adds c to *total, failing on int64 overflow.
func (d *decoder) addCount(total *int64, c uint64) {
	if c > math.MaxInt64 || *total > math.MaxInt64-int64(c) {
		d.fail("counts overflow int64")
		return
	}
	*total += int64(c)
}

// Decoder reads, for summaries kept outside this package, an encoding of
// a version byte followed by uvarints and byte strings, with this
// package's rules: the first failure sticks and wraps ErrCorrupt (a newer
// version byte of the same type, ErrVersion); later reads return zero
// values.
type Decoder struct{ d decoder }

// NewDecoder returns a Decoder over data that has read its version byte,
// which must be tag; what names the type in errors.
func NewDecoder(what string, tag byte, data []byte) *Decoder {
	d := &Decoder{decoder{what: what, b: data}}
	d.d.header(tag)
	return d
}

// Uvarint reads a uvarint.
func (d *Decoder) Uvarint() uint64 { return d.d.uvarint() }

// Count reads a uvarint that must fit an int64.
func (d *Decoder) Count() int64 { return d.d.count() }

// Bytes reads the next n bytes, without copying.
func (d *Decoder) Bytes(n int) []byte { return d.d.bytes(n) }

// Len returns the bytes not read yet.
func (d *Decoder) Len() int { return len(d.d.b) }

// Fail records a failure (unless one is recorded) and returns the error.
func (d *Decoder) Fail(format string, args ...any) error {
	d.d.fail(format, args...)
	return d.d.err
}

// Err returns the failure recorded, if any.
func (d *Decoder) Err() error { return d.d.err }

// Finish fails on trailing bytes and returns the failure recorded, if any.
func (d *Decoder) Finish() error { return d.d.finish() }
