package drift

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The fast path of Extract. The request is checked once with json.Valid
// and then read by a small scanner that trusts the syntax, instead of
// encoding/json's reflection, which for this request shape re-validated
// every message and content part it handed to an UnmarshalJSON method
// (drift.Extract was 4.5 % of the gateway's CPU at full load, issue 15).
// The scanner gives up, and Extract falls back to encoding/json, on
// anything whose meaning it does not reproduce exactly: a key with an
// escape, a key that matches a known one only case-insensitively
// (encoding/json would take it), a known key twice, a value of an
// unexpected type (encoding/json's error is the answer), a model name that
// needs decoding. TestExtractFastAgrees and FuzzExtractFast check it
// against the encoding/json path.

// extractFast returns what Extract returns for body, with decided true, or
// decided false when the encoding/json path must decide.
func extractFast(body []byte) (f Features, decided bool, err error) {
	var r request
	if !json.Valid(body) || !r.scanFast(body) {
		return Features{}, false, nil
	}
	f, err = r.features()
	return f, true, err
}

// scanner reads valid JSON.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// value returns the raw bytes of the next value and moves past it.
func (s *scanner) value() []byte {
	s.ws()
	start := s.i
	switch c := s.b[s.i]; c {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				break
			}
		}
	default: // number, true, false, null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.b[start:s.i]
			}
			s.i++
		}
	}
	return s.b[start:s.i]
}

// str moves past a string literal starting at s.i.
func (s *scanner) str() {
	s.i++
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return
		}
		s.i++
	}
}

// members calls f with each key (raw, without quotes) of the object that
// starts at the next byte, and its value scanner position; f must consume
// the value. It returns false when a key has an escape or f does.
func (s *scanner) members(f func(key []byte) bool) bool {
	s.ws()
	s.i++ // '{'
	for {
		if s.peek() == '}' {
			s.i++
			return true
		}
		if s.b[s.i] == ',' {
			s.i++
			s.ws()
		}
		start := s.i
		s.str()
		key := s.b[start+1 : s.i-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		s.ws()
		s.i++ // ':'
		if !f(key) {
			return false
		}
	}
}

// known tells which of keys key is: its index, -1 for none, or ok false
// when it matches one only case-insensitively (encoding/json's rule) or
// one already seen.
func known(key []byte, keys []string, seen *uint32) (int, bool) {
	for i, k := range keys {
		if string(key) == k {
			if *seen&(1<<i) != 0 {
				return 0, false
			}
			*seen |= 1 << i
			return i, true
		}
		if bytes.EqualFold(key, []byte(k)) {
			return 0, false
		}
	}
	return -1, true
}

var (
	requestKeys = []string{"model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
		"parameters", "messages", "prompt", "input", "inputs"}
	parameterKeys = []string{"max_new_tokens", "temperature", "top_p"}
	messageKeys   = []string{"role", "content"}
	partKeys      = []string{"text"}
)

// scanFast fills r from body, which is valid JSON; false when the
// encoding/json path must decide.
func (r *request) scanFast(body []byte) bool {
	s := &scanner{b: body}
	if s.peek() != '{' {
		return false
	}
	var seen uint32
	return s.members(func(key []byte) bool {
		k, ok := known(key, requestKeys, &seen)
		if !ok {
			return false
		}
		switch k {
		case -1:
			s.value()
			return true
		case 0:
			v := s.value()
			switch {
			case v[0] == 'n':
			case v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v):
				r.Model = string(v[1 : len(v)-1])
			default:
				return false
			}
			return true
		case 1:
			return number(s.value(), &r.MaxTokens)
		case 2:
			return number(s.value(), &r.MaxCompletionTokens)
		case 3:
			return number(s.value(), &r.Temperature)
		case 4:
			return number(s.value(), &r.TopP)
		case 5:
			return r.scanParameters(s)
		case 6:
			return r.scanMessages(s)
		default: // prompt, input, inputs
			return textFast(s, &r.text)
		}
	})
}

// number reads a JSON number or null into *dst as encoding/json would.
func number(v []byte, dst **float64) bool {
	if v[0] == 'n' {
		*dst = nil
		return true
	}
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return false
	}
	*dst = &f
	return true
}

func (r *request) scanParameters(s *scanner) bool {
	switch s.peek() {
	case 'n':
		s.value()
		return true
	case '{':
	default:
		return false
	}
	p := &r.Parameters
	var seen uint32
	return s.members(func(key []byte) bool {
		k, ok := known(key, parameterKeys, &seen)
		switch {
		case !ok:
			return false
		case k == 0:
			return number(s.value(), &p.MaxNewTokens)
		case k == 1:
			return number(s.value(), &p.Temperature)
		case k == 2:
			return number(s.value(), &p.TopP)
		}
		s.value()
		return true
	})
}

func (r *request) scanMessages(s *scanner) bool {
	switch s.peek() {
	case 'n':
		s.value()
		r.messages = 0
		return true
	case '[':
	default:
		return false
	}
	s.i++
	n := 0
	for {
		switch s.peek() {
		case ']':
			s.i++
			r.messages = n
			return true
		case ',':
			s.i++
			continue
		case '{':
		default:
			return false // null elements and others: encoding/json decides
		}
		n++
		var m message
		var seen uint32
		if !s.members(func(key []byte) bool {
			k, ok := known(key, messageKeys, &seen)
			switch {
			case !ok:
				return false
			case k == 0:
				v := string(s.value())
				m.system = v == `"system"` || v == `"developer"`
				return true
			case k == 1:
				return textFast(s, &m.text)
			}
			s.value()
			return true
		}) {
			return false
		}
		if m.system {
			r.system = true
		}
		r.text.merge(&m.text)
	}
}

// textFast reads a textField's value into t: a string, an array of strings
// and content parts, anything else adding nothing.
func textFast(s *scanner, t *textStats) bool {
	switch s.peek() {
	case '"':
		t.scan(s.value())
		return true
	case '[':
	default:
		s.value()
		return true
	}
	s.i++
	for {
		switch s.peek() {
		case ']':
			s.i++
			t.seen = true
			return true
		case ',':
			s.i++
			continue
		case '"':
			var p textStats
			p.scan(s.value())
			t.merge(&p)
		case '{':
			var p textStats
			var seen uint32
			if !s.members(func(key []byte) bool {
				k, ok := known(key, partKeys, &seen)
				switch {
				case !ok:
					return false
				case k == 0:
					return textFast(s, &p)
				}
				s.value()
				return true
			}) {
				return false
			}
			t.merge(&p)
		default:
			s.value()
		}
	}
}
