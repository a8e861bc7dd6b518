package inputdrift

import (
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// The fast path of Extract. The request is read by jsonscan, which
// validates the text as it walks it, instead of encoding/json's
// reflection, which for this request shape re-validated every message and
// content part it handed to an UnmarshalJSON method (drift.Extract was
// 4.5 % of the gateway's CPU at full load). The scan gives up, and Extract
// falls back to encoding/json, on anything whose meaning it does not
// reproduce exactly: invalid JSON (encoding/json's error is the answer), a
// key with an escape or a byte outside ASCII, a key that matches a known
// one only case-insensitively (encoding/json would take it), a known key
// twice, a value of an unexpected type, a model name that needs decoding.
// TestExtractFastAgrees and FuzzExtractFast check it against the
// encoding/json path.

// extractFast returns what Extract returns for body, with decided true, or
// decided false when the encoding/json path must decide.
func extractFast(api API, body []byte) (f Features, decided bool, err error) {
	r := request{api: api}
	if !r.scanFast(body) {
		return Features{}, false, nil
	}
	f, err = r.features()
	return f, true, err
}

// known tells which of keys the key of the member s is at is: its index,
// -1 for none, or ok false when only encoding/json can tell (see
// jsonscan.Field) or it is one already seen.
func known(s *jsonscan.Scanner, keys []string, seen *uint32) (int, bool) {
	i, sure := jsonscan.Field(s.Key(), keys)
	switch {
	case !sure:
		return 0, false
	case i >= 0:
		if *seen&(1<<i) != 0 {
			return 0, false
		}
		*seen |= 1 << i
	}
	return i, true
}

// field is what a known key of a request object holds.
type field uint8

const (
	fieldModel field = iota
	fieldMaxTokens
	fieldMaxCompletionTokens
	fieldTemperature
	fieldTopP
	fieldParameters // TGI's parameters object
	fieldMessages   // chat's messages
	fieldText       // chat's prompt, input, inputs
	fieldSystem     // Responses instructions, Messages system
	fieldInput      // Responses input, Messages messages (see scanInput)
)

// requestKeys is the keys that scanFast knows in a request object of one
// API (for known) and, at the same index, what each holds.
type requestKeys struct {
	names  []string
	fields []field
}

var (
	chatKeys = requestKeys{
		names: []string{"model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
			"parameters", "messages", "prompt", "input", "inputs"},
		fields: []field{fieldModel, fieldMaxTokens, fieldMaxCompletionTokens, fieldTemperature, fieldTopP,
			fieldParameters, fieldMessages, fieldText, fieldText, fieldText},
	}
	// The Responses and Messages requests name the same fields.
	otherFields   = []field{fieldModel, fieldSystem, fieldInput, fieldMaxTokens, fieldTemperature, fieldTopP}
	responsesKeys = requestKeys{
		names:  []string{"model", "instructions", "input", "max_output_tokens", "temperature", "top_p"},
		fields: otherFields,
	}
	messagesKeys = requestKeys{
		names:  []string{"model", "system", "messages", "max_tokens", "temperature", "top_p"},
		fields: otherFields,
	}
	parameterKeys = []string{"max_new_tokens", "temperature", "top_p"}
	messageKeys   = []string{"role", "content"}
	partKeys      = []string{"text"}
)

// scanFast fills r from body; false when the encoding/json path must
// decide (r is then to be dropped).
func (r *request) scanFast(body []byte) bool {
	sc := jsonscan.New(body, jsonscan.Options{})
	s := &sc
	if s.Peek() != '{' {
		return false
	}
	s.Enter('{')
	keys := &responsesKeys
	switch r.api {
	case Chat:
		keys = &chatKeys
	case Messages:
		keys = &messagesKeys
	}
	var seen uint32
	system := false
	for n := 0; s.Member(&n); {
		k, ok := known(s, keys.names, &seen)
		if !ok {
			return false
		}
		if k < 0 {
			if !s.Skip() {
				return false
			}
			continue
		}
		switch keys.fields[k] {
		case fieldModel:
			ok = r.scanModel(s)
		case fieldMaxTokens:
			ok = number(s, &r.MaxTokens)
		case fieldMaxCompletionTokens:
			ok = number(s, &r.MaxCompletionTokens)
		case fieldTemperature:
			ok = number(s, &r.Temperature)
		case fieldTopP:
			ok = number(s, &r.TopP)
		case fieldParameters:
			ok = r.scanParameters(s)
		case fieldMessages:
			ok = r.scanMessages(s)
		case fieldText:
			ok = textFast(s, &r.text)
		case fieldSystem:
			if s.Peek() == 'n' {
				ok = s.Literal("null")
			} else {
				system = true
				ok = textFast(s, &r.text)
			}
		case fieldInput:
			ok = r.scanInput(s)
		}
		if !ok {
			return false
		}
	}
	r.addSystem(system)
	return s.End()
}

// scanInput reads the Messages API's messages, or the Responses API's
// input: a string, one user message; an array of items, read as chat
// messages; anything else adding nothing (see itemsField).
func (r *request) scanInput(s *jsonscan.Scanner) bool {
	if r.api == Messages {
		return r.scanMessages(s)
	}
	switch s.Peek() {
	case '"':
		r.messages = 1
		return textFast(s, &r.text)
	case '[':
		return r.scanMessages(s)
	case 'n':
		return s.Literal("null")
	}
	return s.Skip()
}

// scanModel reads the model name: a string that is its own decoded value,
// or null, which leaves it alone.
func (r *request) scanModel(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '"':
		raw, ok := s.Str()
		if !ok || !jsonscan.Verbatim(raw) {
			return false
		}
		r.Model = string(raw)
		return true
	}
	return false
}

