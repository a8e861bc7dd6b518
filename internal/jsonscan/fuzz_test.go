package jsonscan

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// decode builds what encoding/json (with UseNumber) decodes the value at s
// into, using only the scanner: objects as maps (the last of duplicate keys
// wins), numbers as their text, strings unescaped. exact is cleared when a
// string holds invalid UTF-8, which encoding/json replaces and the scanner
// leaves as it is: there only encoding/json can tell.
func decode(t *testing.T, s *Scanner, exact *bool) (any, bool) {
	switch c := s.Peek(); c {
	case '{':
		if !s.Enter('{') {
			return nil, false
		}
		m := map[string]any{}
		for n := 0; s.Member(&n); {
			k := s.Key()
			if !utf8.Valid(k) {
				*exact = false
			}
			v, ok := decode(t, s, exact)
			if !ok {
				return nil, false
			}
			m[Unescape(k)] = v
		}
		return m, s.OK()
	case '[':
		if !s.Enter('[') {
			return nil, false
		}
		a := []any{}
		for n := 0; s.Element(&n); {
			v, ok := decode(t, s, exact)
			if !ok {
				return nil, false
			}
			a = append(a, v)
		}
		return a, s.OK()
	case '"':
		raw, ok := s.Str()
		if !ok {
			return nil, false
		}
		if !utf8.Valid(raw) {
			*exact = false
		}
		if Verbatim(raw) && Unescape(raw) != string(raw) {
			t.Errorf("Verbatim(%q) but it unescapes to %q", raw, Unescape(raw))
		}
		if Plain(raw) && !Verbatim(raw) {
			t.Errorf("Plain(%q) but not Verbatim", raw)
		}
		return Unescape(raw), true
	case 't':
		return true, s.Literal("true")
	case 'f':
		return false, s.Literal("false")
	case 'n':
		return nil, s.Literal("null")
	default:
		raw, kind, ok := s.Number()
		if !ok {
			return nil, false
		}
		if kind != Finite {
			t.Errorf("strict scanner read %q as %v", raw, kind)
		}
		got, gerr := ParseFloat(raw)
		want, werr := strconv.ParseFloat(string(raw), 64)
		if math.Float64bits(got) != math.Float64bits(want) || (gerr == nil) != (werr == nil) {
			t.Errorf("ParseFloat(%q) = %v, %v; strconv %v, %v", raw, got, gerr, want, werr)
		}
		return json.Number(raw), true
	}
}

// fieldProbe has fields named in fieldNames, one with an upper-case tag.
type fieldProbe struct {
	Model     *int `json:"model"`
	MaxTokens *int `json:"max_tokens"`
	TopP      *int `json:"Top_P"`
}

var fieldNames = []string{"model", "max_tokens", "Top_P"}

// checkField checks Field on key, the raw contents of a JSON string,
// against encoding/json decoding {key:1} into a fieldProbe.
func checkField(t *testing.T, key []byte) {
	var p fieldProbe
	if json.Unmarshal([]byte(`{"`+string(key)+`":1}`), &p) != nil {
		return
	}
	want := -1
	for i, f := range []*int{p.Model, p.MaxTokens, p.TopP} {
		if f != nil {
			want = i
		}
	}
	if idx, sure := Field(key, fieldNames); sure && idx != want {
		t.Errorf("Field(%q) = %d, sure; encoding/json decodes it into field %d", key, idx, want)
	}
}

