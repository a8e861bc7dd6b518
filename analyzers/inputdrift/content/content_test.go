package content

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// read returns the Doc of text, read as one text.
func read(text string, keep bool) *Doc {
	var r Reader
	d := new(Doc)
	r.Reset(d, keep)
	for _, c := range text {
		r.Rune(c)
	}
	r.Finish()
	return d
}

// words returns the kept terms' texts, sorted.
func words(d *Doc) []string {
	var out []string
	for _, t := range d.Terms() {
		out = append(out, string(d.Text(t)))
	}
	slices.Sort(out)
	return out
}

// TestReaderWords: words are lowercased runs of letters and digits, each
// ideograph a word; numbers and single Latin letters are counted but not
// kept; a word kept twice is one term.
func TestReaderWords(t *testing.T) {
	d := read("The cat, the CAT! a 2026 Ünïcode naïve—日本語 кот x", true)
	want := []string{"cat", "naïve", "the", "ünïcode", "кот", "日", "本", "語"}
	if got := words(d); !slices.Equal(got, want) {
		t.Errorf("terms %q, want %q", got, want)
	}
	if d.Words != 13 {
		t.Errorf("%d words read, want 13", d.Words)
	}
	// Without text, the same hashes and no text.
	h := read("The cat, the CAT! a 2026 Ünïcode naïve—日本語 кот x", false)
	if len(h.Terms()) != len(d.Terms()) {
		t.Fatalf("%d terms without text, %d with", len(h.Terms()), len(d.Terms()))
	}
	for _, term := range h.Terms() {
		if len(h.Text(term)) != 0 {
			t.Errorf("term %x kept text %q", term.Hash, h.Text(term))
		}
	}
}

// TestReaderKeepsSmallestHashes: of a long prompt's distinct words, the
// K with the smallest hashes are kept, whatever their order, and a word
// longer than MaxWordBytes is told by its start.
func TestReaderKeepsSmallestHashes(t *testing.T) {
	var ws []string
	for i := range 500 {
		ws = append(ws, fmt.Sprintf("w%dx", i))
	}
	a := read(strings.Join(ws, " "), false)
	slices.Reverse(ws)
	b := read(strings.Join(ws, " ")+" "+strings.Join(ws, " "), false)
	hashes := func(d *Doc) []uint32 {
		var out []uint32
		for _, t := range d.Terms() {
			out = append(out, t.Hash)
		}
		slices.Sort(out)
		return out
	}
	if len(a.Terms()) != K || !slices.Equal(hashes(a), hashes(b)) {
		t.Errorf("kept %d and %d terms, or different ones", len(a.Terms()), len(b.Terms()))
	}
	for _, w := range ws {
		if h := hashes(read(w, false)); h[0] < hashes(a)[K-1] && !slices.Contains(hashes(a), h[0]) {
			t.Fatalf("%q has a hash among the smallest but was not kept", w)
		}
	}
	long := strings.Repeat("é", 40)
	if got := words(read(long+" "+long+"z", true)); len(got) != 1 || len(got[0]) != MaxWordBytes {
		t.Errorf("two words alike in their first %d bytes: %q", MaxWordBytes, got)
	}
}

