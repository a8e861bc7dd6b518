package usage

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/window"
)

func ledgerOf(keys ...usageKey) *ledger {
	l := new(ledger)
	for i, k := range keys {
		l.add(k, Counts{Requests: 1, PromptTokens: int64(i), CompletionTokens: 2 * int64(i), CountedRequests: int64(i % 2)})
	}
	return l
}

// manyKeys returns n distinct keys.
func manyKeys(n int) []usageKey {
	ks := make([]usageKey, n)
	for i := range ks {
		ks[i] = usageKey{fmt.Sprintf("t%d", i%97), fmt.Sprintf("m%d", i/97), "b"}
	}
	return ks
}

func encodeLedger(t testing.TB, l *ledger) []byte {
	t.Helper()
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLedgerRoundTrip: a ledger decodes to what was encoded, merging equals
// adding everything to one ledger, in any order, below and beyond the key
// bound, and the bound holds without losing a token.
func TestLedgerRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 3, MaxKeys - 1, MaxKeys, MaxKeys + 500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ks := manyKeys(n)
			all := ledgerOf(ks...)
			if len(all.m) > MaxKeys {
				t.Fatalf("%d keys kept, bound %d", len(all.m), MaxKeys)
			}
			var want Counts
			for i := range ks {
				want = want.plus(Counts{1, int64(i), 2 * int64(i), int64(i % 2)})
			}
			var got Counts
			for _, r := range all.rows() {
				got = got.plus(r.Counts)
			}
			if got != want {
				t.Errorf("rows sum to %+v, want %+v", got, want)
			}
			enc := encodeLedger(t, all)
			dec := new(ledger)
			if err := dec.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(all.rows(), dec.rows()); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
			// Two halves, counted separately, merged both ways; the same
			// key counted on both sides adds up.
			var a, b ledger
			for i, k := range ks {
				c := Counts{1, int64(i), 2 * int64(i), int64(i % 2)}
				if i%3 == 0 {
					a.add(k, c)
				} else {
					b.add(k, c)
				}
			}
			ab, ba := new(ledger), new(ledger)
			for _, m := range []struct {
				dst  *ledger
				srcs []*ledger
			}{{ab, []*ledger{&a, &b}}, {ba, []*ledger{&b, &a}}} {
				for _, s := range m.srcs {
					if err := m.dst.Merge(s); err != nil {
						t.Fatal(err)
					}
				}
			}
			for name, m := range map[string]*ledger{"a+b": ab, "b+a": ba} {
				if e := encodeLedger(t, m); !bytes.Equal(e, enc) {
					t.Errorf("%s encodes differently from one ledger of everything", name)
				}
			}
			if n > 0 {
				self := ledgerOf(ks...)
				self.Merge(self)
				twice := ledgerOf(ks...)
				twice.Merge(ledgerOf(ks...))
				if !bytes.Equal(encodeLedger(t, self), encodeLedger(t, twice)) {
					t.Error("merging a ledger into itself is not merging a copy")
				}
			}
			all.Reset()
			if r := all.rows(); len(r) != 0 {
				t.Errorf("rows after Reset: %v", r)
			}
		})
	}
}

// TestLedgerRows: rows go by total tokens, then key; usage beyond the key
// bound is one other/other/other row, added to a real key of that name.
func TestLedgerRows(t *testing.T) {
	var l ledger
	l.add(usageKey{"b", "m", "x"}, Counts{Requests: 1, PromptTokens: 5, CompletionTokens: 5})
	l.add(usageKey{"a", "m", "x"}, Counts{Requests: 2, PromptTokens: 1, CompletionTokens: 9})
	l.add(usageKey{"", "m", "x"}, Counts{Requests: 1, CompletionTokens: 20, CountedRequests: 1})
	want := []Row{
		{"", "m", "x", Counts{1, 0, 20, 1}},
		{"a", "m", "x", Counts{2, 1, 9, 0}},
		{"b", "m", "x", Counts{1, 5, 5, 0}},
	}
	if d := cmp.Diff(want, l.rows()); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}

	full := ledgerOf(manyKeys(MaxKeys + 10)...)
	other := usageKey{Other, Other, Other}
	rows := func() (n int, o Counts) {
		for _, r := range full.rows() {
			if (usageKey{r.Tenant, r.Model, r.Backend}) == other {
				n, o = n+1, r.Counts
			}
		}
		return n, o
	}
	n, o := rows()
	if n != 1 || o != full.other || o.Requests != 10 {
		t.Errorf("%d other rows, %+v; want one with the 10 requests beyond the bound (%+v)", n, o, full.other)
	}
	// A real other/other/other key (say the gateway's "other" tenant of an
	// unconfigured model on a backend named "other") gets the overflow
	// added: still one row.
	mixed := ledger{m: map[usageKey]ledgerEntry{other: {other.hash(), Counts{Requests: 2}}}, other: Counts{Requests: 3, PromptTokens: 1}}
	if d := cmp.Diff([]Row{{Other, Other, Other, Counts{Requests: 5, PromptTokens: 1}}}, mixed.rows()); d != "" {
		t.Errorf("other rows (-want +got):\n%s", d)
	}
}

