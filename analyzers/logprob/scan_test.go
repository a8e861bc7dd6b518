package logprob

import (
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// TestParseFloatMatchesStrconv checks the fast path against strconv on the
// shapes logprobs take and on edge cases, bit for bit.
func TestParseFloatMatchesStrconv(t *testing.T) {
	in := []string{"0", "-0", "0.0", "-0.0", "1", "-1", "9007199254740991", "9007199254740992", "9007199254740993",
		"0.1", "-0.6621948021892725", "-2.2382353437862856", "-9999.0", "-9999", "1e5", "-1E-5", "1.5e+300", "1e999", "-1e999",
		"0.00000000000000000000001", "0.0000000000000000000000123", "12345678901234567890", "1234567890123456789",
		"-0.12345678901234567890123", "123456789012345678901234567890.5", "-1.7976931348623157e308", "5e-324", "4.9e-325"}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		lp := math.Log(r.Float64())
		in = append(in, strconv.FormatFloat(lp, 'g', -1, 64), strconv.FormatFloat(lp, 'f', -1, 64),
			strconv.FormatFloat(lp, 'f', r.IntN(20), 64), strconv.FormatFloat(r.NormFloat64()*math.Pow(10, float64(r.IntN(40)-20)), 'f', -1, 64))
	}
	for _, s := range in {
		sc := newScanner([]byte(s))
		raw, k, ok := sc.Number()
		kind := kinds[k]
		if !ok || kind != numFinite || len(raw) != len(s) {
			// strconv writes exponents as e+300/e-05, which JSON allows;
			// anything else here is a bug in the test input.
			t.Fatalf("num(%q) = %q, %v, %v", s, raw, kind, ok)
		}
		got, gerr := jsonscan.ParseFloat(raw)
		want, werr := strconv.ParseFloat(s, 64)
		if math.Float64bits(got) != math.Float64bits(want) || (gerr == nil) != (werr == nil) {
			t.Errorf("parseFloat(%q) = %v, %v; strconv %v, %v", s, got, gerr, want, werr)
		}
	}
}

func TestScannerRejects(t *testing.T) {
	for _, in := range []string{`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":+1}`, `{"a":1e}`, `{"a":-}`, `{"a":"\x01"}`, `{"a":"\q"}`,
		`{"a":"\u00g0"}`, `{"a":nul}`, `{"a":Nan}`, `{"a":-Inf}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":[1 2]}`, `{a:1}`, `{"a":1,}`, `{"a":[1,]}`, `{,}`, `}`} {
		s := newScanner([]byte(in))
		if s.Skip() && s.End() {
			t.Errorf("%s accepted", in)
		}
	}
	// A NUL byte is malformed, not the end of the text.
	for _, in := range []string{"{\"a\":1\x00}", "{\"a\"\x00:1}", "{\"a\":\x00}", "[1\x00]", "\x00"} {
		s := newScanner([]byte(in))
		if s.Skip() && s.End() || errors.Is(s.err(), io.ErrUnexpectedEOF) {
			t.Errorf("%q: err %v, want a syntax error that is not a truncation", in, s.err())
		}
	}
	for _, in := range []string{`{}`, `[]`, ` { "a" : [ 1 , -0.5e-3 , "x\"\\\/\b\f\n\r\t\u00e9" , true , false , null , NaN , Infinity , -Infinity , { } ] } `} {
		s := newScanner([]byte(in))
		if !s.Skip() || !s.End() {
			t.Errorf("%s rejected: %v", in, s.err())
		}
	}
}
