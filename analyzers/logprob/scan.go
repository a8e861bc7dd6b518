package logprob

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrSyntax is wrapped by every error about a payload that is not valid JSON
// (or not a JSON object). Errors about a payload that ends in the middle of a
// value also wrap [io.ErrUnexpectedEOF], so that a body cut at a size cap can
// be told apart from a malformed one.
var ErrSyntax = errors.New("logprob: invalid JSON")

// maxDepth bounds the nesting the scanner follows, so that hostile input
// cannot grow the stack without bound. Real responses nest about 6 deep.
const maxDepth = 256

// numKind classifies a value read where a number is expected.
type numKind uint8

const (
	numMissing numKind = iota // key absent
	numFinite                 // a finite number
	numNull                   // null
	numNaN                    // NaN (Python's json.dumps allow_nan)
	numPosInf                 // Infinity, or a number beyond float64
	numNegInf                 // -Infinity, or a negative number beyond float64
	numOther                  // a string, object, array or boolean
)

// A scanner walks one JSON text in place. It never copies: strings and
// numbers come back as sub-slices of b. Methods report success with a bool;
// the first failure is kept in err and every later call fails too. A scanner
// is a small value, so sub-scanners over spans of b cost nothing.
//
// Besides RFC 8259 JSON it accepts the bare tokens NaN, Infinity and
// -Infinity wherever a value may stand, because Python's json.dumps writes
// them for non-finite floats and vLLM serializes logprobs that way.
type scanner struct {
	b     []byte
	i     int
	depth int
	key   []byte // the raw key read by the last successful member call
	err   error
}

// eof records that the text ended inside a value.
func (s *scanner) eof() bool {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %w at offset %d", ErrSyntax, io.ErrUnexpectedEOF, len(s.b))
	}
	s.i = len(s.b)
	return false
}

// syntax records a malformed text.
func (s *scanner) syntax(msg string) bool {
	if s.err == nil {
		s.err = fmt.Errorf("%w: %s at offset %d", ErrSyntax, msg, s.i)
	}
	return false
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		// Most calls meet a significant byte at once: test that first.
		if c := s.b[s.i]; c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return
		}
		s.i++
	}
}

// peek skips white space and returns the next byte, or 0 at the end (a NUL
// byte in the text also reads 0: callers tell the two apart with s.i).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.ws()
	if s.i < len(s.b) {
		return s.syntax("data after the top-level value")
	}
	return true
}

// lit consumes the literal word.
func (s *scanner) lit(word string) bool {
	for j := 0; j < len(word); j++ {
		if s.i+j >= len(s.b) {
			return s.eof()
		}
		if s.b[s.i+j] != word[j] {
			s.i += j
			return s.syntax("invalid literal")
		}
	}
	s.i += len(word)
	return true
}

// strByte marks the bytes that end the fast path of str: the quote, the
// backslash and control characters, which JSON forbids unescaped.
var strByte = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// str reads a string and returns its raw contents, escapes undecoded.
func (s *scanner) str() ([]byte, bool) {
	if s.i >= len(s.b) {
		return nil, s.eof()
	}
	if s.b[s.i] != '"' {
		return nil, s.syntax("expected a string")
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if !strByte[c] {
			continue
		}
		switch {
		case c == '"':
			s.i = j + 1
			return s.b[start:j], true
		case c == '\\':
			j++
			if j >= len(s.b) {
				return nil, s.eof()
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(s.b) {
						return nil, s.eof()
					}
					if !isHex(s.b[j+k]) {
						s.i = j + k
						return nil, s.syntax("invalid \\u escape")
					}
				}
				j += 4
			default:
				s.i = j
				return nil, s.syntax("invalid escape")
			}
		default:
			s.i = j
			return nil, s.syntax("control character in string")
		}
	}
	return nil, s.eof()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num reads a number, or NaN, Infinity, -Infinity, and returns its text. The
// kind is numFinite for any JSON number, even one too large for a float64.
func (s *scanner) num() ([]byte, numKind, bool) {
	start := s.i
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case 'N':
			ok := s.lit("NaN")
			return s.b[start:s.i], numNaN, ok
		case 'I':
			ok := s.lit("Infinity")
			return s.b[start:s.i], numPosInf, ok
		case '-':
			s.i++
			if s.i < len(s.b) && s.b[s.i] == 'I' {
				ok := s.lit("Infinity")
				return s.b[start:s.i], numNegInf, ok
			}
		}
	}
	// Integer part: 0 or [1-9][0-9]*.
	if s.i >= len(s.b) {
		return nil, 0, s.eof()
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		for s.i++; s.i < len(s.b) && isDigit(s.b[s.i]); s.i++ {
		}
	default:
		return nil, 0, s.syntax("invalid number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return nil, 0, false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return nil, 0, false
		}
	}
	return s.b[start:s.i], numFinite, true
}