// TestLedgerCorrupt: inputs MarshalBinary cannot have written fail with the
// window package's errors and leave the ledger as it was.
func TestLedgerCorrupt(t *testing.T) {
	good := encodeLedger(t, ledgerOf(usageKey{"a", "m", "x"}, usageKey{"b", "m", "x"}))
	key := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := map[string]struct {
		data []byte
		want error
	}{
		"empty":          {nil, window.ErrCorrupt},
		"other type":     {[]byte{0x41, 0, 0, 0}, window.ErrCorrupt},
		"newer version":  {[]byte{0xa2}, window.ErrVersion},
		"truncated":      {good[:len(good)-1], window.ErrCorrupt},
		"trailing":       {append(good[:len(good):len(good)], 0), window.ErrCorrupt},
		"too many keys":  {[]byte{tagLedger, 0, 0, 0, 0, 0x81, 0x40}, window.ErrCorrupt},
		"huge key count": {[]byte{tagLedger, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, window.ErrCorrupt},
		"other, few keys": {cat([]byte{tagLedger, 1, 0, 0, 0, 1},
			key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"other tokens, no requests": {[]byte{tagLedger, 0, 5, 0, 0, 0}, window.ErrCorrupt},
		"no requests":               {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"), []byte{0, 1, 0, 0}), window.ErrCorrupt},
		"counted > requests":        {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 2}), window.ErrCorrupt},
		"keys out of order": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("b"), key("m"), key("x"), []byte{1, 0, 0, 0}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"duplicate key": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"label too long": {cat([]byte{tagLedger, 0, 0, 0, 0, 1, 0x81, 0x10}, bytes.Repeat([]byte("a"), 0x801), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"count overflows": {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"),
			[]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0}), window.ErrCorrupt},
		"total overflows": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("a"), key("m"), key("x"), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0},
			key("b"), key("m"), key("x"), []byte{1, 1, 0, 0}), window.ErrCorrupt},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l := ledgerOf(usageKey{"keep", "me", "x"})
			before := encodeLedger(t, l)
			err := l.UnmarshalBinary(c.data)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if !bytes.Equal(encodeLedger(t, l), before) {
				t.Error("a failed decode changed the ledger")
			}
		})
	}
}

// FuzzLedgerUnmarshal: decoding never panics, fails only with the window
// package's errors, and what it accepts re-encodes canonically and can be
// used.
func FuzzLedgerUnmarshal(f *testing.F) {
	seeds := [][]byte{nil, {tagLedger}}
	// No full ledger: its 100 kB would slow the fuzzer to a crawl
	// (TestLedgerRoundTrip decodes those).
	for _, l := range []*ledger{new(ledger), ledgerOf(usageKey{"", "m", "a"}, usageKey{"t", "other", "b"}), ledgerOf(manyKeys(5)...)} {
		seeds = append(seeds, encodeLedger(f, l))
	}
	for _, s := range seeds {
		f.Add(s)
		if len(s) > 1 {
			f.Add(s[:len(s)/2])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := new(ledger)
		if err := l.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, window.ErrCorrupt) && !errors.Is(err, window.ErrVersion) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrVersion", err)
			}
			return
		}
		b1 := encodeLedger(t, l)
		w := new(ledger)
		if err := w.UnmarshalBinary(b1); err != nil {
			t.Fatalf("re-encoding of accepted input rejected: %v", err)
		}
		if b2 := encodeLedger(t, w); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not canonical:\n%x\n%x", b1, b2)
		}
		if len(l.m) > MaxKeys {
			t.Fatalf("%d keys decoded", len(l.m))
		}
		l.Merge(w)
		l.add(usageKey{"fuzz", "", ""}, Counts{Requests: 1})
		_ = l.rows()
	})
}

// usageClock is a settable clock for pipelines under test.