// FuzzDifferential checks the scanner against encoding/json on any input:
// its verdict on validity is json.Valid's; a value it skips is valid JSON;
// a text it cuts short is one encoding/json calls truncated; what it
// decodes (structure, keys, unescaped strings, number texts) is what
// encoding/json decodes; ParseFloat is strconv.ParseFloat bit for bit;
// Field never names a field encoding/json would not fill; the NonFinite
// dialect accepts all JSON. Where the scanner cannot tell (invalid UTF-8,
// keys needing folding), it must say so, never answer wrongly.
func FuzzDifferential(f *testing.F) {
	short := func(b []byte) string {
		if len(b) > 200 {
			return strconv.Quote(string(b[:200])) + "..."
		}
		return strconv.Quote(string(b))
	}
	for _, s := range []string{
		`{}`, `[]`, `""`, `0`, `-0.5e-3`, `true`, `null`, ` { "a" : [ 1 , -0.5e-3 , "x\"\\\/\b\f\n\r\t\u00e9" , true , false , null , { } ] } `,
		`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":1e}`, `{"a":-}`, "{\"a\":\"\x01\"}", `{"a":"\q"}`,
		`{"a":"\u00g0"}`, `{"a":nul}`, `{"a":NaN}`, `{"a":-Infinity}`, `{"a" 1}`, `{"a":1 "b":2}`, `[1 2]`, `{a:1}`, `{"a":1,}`, `[1,]`, `{,}`, `}`,
		`{"a":1,"a":2}`, `{"Model":1,"MODEL":2}`, `{"\u006dodel":1}`, `{"top_p":1}`, "{\"\u212aey\":1}", `"\ud800"`, `"\ud800\udc00"`, `"\udc00\ud800"`,
		"\"\xff\"", `[0,1,22,333]`, `[0,01]`, `[1,2`, `{"a":"`, `{"a"`, `{"a":[`, "1 2", "\x00", " ", "[1e400, -1e400, 5e-324, 123456789012345678901234567890]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)
		if got := Valid(data, Options{}); got != valid {
			t.Fatalf("Valid(%s) = %v; json.Valid %v", short(data), got, valid)
		}
		if valid && !Valid(data, Options{NonFinite: true}) {
			t.Fatalf("the NonFinite dialect rejects %s", short(data))
		}

		// Skipping the first value: what is skipped is valid JSON.
		s := New(data, Options{})
		if v, ok := s.Value(); ok && !json.Valid(v) {
			t.Fatalf("Value(%s) skipped %s, which is not valid JSON", short(data), short(v))
		}

		// Decoding: the same tree, or the same kind of error.
		s = New(data, Options{})
		exact := true
		got, ok := decode(t, &s, &exact)
		ok = ok && s.End()
		if ok != valid {
			t.Fatalf("decoding %s: ok %v; json.Valid %v (%v)", short(data), ok, valid, s.Err())
		}
		if !ok {
			if s.Err() == nil {
				t.Fatalf("decoding %s failed without an error", short(data))
			}
			var v any
			uerr := json.Unmarshal(data, &v)
			// encoding/json ends a text by feeding its state machine a
			// space, so a number or literal cut short reads as an invalid
			// ' ' there rather than as the end of the input.
			jsonEOF := uerr != nil && uerr.Error() == "unexpected end of JSON input"
			jsonCut := jsonEOF || uerr != nil && strings.HasPrefix(uerr.Error(), "invalid character ' ' ") && len(bytes.TrimRight(data, " \t\r\n")) == len(data)
			if jsonEOF && !s.Truncated() || s.Truncated() && !jsonCut {
				t.Fatalf("%s: scanner truncated %v (%v); encoding/json: %v", short(data), s.Truncated(), s.Err(), uerr)
			}
			return
		}
		var want any
		d := json.NewDecoder(bytes.NewReader(data))
		d.UseNumber()
		if err := d.Decode(&want); err != nil {
			t.Fatalf("%s: valid, but encoding/json: %v", short(data), err)
		}
		if exact && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: scanner decodes %#v; encoding/json %#v", short(data), got, want)
		}

		// Field on every key of a root object.
		s = New(data, Options{})
		if s.Enter('{') {
			for n := 0; s.Member(&n); {
				if at := s.KeyOffset(); data[at] != '"' || string(data[at+1:at+1+len(s.Key())]) != string(s.Key()) {
					t.Fatalf("%s: KeyOffset %d does not hold the key %q", short(data), at, s.Key())
				}
				checkField(t, s.Key())
				s.Skip()
			}
		}
	})
}

func TestFieldFolding(t *testing.T) {
	for _, tt := range []struct {
		key  string
		idx  int
		sure bool
	}{
		{"model", 0, true}, {"max_tokens", 1, true}, {"Top_P", 2, true}, {"other", -1, true},
		{"Model", -1, false}, {"top_p", -1, false}, {"TOP_P", -1, false}, {`mod\u0065l`, -1, false},
		{"\u212aey", -1, false}, {"modelx", -1, true},
	} {
		idx, sure := Field([]byte(tt.key), fieldNames)
		if idx != tt.idx || sure != tt.sure {
			t.Errorf("Field(%q) = %d, %v; want %d, %v", tt.key, idx, sure, tt.idx, tt.sure)
		}
		checkField(t, []byte(tt.key))
	}
}