// number reads a JSON number or null into *dst as encoding/json would.
func number(s *jsonscan.Scanner, dst **float64) bool {
	switch c := s.Peek(); {
	case c == 'n':
		*dst = nil
		return s.Literal("null")
	case c == '-' || jsonscan.IsDigit(c):
		raw, _, ok := s.Number()
		if !ok {
			return false
		}
		f, err := jsonscan.ParseFloat(raw)
		if err != nil {
			return false // out of range: encoding/json's error
		}
		*dst = &f
		return true
	}
	return false
}

func (r *request) scanParameters(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case 'n':
		return s.Literal("null")
	case '{':
	default:
		return false
	}
	s.Enter('{')
	p := &r.Parameters
	var seen uint32
	for n := 0; s.Member(&n); {
		k, ok := known(s, parameterKeys, &seen)
		switch {
		case !ok:
			return false
		case k == 0:
			ok = number(s, &p.MaxNewTokens)
		case k == 1:
			ok = number(s, &p.Temperature)
		case k == 2:
			ok = number(s, &p.TopP)
		default:
			ok = s.Skip()
		}
		if !ok {
			return false
		}
	}
	return s.OK()
}

func (r *request) scanMessages(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case 'n':
		r.messages = 0
		return s.Literal("null")
	case '[':
	default:
		return false
	}
	s.Enter('[')
	n := 0
	for s.Element(&n) {
		if s.Peek() != '{' {
			return false // null elements and others: encoding/json decides
		}
		s.Enter('{')
		var m message
		m.text.rd = r.text.rd
		var seen uint32
		for k := 0; s.Member(&k); {
			i, ok := known(s, messageKeys, &seen)
			switch {
			case !ok:
				return false
			case i == 0:
				var v []byte
				v, ok = s.Value()
				m.system = string(v) == `"system"` || string(v) == `"developer"`
			case i == 1:
				ok = textFast(s, &m.text)
			default:
				ok = s.Skip()
			}
			if !ok {
				return false
			}
		}
		if !s.OK() {
			return false
		}
		if m.system {
			r.system = true
		}
		r.text.merge(&m.text)
	}
	r.messages = n
	return s.OK()
}

// textFast reads a textField's value into t: a string, an array of strings
// and content parts, anything else adding nothing.
func textFast(s *jsonscan.Scanner, t *textStats) bool {
	switch s.Peek() {
	case '"':
		v, ok := s.Value()
		if ok {
			t.scan(v)
		}
		return ok
	case '[':
	default:
		return s.Skip()
	}
	s.Enter('[')
	for n := 0; s.Element(&n); {
		switch s.Peek() {
		case '"':
			v, ok := s.Value()
			if !ok {
				return false
			}
			p := textStats{rd: t.rd}
			p.scan(v)
			t.merge(&p)
		case '{':
			s.Enter('{')
			p := textStats{rd: t.rd}
			var seen uint32
			for k := 0; s.Member(&k); {
				i, ok := known(s, partKeys, &seen)
				switch {
				case !ok:
					return false
				case i == 0:
					ok = textFast(s, &p)
				default:
					ok = s.Skip()
				}
				if !ok {
					return false
				}
			}
			if !s.OK() {
				return false
			}
			t.merge(&p)
		default:
			if !s.Skip() {
				return false
			}
		}
	}
	t.seen = true
	return s.OK()
}
