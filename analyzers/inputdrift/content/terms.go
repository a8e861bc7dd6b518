package content

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// MaxTermsKept bounds a Terms' capacity (and so what a decoder allocates).
const MaxTermsKept = 1 << 12

// Terms counts, for the terms most prompts of a window contain, how many
// prompts contain each: a Misra–Gries summary (mergeable, as Agarwal et
// al. show, "Mergeable summaries", PODS 2012). Each count falls short of
// the truth by at most N/(Capacity+1), N the terms counted (each prompt
// counts its distinct terms, at most MaxTerms), whatever the order of
// adds and merges; on text, whose terms are few and frequent and many and
// rare, the frequent ones' counts are near exact. A term's text is kept
// only when the Doc kept it (explanations with words are asked for);
// otherwise only its hash.
//
// Between reductions the table holds up to twice Capacity terms; a
// reduction (when it is full, on Merge and before encoding) subtracts the
// (Capacity+1)-th largest count from every count and drops those left at
// zero, so a term costs amortized constant time. A Terms is not safe for
// concurrent use.
type Terms struct {
	capacity int
	prompts  int64
	m        map[uint32]termCount
}

type termCount struct {
	n    int64
	text string
}

// NewTerms returns an empty Terms keeping about capacity terms.
func NewTerms(capacity int) *Terms {
	return &Terms{capacity: min(max(capacity, 1), MaxTermsKept), m: map[uint32]termCount{}}
}

// Prompts returns how many prompts were counted.
func (t *Terms) Prompts() int64 { return t.prompts }

// Add counts the distinct terms of one prompt.
func (t *Terms) Add(d *Doc) {
	t.prompts++
	for _, term := range d.Terms() {
		c, ok := t.m[term.Hash]
		if !ok && len(t.m) >= 2*t.capacity {
			t.reduce()
		}
		c.n++
		if c.text == "" && term.len > 0 {
			c.text = string(d.Text(term))
		}
		t.m[term.Hash] = c
	}
}

// reduce keeps at most capacity terms: the (capacity+1)-th largest count
// comes off every count.
func (t *Terms) reduce() {
	if len(t.m) <= t.capacity {
		return
	}
	counts := make([]int64, 0, len(t.m))
	for _, c := range t.m {
		counts = append(counts, c.n)
	}
	slices.SortFunc(counts, func(a, b int64) int { return cmp.Compare(b, a) })
	cut := counts[t.capacity]
	for h, c := range t.m {
		if c.n <= cut {
			delete(t.m, h)
			continue
		}
		c.n -= cut
		t.m[h] = c
	}
}

// Merge adds o's counts to t.
func (t *Terms) Merge(o *Terms) error {
	t.prompts += o.prompts
	for h, oc := range o.m {
		c := t.m[h]
		c.n += oc.n
		if c.text == "" {
			c.text = oc.text
		}
		t.m[h] = c
	}
	t.reduce()
	return nil
}

// Reset empties t.
func (t *Terms) Reset() {
	t.prompts = 0
	clear(t.m)
}

// Count returns the prompts counted as containing the term h (at most
// Prompts/(Capacity+1) fewer than the truth) and its text, if kept.
func (t *Terms) Count(h uint32) (int64, string) {
	c := t.m[h]
	return c.n, c.text
}

const termsVersion = 1

// MarshalBinary encodes t, reduced to its capacity: a version byte;
// uvarint capacity, prompts and term count; then each term by hash: its
// hash (4 bytes), uvarint count and uvarint-prefixed text.
func (t *Terms) MarshalBinary() ([]byte, error) {
	t.reduce()
	hs := make([]uint32, 0, len(t.m))
	for h := range t.m {
		hs = append(hs, h)
	}
	slices.Sort(hs)
	b := []byte{termsVersion}
	b = binary.AppendUvarint(b, uint64(t.capacity))
	b = binary.AppendUvarint(b, uint64(t.prompts))
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		c := t.m[h]
		b = binary.LittleEndian.AppendUint32(b, h)
		b = binary.AppendUvarint(b, uint64(c.n))
		b = binary.AppendUvarint(b, uint64(len(c.text)))
		b = append(b, c.text...)
	}
	return b, nil
}

