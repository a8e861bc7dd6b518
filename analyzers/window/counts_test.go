package window

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

type countsView struct {
	MaxCategories int
	Other, Total  int64
	Categories    map[string]int64
}

func viewCounts(c *Counts) any {
	v := countsView{MaxCategories: c.MaxCategories(), Other: c.Other(), Total: c.Total(), Categories: map[string]int64{}}
	for _, name := range c.Categories() {
		v.Categories[name] = c.Get(name)
	}
	return v
}

func sameCounts(t testing.TB) func(want, got *Counts) string {
	return sameEncoding[Counts](t, viewCounts, func(x, y any) string { return gocmp.Diff(x, y) })
}

func countsOf(maxCategories int, cats ...string) *Counts {
	c := NewCounts(maxCategories)
	for _, cat := range cats {
		c.Add(cat)
	}
	return c
}

func TestCountsBelowBound(t *testing.T) {
	var c Counts // zero value: DefaultMaxCategories
	for _, cat := range strings.Fields("stop length stop tool_calls stop") {
		c.Add(cat)
	}
	want := countsView{MaxCategories: DefaultMaxCategories, Total: 5, Categories: map[string]int64{"stop": 3, "length": 1, "tool_calls": 1}}
	if d := gocmp.Diff(want, viewCounts(&c)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if d := gocmp.Diff([]string{"length", "stop", "tool_calls"}, c.Categories()); d != "" {
		t.Errorf("Categories (-want +got):\n%s", d)
	}
	if c.Get("absent") != 0 {
		t.Error("Get of an absent category")
	}
}

// TestCountsBound: past the bound, the kept names are those with the
// smallest (FNV-1a hash, name), exactly counted, whatever the order; the
// rest is in Other.
func TestCountsBound(t *testing.T) {
	const bound = 4
	var stream []string
	for i := range 12 {
		for range i + 1 {
			stream = append(stream, fmt.Sprintf("cat%d", i))
		}
	}
	names := make([]string, 12)
	for i := range names {
		names[i] = fmt.Sprintf("cat%d", i)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(hashName(a), hashName(b)) })
	want := countsView{MaxCategories: bound, Total: int64(len(stream)), Categories: map[string]int64{}}
	for _, name := range names[:bound] {
		var n int64
		fmt.Sscanf(name, "cat%d", &n)
		want.Categories[name] = n + 1
	}
	want.Other = want.Total
	for _, n := range want.Categories {
		want.Other -= n
	}
	rng := rand.New(rand.NewPCG(1, 1))
	for trial := range 5 {
		if trial > 0 {
			rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
		}
		if d := gocmp.Diff(want, viewCounts(countsOf(bound, stream...))); d != "" {
			t.Errorf("order %d (-want +got):\n%s", trial, d)
		}
	}
}

func TestCountsClonesNames(t *testing.T) {
	body := []byte("model-a and more")
	c := NewCounts(2)
	c.Add(string(body[:7])) // a copy already, but Add must not rely on it
	body[0] = 'X'
	if c.Get("model-a") != 1 {
		t.Errorf("categories %v", c.Categories())
	}
}

func TestCountsMergeLaws(t *testing.T) {
	type parts struct {
		name    string
		bound   int
		a, b, c []string
	}
	cases := []parts{
		{"all empty", 4, nil, nil, nil},
		{"below bound", 8, strings.Fields("a b a"), strings.Fields("c"), strings.Fields("a d")},
		{"bound reached only in the union", 3, strings.Fields("a b"), strings.Fields("c d"), strings.Fields("e a")},
		{"empty name", 2, []string{""}, []string{"", "x"}, nil},
	}
	rng := rand.New(rand.NewPCG(9, 9))
	pick := func() []string {
		var s []string
		for range rng.IntN(60) {
			s = append(s, fmt.Sprintf("c%d", rng.IntN(20)))
		}
		return s
	}
	for i := range 40 {
		cases = append(cases, parts{fmt.Sprintf("random %d", i), 1 + i%10, pick(), pick(), pick()})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b, c := countsOf(tc.bound, tc.a...), countsOf(tc.bound, tc.b...), countsOf(tc.bound, tc.c...)
			checkLaws[Counts](t, NewCounts(tc.bound), a, b, c, sameCounts(t))
			all := countsOf(tc.bound, slices.Concat(tc.b, tc.c, tc.a)...)
			if d := sameCounts(t)(all, merged[Counts](t, merged[Counts](t, a, b), c)); d != "" {
				t.Errorf("merge differs from adding all (-all +merged):\n%s", d)
			}
		})
	}
}

