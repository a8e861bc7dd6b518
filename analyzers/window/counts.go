package window

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

var (
	_ encoding.BinaryMarshaler   = (*Counts)(nil)
	_ encoding.BinaryUnmarshaler = (*Counts)(nil)
)

const (
	// DefaultMaxCategories bounds the categories of a zero-value Counts.
	DefaultMaxCategories = 64
	// MaxCategoriesLimit bounds a Counts' MaxCategories (and so what a
	// decoder will allocate).
	MaxCategoriesLimit = 1 << 16
)

// Counts counts occurrences of string categories, keeping at most
// MaxCategories of them by name; occurrences of the others are counted
// together in Other.
//
// Which categories are kept once there are too many is decided by a fixed
// 64-bit FNV-1a hash of the name: Counts keeps the MaxCategories names with
// the smallest (hash, name), and a new name with a smaller hash evicts the
// kept name with the largest, whose count moves to Other. Keeping the first
// names seen, or the most frequent, would make the result depend on the
// order of Adds and Merges; with the hash rule the kept names and their counts
// are a function of the multiset of categories added, so Merge is exactly
// associative and commutative and equals adding everything to one Counts.
// Below the bound, which is the intended use (model names, finish reasons,
// script classes), every category is counted exactly.
//
// The zero value is empty with DefaultMaxCategories. A Counts is not safe for
// concurrent use; its owner serializes access.
type Counts struct {
	maxCategories int // 0: DefaultMaxCategories
	m             map[string]int64
	other, total  int64
	// worst is the kept name with the largest (hash, name), valid while m
	// is full; it is the one a new smaller name evicts.
	worst     string
	worstHash uint64
}

// NewCounts returns empty counts keeping at most maxCategories categories.
// Zero or less means DefaultMaxCategories; it is capped at MaxCategoriesLimit.
func NewCounts(maxCategories int) *Counts {
	if maxCategories <= 0 {
		maxCategories = DefaultMaxCategories
	}
	return &Counts{maxCategories: min(maxCategories, MaxCategoriesLimit)}
}

// MaxCategories returns the bound on kept categories.
func (c *Counts) MaxCategories() int {
	if c.maxCategories == 0 {
		return DefaultMaxCategories
	}
	return c.maxCategories
}

// Add counts one occurrence of cat. It does not allocate for a category
// already kept or one that goes to Other.
func (c *Counts) Add(cat string) { c.add(cat, 1) }

func (c *Counts) add(cat string, n int64) {
	c.total += n
	if v, ok := c.m[cat]; ok {
		c.m[cat] = v + n
		return
	}
	if c.m == nil {
		c.m = make(map[string]int64)
	}
	if len(c.m) < c.MaxCategories() {
		// Clone: cat may be a slice of a large request body, which the map
		// would otherwise keep alive.
		c.m[strings.Clone(cat)] = n
		if len(c.m) == c.MaxCategories() {
			c.findWorst()
		}
		return
	}
	if !hashLess(hashName(cat), cat, c.worstHash, c.worst) {
		c.other += n
		return
	}
	c.other += c.m[c.worst]
	delete(c.m, c.worst)
	c.m[strings.Clone(cat)] = n
	c.findWorst()
}

func (c *Counts) findWorst() {
	first := true
	for name := range c.m {
		h := hashName(name)
		if first || hashLess(c.worstHash, c.worst, h, name) {
			c.worst, c.worstHash, first = name, h, false
		}
	}
}

func hashLess(ha uint64, a string, hb uint64, b string) bool {
	if ha != hb {
		return ha < hb
	}
	return a < b
}

// hashName is 64-bit FNV-1a, fixed so that every replica ranks names alike.
func hashName(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Merge adds o's counts to c. It fails with ErrIncompatible, leaving c
// unchanged, when MaxCategories differ.
func (c *Counts) Merge(o *Counts) error {
	if a, b := c.MaxCategories(), o.MaxCategories(); a != b {
		return fmt.Errorf("counts: max categories %d and %d: %w", a, b, ErrIncompatible)
	}
	if o == c {
		o = c.clone()
	}
	for name, n := range o.m {
		c.add(name, n)
	}
	c.other += o.other
	c.total += o.other
	return nil
}

func (c *Counts) clone() *Counts {
	v := *c
	v.m = make(map[string]int64, len(c.m))
	for k, n := range c.m {
		v.m[k] = n
	}
	return &v
}

// Reset empties c, keeping its bound and map storage.
func (c *Counts) Reset() {
	clear(c.m)
	c.other, c.total = 0, 0
	c.worst, c.worstHash = "", 0
}

// Get returns the count of cat, 0 when it is not kept.
func (c *Counts) Get(cat string) int64 { return c.m[cat] }

// Other returns the count of occurrences of categories not kept.
func (c *Counts) Other() int64 { return c.other }

// Total returns the count of all occurrences, Other included.
func (c *Counts) Total() int64 { return c.total }

// Len returns how many categories are kept.
func (c *Counts) Len() int { return len(c.m) }

// Categories returns the kept category names in increasing order.
func (c *Counts) Categories() []string {
	names := make([]string, 0, len(c.m))
	for name := range c.m {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// MarshalBinary encodes c: the version byte; uvarint MaxCategories, Other
// count and number of kept categories; then each kept category in increasing
// name order as a uvarint length, its bytes and a uvarint count.
func (c *Counts) MarshalBinary() ([]byte, error) {
	names := c.Categories()
	size := 1 + 3*binary.MaxVarintLen64
	for _, name := range names {
		size += len(name) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, size)
	b = append(b, tagCounts)
	b = binary.AppendUvarint(b, uint64(c.MaxCategories()))
	b = binary.AppendUvarint(b, uint64(c.other))
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(c.m[name]))
	}
	return b, nil
}

// UnmarshalBinary replaces c with the counts encoded in data. On error c is
// unchanged.
func (c *Counts) UnmarshalBinary(data []byte) error {
	d := decoder{what: "counts", b: data}
	d.header(tagCounts)
	maxCategories := d.bounded("max categories", 1, MaxCategoriesLimit)
	other := d.count()
	n := d.bounded("categories", 0, maxCategories)
	switch {
	case d.err != nil:
		return d.err
	case 2*n > len(d.b): // each category takes at least two bytes
		d.fail("truncated")
		return d.err
	case other > 0 && n < maxCategories:
		// Other only counts when the kept categories are full, and they
		// stay full.
		d.fail("other counted with %d < %d categories", n, maxCategories)
		return d.err
	}
	v := Counts{maxCategories: maxCategories, m: make(map[string]int64, n), other: other, total: other}
	prev := ""
	for i := range n {
		name := string(d.bytes(d.bounded("name length", 0, len(d.b))))
		cnt := d.uvarint()
		switch {
		case d.err != nil:
			return d.err
		case i > 0 && name <= prev:
			d.fail("category %q not after %q", name, prev)
		case cnt == 0:
			d.fail("category %q has count 0", name)
		}
		d.addCount(&v.total, cnt)
		v.m[name] = int64(cnt)
		prev = name
	}
	if err := d.finish(); err != nil {
		return err
	}
	if len(v.m) == maxCategories {
		v.findWorst()
	}
	*c = v
	return nil
}