// UnmarshalBinary replaces t with the Terms encoded in data; on error t is
// unchanged.
func (t *Terms) UnmarshalBinary(data []byte) error {
	bad := func(format string, a ...any) error { return fmt.Errorf("content terms: "+format, a...) }
	if len(data) == 0 || data[0] != termsVersion {
		return errors.New("content terms: unknown encoding")
	}
	b := data[1:]
	uv := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	capacity, ok1 := uv()
	prompts, ok2 := uv()
	n, ok3 := uv()
	switch {
	case !ok1 || !ok2 || !ok3:
		return bad("truncated header")
	case capacity < 1 || capacity > MaxTermsKept:
		return bad("capacity %d outside [1, %d]", capacity, MaxTermsKept)
	case n > capacity || prompts > math.MaxInt64:
		return bad("%d terms for capacity %d", n, capacity)
	}
	v := Terms{capacity: int(capacity), prompts: int64(prompts), m: make(map[uint32]termCount, n)}
	for range n {
		if len(b) < 4 {
			return bad("truncated term")
		}
		h := binary.LittleEndian.Uint32(b)
		b = b[4:]
		count, ok := uv()
		tl, ok2 := uv()
		if !ok || !ok2 || count == 0 || count > prompts || tl > uint64(len(b)) || tl > MaxWordBytes {
			return bad("term %x: count %d, text of %d bytes", h, count, tl)
		}
		text := b[:tl]
		b = b[tl:]
		if _, dup := v.m[h]; dup || !utf8.Valid(text) {
			return bad("term %x repeated or not UTF-8", h)
		}
		v.m[h] = termCount{n: int64(count), text: string(text)}
	}
	if len(b) != 0 {
		return bad("%d bytes after the terms", len(b))
	}
	*t = v
	return nil
}

// Shift is a term whose share of the prompts moved between two windows.
type Shift struct {
	Hash uint32
	// Text is the term, when both windows' Docs kept text; empty
	// otherwise.
	Text string
	// Ref and Cur are the shares of the reference's and the current
	// window's prompts that contain the term (Terms' counts: at most
	// their error low).
	Ref, Cur float64
}

// Explain returns up to n terms whose share of the prompts rose most from
// ref to cur, largest rise first, and up to n whose share fell most.
func Explain(ref, cur *Terms, n int) (rose, fell []Shift) {
	if ref.prompts == 0 || cur.prompts == 0 || n <= 0 {
		return nil, nil
	}
	var all []Shift
	add := func(h uint32) {
		rc, rt := ref.Count(h)
		cc, ct := cur.Count(h)
		text := rt
		if text == "" {
			text = ct
		}
		all = append(all, Shift{Hash: h, Text: text, Ref: float64(rc) / float64(ref.prompts), Cur: float64(cc) / float64(cur.prompts)})
	}
	for h := range cur.m {
		add(h)
	}
	for h := range ref.m {
		if _, ok := cur.m[h]; !ok {
			add(h)
		}
	}
	delta := func(s Shift) float64 { return s.Cur - s.Ref }
	slices.SortFunc(all, func(a, b Shift) int {
		if c := cmp.Compare(delta(b), delta(a)); c != 0 {
			return c
		}
		return cmp.Compare(a.Hash, b.Hash)
	})
	for _, s := range all {
		if len(rose) == n || delta(s) <= 0 {
			break
		}
		rose = append(rose, s)
	}
	for i := len(all) - 1; i >= 0 && len(fell) < n && delta(all[i]) < 0; i-- {
		fell = append(fell, all[i])
	}
	return rose, fell
}
