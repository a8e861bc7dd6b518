// Package jsonscan is Vigil's one forward JSON scanner: it walks a JSON
// text in place, validating what it passes over as encoding/json's scanner
// does, without reflection and without allocating. Strings, keys and
// numbers come back as sub-slices of the text (borrowed, valid as long as
// the text is). The fast paths of the gateway and the analyzers read a few
// members of each request body or stream event with it, on the hot path.
//
// A Scanner reports success with a bool; the first failure is kept and every
// later call fails too, so a walker may check once at the end. Where a
// caller needs an answer only encoding/json can give (a key that matches a
// field only under case folding, a string that needs decoding), the scanner
// says so and the caller falls back to encoding/json: it never claims a
// wrong answer. FuzzDifferential checks it against encoding/json.
package jsonscan

import (
	"io"
	"strconv"
)

// DefaultMaxDepth is encoding/json's limit on nesting, so that a Scanner
// with the default options accepts what json.Valid accepts.
const DefaultMaxDepth = 10000

// Options choose a Scanner's dialect and limits; the zero value is strict
// RFC 8259 JSON nested at most DefaultMaxDepth deep.
type Options struct {
	// MaxDepth bounds the nesting of objects and arrays the scanner
	// follows, so that hostile input cannot grow the stack without bound;
	// 0 means DefaultMaxDepth.
	MaxDepth int
	// NonFinite accepts the bare tokens NaN, Infinity and -Infinity
	// wherever a value may stand, as Python's json.dumps writes them for
	// non-finite floats (vLLM serializes logprobs that way).
	NonFinite bool
}

// A Scanner walks one JSON text. It is a small value: sub-scanners over
// spans of the text (Span) cost nothing. It is used by one goroutine.
type Scanner struct {
	b         []byte
	i         int
	depth     int
	maxDepth  int
	nonFinite bool
	key       []byte // the raw key read by the last successful Member
	failed    bool
	eof       bool   // the failure is the text ending inside a value
	msg       string // what the failure was
	off       int    // where it was
}

// New returns a Scanner at the start of b.
func New(b []byte, o Options) Scanner {
	if o.MaxDepth <= 0 {
		o.MaxDepth = DefaultMaxDepth
	}
	return Scanner{b: b, maxDepth: o.MaxDepth, nonFinite: o.NonFinite}
}

// SyntaxError describes where and why a text is not valid JSON. When the
// text ends inside a value it wraps io.ErrUnexpectedEOF, so that a body cut
// at a size cap can be told apart from a malformed one.
type SyntaxError struct {
	Msg    string
	Offset int
	EOF    bool
}

// Error returns the message and offset.
func (e *SyntaxError) Error() string {
	msg := e.Msg
	if e.EOF {
		msg = io.ErrUnexpectedEOF.Error()
	}
	return msg + " at offset " + strconv.Itoa(e.Offset)
}