// digits consumes one or more decimal digits.
func (s *scanner) digits() bool {
	if s.i >= len(s.b) {
		return s.eof()
	}
	if !isDigit(s.b[s.i]) {
		return s.syntax("invalid number")
	}
	for s.i++; s.i < len(s.b) && isDigit(s.b[s.i]); s.i++ {
	}
	return true
}

// float reads a value where a number is expected. Values of other types are
// skipped and reported as numOther (or numNull); they are valid JSON, just
// not a usable number.
func (s *scanner) float() (float64, numKind, bool) {
	switch c := s.peek(); {
	case s.i >= len(s.b):
		return 0, 0, s.eof()
	case c == '-' || isDigit(c):
		raw, kind, ok := s.num()
		if !ok || kind != numFinite {
			return math.Inf(-1), kind, ok
		}
		v, err := parseFloat(raw)
		if err != nil {
			// The grammar was checked above, so the only error left is
			// ErrRange: v is ±Inf, or 0 for an underflow.
			switch {
			case math.IsInf(v, 1):
				return v, numPosInf, true
			case math.IsInf(v, -1):
				return v, numNegInf, true
			}
		}
		return v, numFinite, true
	case c == 'N' || c == 'I':
		_, kind, ok := s.num()
		return math.NaN(), kind, ok
	case c == 'n':
		return 0, numNull, s.lit("null")
	default:
		return 0, numOther, s.skip()
	}
}

// integer reads a value where a count is expected; ok is false only on a
// syntax error, valid is false for null, non-numbers and values that are not
// whole numbers in [0, MaxInt32].
func (s *scanner) integer() (n int, valid, ok bool) {
	v, kind, ok := s.float()
	if !ok || kind != numFinite || v < 0 || v > math.MaxInt32 || v != math.Trunc(v) {
		return 0, false, ok
	}
	return int(v), true, true
}

// member advances to the next member of an object whose '{' has been
// consumed: it reads the key into s.key and the colon after it, and reports
// true with s at the value. It returns false after the closing brace, which
// it consumes, or on an error (check s.err). n counts the members so far and
// must start at 0.
func (s *scanner) member(n *int) bool {
	c := s.peek()
	switch {
	case c == '}':
		s.i++
		s.depth--
		return false
	case *n > 0:
		if c != ',' {
			if s.i >= len(s.b) {
				return s.eof()
			}
			return s.syntax("expected ',' or '}'")
		}
		s.i++
		s.ws()
	}
	key, ok := s.str()
	if !ok {
		return false
	}
	if s.peek() != ':' {
		if s.i >= len(s.b) {
			return s.eof()
		}
		return s.syntax("expected ':'")
	}
	s.i++
	s.key = key
	*n++
	return true
}

// elem advances to the next element of an array whose '[' has been
// consumed, like member.
func (s *scanner) elem(n *int) bool {
	c := s.peek()
	switch {
	case c == ']':
		s.i++
		s.depth--
		return false
	case *n > 0:
		if c != ',' {
			if s.i >= len(s.b) {
				return s.eof()
			}
			return s.syntax("expected ',' or ']'")
		}
		s.i++
		s.ws()
	}
	if s.i >= len(s.b) {
		return s.eof()
	}
	*n++
	return true
}

// enter consumes the opening byte ('{' or '[') of the value at s. A value of
// another type (null included) is skipped and enter returns false with
// s.err nil: for this package a field of an unexpected type is absent.
func (s *scanner) enter(open byte) bool {
	c := s.peek()
	if c != open {
		s.skip()
		return false
	}
	if s.depth >= maxDepth {
		return s.syntax("nesting too deep")
	}
	s.depth++
	s.i++
	return true
}

// skip consumes one value of any type.
func (s *scanner) skip() bool {
	c := s.peek()
	if s.i >= len(s.b) {
		return s.eof()
	}
	switch c {
	case '"':
		_, ok := s.str()
		return ok
	case '{':
		if !s.enter('{') {
			return false
		}
		n := 0
		for s.member(&n) {
			if !s.skip() {
				return false
			}
		}
		return s.err == nil
	case '[':
		if s.intArray() {
			return true
		}
		if !s.enter('[') {
			return false
		}
		n := 0
		for s.elem(&n) {
			if !s.skip() {
				return false
			}
		}
		return s.err == nil
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || c == 'N' || c == 'I' || isDigit(c) {
			_, _, ok := s.num()
			return ok
		}
		return s.syntax("unexpected character")
	}
}