// TestReaderBounded: a prompt of a million words, one word repeated
// 100,000 times, a megabyte of binary junk, a hundred scripts or nothing
// costs at most MaxWords words and allocates nothing.
func TestReaderBounded(t *testing.T) {
	junk := make([]byte, 1<<20)
	cc := rand.NewChaCha8([32]byte{1})
	cc.Read(junk)
	// A hundred scripts: a word of each of the first hundred that have
	// letters, 200 times over.
	var scripts strings.Builder
	n := 0
	for _, name := range slices.Sorted(maps.Keys(unicode.Scripts)) {
		r16 := unicode.Scripts[name].R16
		if n == 100 || len(r16) == 0 {
			continue
		}
		for c := rune(r16[0].Lo); c <= rune(r16[0].Hi) && c < rune(r16[0].Lo)+5; c++ {
			scripts.WriteRune(c)
		}
		scripts.WriteByte(' ')
		n++
	}
	for name, text := range map[string]string{
		"one word 100,000 times": strings.Repeat("again ", 100000),
		"a million words":        strings.Repeat("a b c d e f g h i j ", 100000),
		"binary junk":            string(junk),
		"a hundred scripts":      strings.Repeat(scripts.String(), 200),
		"empty":                  "",
	} {
		var r Reader
		var d Doc
		allocs := testing.AllocsPerRun(2, func() {
			r.Reset(&d, true)
			for _, c := range text {
				r.Rune(c)
			}
			r.Break()
			r.Finish()
		})
		if allocs != 0 || d.Words > MaxWords || len(d.Terms()) > K {
			t.Errorf("%s: %v allocations, %d words, %d terms", name, allocs, d.Words, len(d.Terms()))
		}
	}
}

// fill adds n prompts of texts to s, keyed from rng.
func fill(s *Sample, rng *rand.Rand, texts []string, n int) {
	for range n {
		txt := texts[rng.IntN(len(texts))]
		s.Add(rng.Uint64(), read(txt, false), float64(len([]rune(txt))))
	}
}

// TestSampleMergeExact: a stream split between two Samples (as replicas
// split traffic) and merged, in either order, is bit for bit the Sample
// of the whole stream, and survives its encoding.
func TestSampleMergeExact(t *testing.T) {
	texts := []string{"alpha beta", "gamma delta epsilon", "zeta", "eta theta iota kappa", "lambda mu"}
	rng := rand.New(rand.NewPCG(3, 4))
	whole, a, b := NewSample(64), NewSample(64), NewSample(64)
	for i := range 1000 {
		txt := texts[rng.IntN(len(texts))] + fmt.Sprintf(" n%dx", i%97)
		key, d := rng.Uint64(), read(txt, false)
		whole.Add(key, d, float64(len(txt)))
		if i%3 == 0 {
			a.Add(key, d, float64(len(txt)))
		} else {
			b.Add(key, d, float64(len(txt)))
		}
	}
	ab, ba := NewSample(64), NewSample(64)
	ab.Merge(a)
	ab.Merge(b)
	ba.Merge(b)
	ba.Merge(a)
	want, _ := whole.MarshalBinary()
	for name, s := range map[string]*Sample{"a+b": ab, "b+a": ba} {
		got, _ := s.MarshalBinary()
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the whole stream's sample", name)
		}
		var dec Sample
		if err := dec.UnmarshalBinary(got); err != nil {
			t.Fatal(err)
		}
		if again, _ := dec.MarshalBinary(); !bytes.Equal(again, want) {
			t.Errorf("%s changed in its encoding", name)
		}
	}
	if whole.Seen() != 1000 || whole.Len() != 64 {
		t.Errorf("seen %d, kept %d", whole.Seen(), whole.Len())
	}
}

// TestSampleRejectsBadEncodings: truncations, a capacity beyond the bound
// and rows out of order are errors, and leave the Sample as it was.
func TestSampleRejectsBadEncodings(t *testing.T) {
	s := NewSample(8)
	fill(s, rand.New(rand.NewPCG(1, 1)), []string{"one two three", "four five"}, 20)
	good, _ := s.MarshalBinary()
	var dst Sample
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version":   append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"capacity":  {sampleVersion, 0xff, 0xff, 0xff, 0x7f, 0, 0},
		"unordered": func() []byte {
			b := slices.Clone(good)
			// The first row's first two term slots swapped.
			off := len(b) - 8*rowBytes + 12
			copy(b[off:off+4], good[off+4:off+8])
			copy(b[off+4:off+8], good[off:off+4])
			return b
		}(),
	} {
		if err := dst.UnmarshalBinary(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
		if dst.Len() != 0 || dst.Seen() != 0 {
			t.Errorf("%s: the Sample changed", name)
		}
	}
}