// Unwrap returns io.ErrUnexpectedEOF for a truncated text, else nil.
func (e *SyntaxError) Unwrap() error {
	if e.EOF {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// OK reports whether no call has failed so far.
func (s *Scanner) OK() bool { return !s.failed }

// Truncated reports whether the scan failed because the text ended inside
// a value.
func (s *Scanner) Truncated() bool { return s.failed && s.eof }

// Err returns the first failure as a *SyntaxError, or nil. It allocates;
// the scan itself does not.
func (s *Scanner) Err() error {
	if !s.failed {
		return nil
	}
	return &SyntaxError{Msg: s.msg, Offset: s.off, EOF: s.eof}
}

// Fail records a failure at the current offset (unless one is recorded
// already) and returns false. The scanner records its syntax errors so; a
// walker calls it when it finds a valid text it cannot use (a type error,
// an answer only encoding/json can give), so that every later call fails
// too.
func (s *Scanner) Fail(msg string) bool {
	if !s.failed {
		s.failed, s.msg, s.off = true, msg, s.i
	}
	// Every later call meets the end of the text and fails: that keeps the
	// failure without a check of it in each method.
	s.i = len(s.b)
	return false
}

// truncated records that the text ended inside a value.
func (s *Scanner) truncated() bool {
	if !s.failed {
		s.failed, s.eof, s.off = true, true, len(s.b)
	}
	s.i = len(s.b)
	return false
}

// Bytes returns the whole text.
func (s *Scanner) Bytes() []byte { return s.b }

// Pos returns the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.i }

// Key returns the raw key (escapes undecoded) of the member the last
// successful Member moved to.
func (s *Scanner) Key() []byte { return s.key }

// KeyOffset returns the offset of the opening quote of Key in the text:
// for a caller that cuts members out of the text in place.
func (s *Scanner) KeyOffset() int {
	// Key is a sub-slice of the text running to its end, so the capacities
	// tell where it starts: no field to keep it.
	return cap(s.b) - cap(s.key) - 1
}

// ws skips white space.
func (s *Scanner) ws() {
	for s.i < len(s.b) {
		// Most calls meet a significant byte at once: test that first.
		if c := s.b[s.i]; c > ' ' || c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return
		}
		s.i++
	}
}

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first byte of b at or after i that is
// not JSON white space (len(b) if none).
func SkipSpace(b []byte, i int) int {
	for i < len(b) && IsSpace(b[i]) {
		i++
	}
	return i
}

// Peek skips white space and returns the next byte, or 0 at the end (a NUL
// byte in the text also reads 0: AtEOF tells the two apart).
func (s *Scanner) Peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// AtEOF reports whether the whole text has been read (white space left
// unskipped counts as unread).
func (s *Scanner) AtEOF() bool { return s.i >= len(s.b) }

// End reports whether only white space is left, and fails if not.
func (s *Scanner) End() bool {
	s.ws()
	if s.failed {
		return false
	}
	if s.i < len(s.b) {
		return s.Fail("data after the top-level value")
	}
	return true
}

// Literal consumes word (true, false, null) at the current byte.
func (s *Scanner) Literal(word string) bool {
	for j := 0; j < len(word); j++ {
		if s.i+j >= len(s.b) {
			return s.truncated()
		}
		if s.b[s.i+j] != word[j] {
			s.i += j
			return s.Fail("invalid literal")
		}
	}
	s.i += len(word)
	return true
}

// Null consumes a null at the next byte (after white space) and reports
// whether there was one to read: it is true for a misspelt null too, which
// fails the scan. A member that may be null reads it first, then its value.
func (s *Scanner) Null() bool {
	if s.Peek() != 'n' {
		return false
	}
	s.Literal("null")
	return true
}

// strByte marks the bytes that end the fast path of Str: the quote, the
// backslash and control characters, which JSON forbids unescaped.
var strByte = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// Str reads the string at the next byte (after white space) and returns its
// raw contents between the quotes, escapes undecoded. Bytes of 0x80 and
// above are taken as they are, as encoding/json's scanner does.
func (s *Scanner) Str() ([]byte, bool) {
	s.ws()
	return s.str()
}

// VerbatimStr reads a string or null at the next byte, for a member that
// encoding/json decodes into a Go string, on a fast path that takes only
// strings that need no decoding. It returns the raw contents and true for
// a string that is its own decoded value (Verbatim), and false for null,
// which leaves such a Go string as it was, and for anything else, which
// fails the scan: a string with escapes or invalid UTF-8 too, for the
// caller to decode with encoding/json.
func (s *Scanner) VerbatimStr() ([]byte, bool) {
	if s.Null() {
		return nil, false
	}
	raw, ok := s.Str()
	if ok && !Verbatim(raw) {
		return nil, s.Fail("string needs decoding")
	}
	return raw, ok
}

// str is Str at s.i, white space skipped.
func (s *Scanner) str() ([]byte, bool) {
	if s.i >= len(s.b) {
		return nil, s.truncated()
	}
	if s.b[s.i] != '"' {
		return nil, s.Fail("expected a string")
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
				return nil, s.truncated()
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(s.b) {
						return nil, s.truncated()
					}
					if !IsHex(s.b[j+k]) {
						s.i = j + k
						return nil, s.Fail("invalid \\u escape")
					}
				}
				j += 4
			default:
				s.i = j
				return nil, s.Fail("invalid escape")
			}
		default:
			s.i = j
			return nil, s.Fail("control character in string")
		}
	}
	return nil, s.truncated()
}

// IsHex reports whether c is a hexadecimal digit.
func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// IsDigit reports whether c is a decimal digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

// NumKind classifies a number's text.
type NumKind uint8

// The kinds of numbers. Only Finite is JSON; the others are read only with
// Options.NonFinite.
const (
	Finite NumKind = iota // a JSON number (even one beyond float64's range)
	NaN                   // NaN
	PosInf                // Infinity
	NegInf                // -Infinity
)

// Number reads the number at the next byte (after white space) and returns
// its text and kind.
func (s *Scanner) Number() ([]byte, NumKind, bool) {
	s.ws()
	return s.num()
}

// num is Number at s.i, white space skipped.
func (s *Scanner) num() ([]byte, NumKind, bool) {
	start := s.i
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case 'N':
			if s.nonFinite {
				ok := s.Literal("NaN")
				return s.b[start:s.i], NaN, ok
			}
		case 'I':
			if s.nonFinite {
				ok := s.Literal("Infinity")
				return s.b[start:s.i], PosInf, ok
			}
		case '-':
			s.i++
			if s.nonFinite && s.i < len(s.b) && s.b[s.i] == 'I' {
				ok := s.Literal("Infinity")
				return s.b[start:s.i], NegInf, ok
			}
		}
	}
	// Integer part: 0 or [1-9][0-9]*.
	if s.i >= len(s.b) {
		return nil, 0, s.truncated()
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case '1' <= c && c <= '9':
		for s.i++; s.i < len(s.b) && IsDigit(s.b[s.i]); s.i++ {
		}
	default:
		return nil, 0, s.Fail("invalid number")
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
	return s.b[start:s.i], Finite, true
}