func TestNonFinite(t *testing.T) {
	for _, tt := range []struct {
		in   string
		kind NumKind
	}{{"NaN", NaN}, {"Infinity", PosInf}, {"-Infinity", NegInf}, {"-1.5", Finite}} {
		s := New([]byte(tt.in), Options{NonFinite: true})
		raw, kind, ok := s.Number()
		if !ok || kind != tt.kind || string(raw) != tt.in || !s.End() {
			t.Errorf("Number(%q) = %q, %v, %v", tt.in, raw, kind, ok)
		}
		if Valid([]byte(tt.in), Options{}) != (tt.kind == Finite) {
			t.Errorf("strict Valid(%q) wrong", tt.in)
		}
	}
	for _, in := range []string{"Nan", "-Inf", "Infinit", "+Infinity"} {
		if Valid([]byte(in), Options{NonFinite: true}) {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestVerbatimStr: a string that is its own decoded value comes back, null
// reads as no string with the scan going on, anything else fails it.
func TestVerbatimStr(t *testing.T) {
	for _, tt := range []struct {
		in, raw string
		isStr   bool
		ok      bool // the scan still OK after it
	}{
		{` "abc"`, "abc", true, true},
		{`""`, "", true, true},
		{`"é"`, "é", true, true},
		{` null`, "", false, true},
		{`nul`, "", false, false},
		{`nulx`, "", false, false},
		{`"a\nb"`, "", false, false},
		{"\"\xff\"", "", false, false},
		{`1`, "", false, false},
		{`"abc`, "", false, false},
	} {
		s := New([]byte(tt.in), Options{})
		raw, isStr := s.VerbatimStr()
		if string(raw) != tt.raw || isStr != tt.isStr || s.OK() != tt.ok {
			t.Errorf("VerbatimStr(%q) = %q, %v, OK %v; want %q, %v, OK %v", tt.in, raw, isStr, s.OK(), tt.raw, tt.isStr, tt.ok)
		}
	}
	s := New([]byte(` 1`), Options{})
	if s.Null() || !s.OK() {
		t.Error("Null took a number")
	}
}

// TestDefaultMaxDepth checks that the default limit is encoding/json's
// (kept out of the fuzz seeds: texts this deep slow the fuzzer down).
func TestDefaultMaxDepth(t *testing.T) {
	for _, d := range []int{DefaultMaxDepth, DefaultMaxDepth + 1} {
		for _, in := range []string{strings.Repeat("[", d) + strings.Repeat("]", d), strings.Repeat(`{"":`, d-1) + "[]" + strings.Repeat("}", d-1)} {
			if got, want := Valid([]byte(in), Options{}), json.Valid([]byte(in)); got != want {
				t.Errorf("depth %d: Valid %v, json.Valid %v", d, got, want)
			}
		}
	}
}

func TestMaxDepth(t *testing.T) {
	in := []byte(strings.Repeat("[", 4) + strings.Repeat("]", 4))
	if !Valid(in, Options{MaxDepth: 4}) || Valid(in, Options{MaxDepth: 3}) {
		t.Error("MaxDepth 4 must take 4 nested arrays and MaxDepth 3 not")
	}
}

func TestScanAllocs(t *testing.T) {
	doc := []byte(`{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":" tok\u00e9n"},"logprobs":{"content":[{"token":" token","logprob":-0.2,"bytes":[32],"top_logprobs":[]}]},"finish_reason":null}]}`)
	n := testing.AllocsPerRun(100, func() {
		s := New(doc, Options{})
		if !s.Skip() || !s.End() {
			t.Fatal(s.Err())
		}
		s = New(doc, Options{})
		s.Enter('{')
		for n := 0; s.Member(&n); {
			Field(s.Key(), fieldNames)
			s.Span()
		}
	})
	if n != 0 {
		t.Errorf("scanning allocates %v times, want 0", n)
	}
}

func BenchmarkSkip(b *testing.B) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730000000,"model":"llama-3-8b","choices":[{"index":0,"delta":{"content":" token"},"logprobs":{"content":[{"token":" token","logprob":-0.2,"bytes":[32,116,111,107,101,110],"top_logprobs":[{"token":" token","logprob":-0.2,"bytes":[32]}]}]},"finish_reason":null}]}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		s := New(doc, Options{})
		if !s.Skip() || !s.End() {
			b.Fatal(s.Err())
		}
	}
}