// TestTermsHeavyHitters: terms in many prompts keep near-exact counts in
// a bounded table, across merges and the encoding; Explain names the
// rising and the falling ones.
func TestTermsHeavyHitters(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	prompt := func(topic string, i int) *Doc {
		return read(fmt.Sprintf("%s rare%dq rare%dz common", topic, rng.IntN(100000), i), true)
	}
	ref, cur1, cur2 := NewTerms(16), NewTerms(16), NewTerms(16)
	for i := range 2000 {
		ref.Add(prompt("apple", i))
		if i%2 == 0 {
			cur1.Add(prompt("banana", i))
		} else {
			cur2.Add(prompt("common", i))
		}
	}
	cur := NewTerms(16)
	cur.Merge(cur1)
	cur.Merge(cur2)
	enc, _ := cur.MarshalBinary()
	var dec Terms
	if err := dec.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if len(dec.m) > 16 || len(ref.m) > 32 {
		t.Errorf("%d and %d terms kept, bound 16 (32 between reductions)", len(dec.m), len(ref.m))
	}
	h := func(w string) uint32 { return read(w, false).Terms()[0].Hash }
	// Each prompt counts 3 or 4 terms: 4·2000/17 is the bound on the
	// error.
	if n, text := dec.Count(h("common")); n < 2000-4*2000/17 || text != "common" {
		t.Errorf("common: %d of 2000 prompts, text %q", n, text)
	}
	rose, fell := Explain(ref, &dec, 2)
	if len(rose) == 0 || rose[0].Text != "banana" || len(fell) == 0 || fell[0].Text != "apple" {
		t.Errorf("rose %+v, fell %+v; want banana and apple first", rose, fell)
	}
	if err := dec.UnmarshalBinary(enc[:len(enc)-1]); err == nil {
		t.Error("a truncated encoding decoded")
	}
}

// FuzzReader: any text reads in bounded words and terms, without a
// panic, and the same text always gives the same terms.
func FuzzReader(f *testing.F) {
	for _, s := range []string{"", "hello world", "日本語のテキスト", "\xff\xfe junk \x00", strings.Repeat("ab ", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, b := read(s, true), read(s, true)
		if a.Words > MaxWords || len(a.Terms()) > K {
			t.Fatalf("%d words, %d terms", a.Words, len(a.Terms()))
		}
		if !slices.Equal(words(a), words(b)) {
			t.Fatal("the same text read two ways")
		}
		for _, term := range a.Terms() {
			if len(a.Text(term)) > MaxWordBytes || len(a.Text(term)) == 0 {
				t.Fatalf("term text %q", a.Text(term))
			}
		}
	})
}

// BenchmarkReader reads a 1,000-character English prompt.
func BenchmarkReader(b *testing.B) {
	text := strings.Repeat("The quick brown fox jumps over the lazy dog near the riverbank at dawn. ", 14)[:1000]
	var r Reader
	var d Doc
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(&d, false)
		for _, c := range text {
			r.Rune(c)
		}
		r.Finish()
	}
}

// TestBinormalPSI: the PSI of two unit normals d apart is d², and
// their AUC Φ(d/√2) maps back to it; the ends stay finite.
func TestBinormalPSI(t *testing.T) {
	for _, d := range []float64{0.25, 0.5, 1, 2} {
		auc := 0.5 * math.Erfc(-d/2) // Φ(d/√2)
		if got := BinormalPSI(auc); math.Abs(got-d*d) > 1e-9 {
			t.Errorf("d = %v (AUC %.4f): %v, want %v", d, auc, got, d*d)
		}
	}
	for _, auc := range []float64{0, 0.3, 0.5, 1, math.NaN()} {
		if got := BinormalPSI(auc); math.IsNaN(got) || math.IsInf(got, 0) || got < 0 || got > 20 {
			t.Errorf("AUC %v: %v", auc, got)
		}
	}
}