func TestCountsSelfMergeResetIncompatible(t *testing.T) {
	c := countsOf(2, "a", "b", "c", "a")
	if err := c.Merge(c); err != nil {
		t.Fatal(err)
	}
	if d := sameCounts(t)(countsOf(2, "a", "b", "c", "a", "a", "b", "c", "a"), c); d != "" {
		t.Errorf("self merge:\n%s", d)
	}
	before := viewCounts(c)
	if err := c.Merge(NewCounts(3)); !errors.Is(err, ErrIncompatible) {
		t.Errorf("Merge = %v, want ErrIncompatible", err)
	}
	if d := gocmp.Diff(before, viewCounts(c)); d != "" {
		t.Errorf("failed Merge changed the counts:\n%s", d)
	}
	c.Reset()
	if d := sameCounts(t)(NewCounts(2), c); d != "" {
		t.Errorf("reset:\n%s", d)
	}
	c.Add("z")
	if c.Get("z") != 1 || c.Total() != 1 {
		t.Errorf("after reset: %+v", viewCounts(c))
	}
}

func TestCountsRoundTrip(t *testing.T) {
	for _, c := range []*Counts{new(Counts), countsOf(3, "a", "", "b"), countsOf(2, "x", "y", "z", "w", "x")} {
		if d := sameCounts(t)(c, cloneOf[Counts](t, c)); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
	// A decoded full Counts keeps applying the hash rule.
	c := cloneOf[Counts](t, countsOf(2, "x", "y", "z"))
	c.Add("w")
	if d := sameCounts(t)(countsOf(2, "x", "y", "z", "w"), c); d != "" {
		t.Errorf("add after decode:\n%s", d)
	}
}

func TestCountsUnmarshalRejects(t *testing.T) {
	valid := encode[Counts](t, countsOf(3, "a", "b", "a"))
	build := func(maxCategories, other uint64, entries ...any) []byte {
		b := appendUvarintForTest([]byte{tagCounts}, maxCategories)
		b = appendUvarintForTest(b, other)
		b = appendUvarintForTest(b, uint64(len(entries)/2))
		for i := 0; i < len(entries); i += 2 {
			name := entries[i].(string)
			b = appendUvarintForTest(b, uint64(len(name)))
			b = append(b, name...)
			b = appendUvarintForTest(b, entries[i+1].(uint64))
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:len(valid)-1]},
		{"trailing", append(slices.Clone(valid), 0)},
		{"bound 0", build(0, 0)},
		{"more than the bound", build(1, 0, "a", uint64(1), "b", uint64(1))},
		{"unsorted", build(3, 0, "b", uint64(1), "a", uint64(1))},
		{"duplicate", build(3, 0, "a", uint64(1), "a", uint64(1))},
		{"zero count", build(3, 0, "a", uint64(0))},
		{"other below the bound", build(3, 5, "a", uint64(1))},
		{"total overflows", build(2, 1<<62, "a", uint64(1<<62), "b", uint64(1<<62))},
		{"name longer than input", []byte{tagCounts, 3, 0, 1, 100, 'a', 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := countsOf(3, "keep")
			before := viewCounts(c)
			if err := c.UnmarshalBinary(tc.data); !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			if d := gocmp.Diff(before, viewCounts(c)); d != "" {
				t.Errorf("failed UnmarshalBinary changed the counts:\n%s", d)
			}
		})
	}
}