// digits consumes one or more decimal digits.
func (s *Scanner) digits() bool {
	if s.i >= len(s.b) {
		return s.truncated()
	}
	if !IsDigit(s.b[s.i]) {
		return s.Fail("invalid number")
	}
	for s.i++; s.i < len(s.b) && IsDigit(s.b[s.i]); s.i++ {
	}
	return true
}

// Enter consumes open, '{' or '[', the start of the next value, and reports
// true; the caller then walks the container with Member or Element. A value
// of another type (null included) is skipped and Enter reports false,
// failing only if that value is malformed (check OK): for most walkers a
// field of an unexpected type is absent, and those for which it is an error
// Peek first.
func (s *Scanner) Enter(open byte) bool {
	c := s.Peek()
	if c != open {
		s.Skip()
		return false
	}
	if s.depth >= s.maxDepth {
		return s.Fail("nesting too deep")
	}
	s.depth++
	s.i++
	return true
}

// Member advances to the next member of an object that Enter opened: it
// reads the key (Key) and the colon after it, and reports true with the
// scanner at the value, which the caller must consume. It reports false
// after the closing brace, which it consumes, or on a failure (check OK).
// n counts the members so far and must start at 0:
//
//	for n := 0; s.Member(&n); { switch string(s.Key()) { ... } }
func (s *Scanner) Member(n *int) bool {
	c := s.Peek()
	switch {
	case c == '}':
		s.i++
		s.depth--
		return false
	case *n > 0:
		if c != ',' {
			if s.i >= len(s.b) {
				return s.truncated()
			}
			return s.Fail("expected ',' or '}'")
		}
		s.i++
		s.ws()
	}
	key, ok := s.str()
	if !ok {
		return false
	}
	if s.Peek() != ':' {
		if s.i >= len(s.b) {
			return s.truncated()
		}
		return s.Fail("expected ':'")
	}
	s.i++
	s.key = key
	*n++
	return true
}

// Element advances to the next element of an array that Enter opened, like
// Member.
func (s *Scanner) Element(n *int) bool {
	c := s.Peek()
	switch {
	case c == ']':
		s.i++
		s.depth--
		return false
	case *n > 0:
		if c != ',' {
			if s.i >= len(s.b) {
				return s.truncated()
			}
			return s.Fail("expected ',' or ']'")
		}
		s.i++
		s.ws()
	}
	if s.i >= len(s.b) {
		return s.truncated()
	}
	*n++
	return true
}

// Skip consumes one value of any type, validating it.
func (s *Scanner) Skip() bool {
	c := s.Peek()
	if s.i >= len(s.b) {
		return s.truncated()
	}
	switch c {
	case '"':
		_, ok := s.str()
		return ok
	case '{':
		if !s.Enter('{') {
			return false
		}
		n := 0
		for s.Member(&n) {
			if !s.Skip() {
				return false
			}
		}
		return !s.failed
	case '[':
		if s.depth < s.maxDepth && s.intArray() {
			return true
		}
		if !s.Enter('[') {
			return false
		}
		n := 0
		for s.Element(&n) {
			if !s.Skip() {
				return false
			}
		}
		return !s.failed
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		if c == '-' || IsDigit(c) || s.nonFinite && (c == 'N' || c == 'I') {
			_, _, ok := s.num()
			return ok
		}
		return s.Fail("unexpected character")
	}
}

// intArray skips an array of non-negative integers without white space,
// such as the "bytes" arrays of OpenAI logprobs, which make up much of a
// chat chunk. It reports false, having consumed nothing, for anything else,
// which Skip then reads the general way.
func (s *Scanner) intArray() bool {
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
			for j++; j < len(b) && IsDigit(b[j]); j++ {
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

// Value skips one value and returns its raw text (a sub-slice).
func (s *Scanner) Value() ([]byte, bool) {
	s.ws()
	start := s.i
	if !s.Skip() {
		return nil, false
	}
	return s.b[start:s.i], true
}

// Span skips one value and returns a Scanner over it alone, with the same
// options, to be walked later: nothing is copied. On a failure it returns
// an empty Scanner (and s fails).
func (s *Scanner) Span() Scanner {
	v, ok := s.Value()
	if !ok {
		return Scanner{maxDepth: s.maxDepth, nonFinite: s.nonFinite}
	}
	return Scanner{b: v, maxDepth: s.maxDepth, nonFinite: s.nonFinite}
}

// Valid reports whether b is one valid JSON value (with white space around
// it), as json.Valid does, given o.
func Valid(b []byte, o Options) bool {
	s := New(b, o)
	return s.Skip() && s.End()
}