// intArray skips an array of non-negative integers without white space,
// such as the "bytes" arrays of OpenAI logprobs, which make up much of a
// chat chunk. It reports false, having consumed nothing, for anything else,
// which skip then reads the general way.
func (s *scanner) intArray() bool {
	b := s.b
	j := s.i + 1
	if j < len(b) && b[j] == ']' {
		s.i = j + 1
		return true
	}
	for j < len(b) {
		// One integer: 0 or [1-9][0-9]*.
		switch c := b[j]; {
		case c == '0':
			j++
		case '1' <= c && c <= '9':
			for j++; j < len(b) && isDigit(b[j]); j++ {
			}
		default:
			return false
		}
		if j >= len(b) {
			return false
		}
		switch b[j] {
		case ',':
			j++
		case ']':
			s.i = j + 1
			return true
		default:
			return false
		}
	}
	return false
}

// span skips one value and returns a scanner over it alone, to be walked
// later: a sub-slice, nothing is copied. On an error it returns an empty
// scanner (and s.err is set).
func (s *scanner) span() scanner {
	s.ws()
	start := s.i
	if !s.skip() {
		return scanner{}
	}
	return scanner{b: s.b[start:s.i]}
}

// rawString reads a string value and returns its raw contents; a value of
// another type is skipped and valid is false.
func (s *scanner) rawString() (raw []byte, valid, ok bool) {
	if s.peek() != '"' {
		return nil, false, s.skip()
	}
	raw, ok = s.str()
	return raw, ok, ok
}

// rawNumber reads a number value and returns its text; a value of another
// type is skipped and valid is false.
func (s *scanner) rawNumber() (raw []byte, valid, ok bool) {
	if c := s.peek(); c != '-' && !isDigit(c) {
		return nil, false, s.skip()
	}
	raw, _, ok = s.num()
	return raw, ok, ok
}

// unescape decodes the raw contents of a JSON string. Unpaired surrogates
// become U+FFFD, as in encoding/json.
func unescape(raw []byte) string {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			out = append(out, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, n := hex4(raw[i+1:])
			i += n
			if utf16.IsSurrogate(r) {
				r2, n2 := rune(-1), 0
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, n2 = hex4(raw[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 2 + n2
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/'
			out = append(out, raw[i])
		}
	}
	return string(out)
}

// hex4 decodes the 4 hex digits at the start of b (the scanner checked
// them); it returns -1 and 0 if b is too short.
func hex4(b []byte) (rune, int) {
	if len(b) < 4 {
		return -1, 0
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1, 0
		}
		r = r<<4 | rune(c)
	}
	return r, 4
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// parseFloat converts the text of a JSON number whose grammar num checked.
// Logprobs as Python writes them (repr: at most 17 significant digits, no
// exponent above 1e16) mostly take Clinger's fast path: a mantissa below
// 2^53 and a power of ten up to 10^22 are both exact in float64, so one
// multiplication or division rounds once, correctly, giving the value
// strconv.ParseFloat gives. Everything else goes to strconv.ParseFloat.
func parseFloat(raw []byte) (float64, error) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	var m uint64
	nd, exp := 0, 0 // significant digits in m; decimal exponent
	for ; i < len(raw) && isDigit(raw[i]); i++ {
		if nd >= 19 {
			return slowFloat(raw)
		}
		m = m*10 + uint64(raw[i]-'0')
		if m != 0 {
			nd++
		}
	}
	if i < len(raw) && raw[i] == '.' {
		for i++; i < len(raw) && isDigit(raw[i]); i++ {
			if nd >= 19 {
				return slowFloat(raw)
			}
			m = m*10 + uint64(raw[i]-'0')
			if m != 0 {
				nd++
			}
			exp--
		}
	}
	if i < len(raw) || m >= 1<<53 { // an exponent part, or a wide mantissa
		return slowFloat(raw)
	}
	f := float64(m)
	switch {
	case m == 0 || exp == 0:
	case exp < 0 && exp >= -22:
		f /= pow10[-exp]
	default:
		return slowFloat(raw)
	}
	if neg {
		f = -f
	}
	return f, nil
}

func slowFloat(raw []byte) (float64, error) {
	// The conversion does not allocate: the string does not escape and a
	// number's text up to 32 bytes fits the compiler's stack buffer.
	return strconv.ParseFloat(string(raw), 64)
}
