package logprob

import (
	"errors"
	"fmt"
	"math"

	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// ErrSyntax is wrapped by every error about a payload that is not valid JSON
// (or not a JSON object). Errors about a payload that ends in the middle of a
// value also wrap [io.ErrUnexpectedEOF], so that a body cut at a size cap can
// be told apart from a malformed one.
var ErrSyntax = errors.New("logprob: invalid JSON")

// maxDepth bounds the nesting the scanner follows, so that hostile input
// cannot grow the stack without bound. Real responses nest about 6 deep.
const maxDepth = 256

// scanOptions is the dialect of the payloads: besides RFC 8259 JSON the
// bare tokens NaN, Infinity and -Infinity wherever a value may stand,
// because Python's json.dumps writes them for non-finite floats and vLLM
// serializes logprobs that way.
var scanOptions = jsonscan.Options{MaxDepth: maxDepth, NonFinite: true}

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

// A scanner walks one payload in place with jsonscan, adding the readings
// of values this package needs. It is a small value, so sub-scanners over
// spans of the payload cost nothing.
type scanner struct {
	jsonscan.Scanner
}

// newScanner returns a scanner at the start of p.
func newScanner(p []byte) scanner { return scanner{jsonscan.New(p, scanOptions)} }

// err returns the scan's failure, wrapping ErrSyntax, or nil.
func (s *scanner) err() error {
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSyntax, err)
	}
	return nil
}

// kinds maps jsonscan's number kinds onto numKind.
var kinds = [...]numKind{jsonscan.Finite: numFinite, jsonscan.NaN: numNaN, jsonscan.PosInf: numPosInf, jsonscan.NegInf: numNegInf}

// float reads a value where a number is expected. Values of other types are
// skipped and reported as numOther (or numNull); they are valid JSON, just
// not a usable number.
func (s *scanner) float() (float64, numKind, bool) {
	switch c := s.Peek(); {
	case s.AtEOF():
		return 0, 0, s.Skip() // fails: the text ended
	case c == '-' || jsonscan.IsDigit(c):
		raw, k, ok := s.Number()
		kind := kinds[k]
		if !ok || kind != numFinite {
			return math.Inf(-1), kind, ok
		}
		v, err := jsonscan.ParseFloat(raw)
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
		_, k, ok := s.Number()
		return math.NaN(), kinds[k], ok
	case c == 'n':
		return 0, numNull, s.Literal("null")
	default:
		return 0, numOther, s.Skip()
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

// object enters the payload's top-level object; false, and the scan
// failed, when the payload is not one.
func (s *scanner) object() bool {
	if s.Enter('{') {
		return true
	}
	if s.OK() {
		s.Fail("expected a JSON object")
	}
	return false
}

// span skips one value and returns a scanner over it alone, to be walked
// later: a sub-slice, nothing is copied. On an error it returns an empty
// scanner (and s fails).
func (s *scanner) span() scanner { return scanner{s.Span()} }

// rawString reads a string value and returns its raw contents; a value of
// another type is skipped and valid is false.
func (s *scanner) rawString() (raw []byte, valid, ok bool) {
	if s.Peek() != '"' {
		return nil, false, s.Skip()
	}
	raw, ok = s.Str()
	return raw, ok, ok
}

// rawNumber reads a number value and returns its text; a value of another
// type is skipped and valid is false.
func (s *scanner) rawNumber() (raw []byte, valid, ok bool) {
	if c := s.Peek(); c != '-' && !jsonscan.IsDigit(c) {
		return nil, false, s.Skip()
	}
	raw, _, ok = s.Number()
	return raw, ok, ok
}

// unescape decodes the raw contents of a JSON string. Unpaired surrogates
// become U+FFFD, as in encoding/json.
func unescape(raw []byte) string { return jsonscan.Unescape(raw) }
