// Package request reads what the gateway needs from a client's request: the
// body, within its limits, and the few fields of it that routing, injection,
// caching and the spans use; and the tenant a request is counted under.
// Everything else in a body is forwarded untouched and unread.
package request

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// Kind records only the first byte of a JSON value ('"', '[', '{', 'n',
// 't', 'f' or a digit) so that a field can be type-checked without copying it.
type Kind byte

func (k *Kind) UnmarshalJSON(b []byte) error {
	if len(b) > 0 {
		*k = Kind(b[0])
	}
	return nil
}

// Present reports whether the member was there and not null.
func (k Kind) Present() bool { return k != 0 && k != 'n' }

// Fields are the few fields the gateway reads from a request body.
// Everything else is forwarded untouched and unread.
type Fields struct {
	Model    string
	Stream   bool
	Messages Kind
	Prompt   Kind
	Input    Kind
	Inputs   Kind
	// Logprobs and TopLogprobs decide whether logprobs may be injected
	// (package rewrite); decoding them here spares a second parse.
	Logprobs    Kind
	TopLogprobs Kind
	// Folded: a root key of the body is one of the fields' keys only
	// without regard to case ("STREAM", "ſtream"). encoding/json reads it
	// into the field, the backend (Python's json, vLLM) does not, so the
	// two read different requests: nothing is injected into such a body
	// (package rewrite), or a client could lose the logprobs or usage it
	// asked for, or get stream_options refused on a request the backend
	// does not stream (FuzzParseRequest). Set on the
	// encoding/json path, which every such body takes.
	Folded bool
	// StreamOptions decides whether usage may be injected
	// (package rewrite). Absent, it is nil; present, it is the member's
	// value as it is in the body (not a copy).
	StreamOptions json.RawMessage
	// Sampling parameters, for the inference span (OpenAI names, then TGI's).
	MaxTokens           Num
	MaxCompletionTokens Num
	Temperature         Num
	TopP                Num
	Seed                Kind // present: deterministic, cacheable
	// The Responses API's (OpenAI) and the Messages API's (Anthropic)
	// members: type-checked here, so that a bad request is the gateway's
	// 400 in the API's shape; the ids route follow-ups to the backend
	// that holds the response (vLLM keeps it in that instance's memory).
	// (The Kinds sit together: a request's call holds Fields, and its
	// size class is the gateway's memory per request.)
	Instructions Kind
	System       Kind
	// Include, Background and Store decide whether logprobs may be
	// injected into a Responses request (package rewrite).
	Include          Kind
	Background       Kind
	Store            Kind
	PreviousKind     Kind // of PreviousResponseID
	ConversationKind Kind // of Conversation
	MaxOutputTokens  Num
	// PreviousResponseID is the string value of previous_response_id
	// ("" when absent, null or not a string).
	PreviousResponseID string
	// Conversation is the conversation's id, given as a string or as an
	// object's "id" ("" when absent or null).
	Conversation string
	Parameters   struct {
		MaxNewTokens Num
		Temperature  Num
		TopP         Num
	}
}

// Num is an optional JSON number: ok is false when the member is
// absent or null.
type Num struct {
	v  float64
	ok bool
}

// Get returns the number, and false when the member was absent or null.
func (n Num) Get() (float64, bool) { return n.v, n.ok }

// requestJSON is Fields as encoding/json decodes it, the reference
// that the fast path (scanRequest) follows and falls back on.
type requestJSON struct {
	Model               *string         `json:"model"`  // a later null unsets it, as the backend reads it
	Stream              *bool           `json:"stream"` // a later null unsets it, as the backend reads it
	Messages            Kind            `json:"messages"`
	Prompt              Kind            `json:"prompt"`
	Input               Kind            `json:"input"`
	Inputs              Kind            `json:"inputs"`
	Logprobs            Kind            `json:"logprobs"`
	TopLogprobs         Kind            `json:"top_logprobs"`
	StreamOptions       json.RawMessage `json:"stream_options"`
	MaxTokens           *float64        `json:"max_tokens"`
	MaxCompletionTokens *float64        `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Seed                Kind            `json:"seed"`
	Instructions        Kind            `json:"instructions"`
	System              Kind            `json:"system"`
	Include             Kind            `json:"include"`
	Background          Kind            `json:"background"`
	Store               Kind            `json:"store"`
	MaxOutputTokens     *float64        `json:"max_output_tokens"`
	PreviousResponseID  json.RawMessage `json:"previous_response_id"`
	Conversation        json.RawMessage `json:"conversation"`
	Parameters          struct {
		MaxNewTokens *float64 `json:"max_new_tokens"`
		Temperature  *float64 `json:"temperature"`
		TopP         *float64 `json:"top_p"`
	} `json:"parameters"`
}

func (j *requestJSON) fields() Fields {
	num := func(p *float64) Num {
		if p == nil {
			return Num{}
		}
		return Num{*p, true}
	}
	f := Fields{
		Model: deref(j.Model), Stream: j.Stream != nil && *j.Stream, Messages: j.Messages, Prompt: j.Prompt, Input: j.Input, Inputs: j.Inputs,
		Logprobs: j.Logprobs, TopLogprobs: j.TopLogprobs, StreamOptions: j.StreamOptions,
		MaxTokens: num(j.MaxTokens), MaxCompletionTokens: num(j.MaxCompletionTokens),
		Temperature: num(j.Temperature), TopP: num(j.TopP), Seed: j.Seed,
		Instructions: j.Instructions, System: j.System, Include: j.Include, Background: j.Background, Store: j.Store, MaxOutputTokens: num(j.MaxOutputTokens),
	}
	if len(j.PreviousResponseID) > 0 {
		f.PreviousKind = Kind(j.PreviousResponseID[0])
		if f.PreviousKind == '"' {
			_ = json.Unmarshal(j.PreviousResponseID, &f.PreviousResponseID)
		}
	}
	if len(j.Conversation) > 0 {
		f.ConversationKind = Kind(j.Conversation[0])
		switch f.ConversationKind {
		case '"':
			_ = json.Unmarshal(j.Conversation, &f.Conversation)
		case '{':
			var c struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(j.Conversation, &c) == nil {
				f.Conversation = c.ID
			}
		}
	}
	p := &j.Parameters
	f.Parameters.MaxNewTokens, f.Parameters.Temperature, f.Parameters.TopP = num(p.MaxNewTokens), num(p.Temperature), num(p.TopP)
	return f
}

// requestKeys are requestJSON's keys, for jsonscan.Field.
var requestKeys = []string{"model", "stream", "messages", "prompt", "input", "inputs", "logprobs", "top_logprobs",
	"stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "parameters",
	"instructions", "system", "max_output_tokens", "previous_response_id", "conversation", "include", "background", "store"}

var parameterKeys = []string{"max_new_tokens", "temperature", "top_p"}

// maxScanDepth is the nesting scanRequest follows; deeper bodies go to
// encoding/json (whose own limit is 10000).
const maxScanDepth = 64

// scanRequest reads the fields of body without reflection, the way
// json.Unmarshal into requestJSON would: Parse runs on every request, and
// a decode's allocations would show in the gateway's overhead. It reports
// false for any body it cannot read exactly so (invalid JSON, a type
// error, a key that matches a field only under encoding/json's case
// folding or after unescaping, a string encoding/json would decode, deep
// nesting): the caller decodes that with encoding/json.
func scanRequest(body []byte, f *Fields) bool {
	s := jsonscan.New(body, jsonscan.Options{MaxDepth: maxScanDepth})
	if s.Peek() != '{' || !s.Enter('{') {
		return false
	}
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "model":
			if s.Peek() == 'n' {
				// As "stream": null below: the backend reads the later
				// null (vLLM: its default model), and so does
				// requestJSON; routing follows it.
				s.Literal("null")
				f.Model = ""
				break
			}
			if raw, ok := s.VerbatimStr(); ok {
				f.Model = string(raw)
			}
		case "stream":
			switch s.Peek() {
			case 't':
				f.Stream = s.Literal("true")
			case 'f':
				s.Literal("false")
				f.Stream = false
			case 'n':
				s.Literal("null")
				// encoding/json would keep an earlier true here; the
				// backend (Python's json: the later key wins) reads no
				// stream, and so does requestJSON (FuzzParseRequest:
				// else usage was injected into a request the backend
				// does not stream, and refuses).
				f.Stream = false
			default:
				s.Fail("stream: not a bool")
			}
		case "messages":
			f.Messages = skipKind(&s)
		case "prompt":
			f.Prompt = skipKind(&s)
		case "input":
			f.Input = skipKind(&s)
		case "inputs":
			f.Inputs = skipKind(&s)
		case "logprobs":
			f.Logprobs = skipKind(&s)
		case "top_logprobs":
			f.TopLogprobs = skipKind(&s)
		case "seed":
			f.Seed = skipKind(&s)
		case "instructions":
			f.Instructions = skipKind(&s)
		case "system":
			f.System = skipKind(&s)
		case "include":
			f.Include = skipKind(&s)
		case "background":
			f.Background = skipKind(&s)
		case "store":
			f.Store = skipKind(&s)
		case "max_output_tokens":
			scanFloat(&s, &f.MaxOutputTokens)
		case "previous_response_id":
			// The last member wins, as for the backend; a non-string
			// leaves no id (requestJSON), and Parse refuses it.
			f.PreviousResponseID = ""
			if f.PreviousKind = Kind(s.Peek()); f.PreviousKind == '"' {
				if raw, ok := s.VerbatimStr(); ok {
					f.PreviousResponseID = string(raw)
				}
			} else {
				s.Skip()
			}
		case "conversation":
			f.Conversation = ""
			switch f.ConversationKind = Kind(s.Peek()); f.ConversationKind {
			case '"':
				if raw, ok := s.VerbatimStr(); ok {
					f.Conversation = string(raw)
				}
			case '{':
				return false // {"id": ...}: rare, encoding/json reads it
			default:
				s.Skip()
			}
		case "stream_options":
			v, _ := s.Value()
			f.StreamOptions = v[:len(v):len(v)] // the body's bytes: appending must copy
		case "max_tokens":
			scanFloat(&s, &f.MaxTokens)
		case "max_completion_tokens":
			scanFloat(&s, &f.MaxCompletionTokens)
		case "temperature":
			scanFloat(&s, &f.Temperature)
		case "top_p":
			scanFloat(&s, &f.TopP)
		case "parameters":
			switch s.Peek() {
			case 'n':
				s.Literal("null")
			case '{':
				s.Enter('{')
				p := &f.Parameters
				for n := 0; s.Member(&n); {
					switch string(s.Key()) {
					case "max_new_tokens":
						scanFloat(&s, &p.MaxNewTokens)
					case "temperature":
						scanFloat(&s, &p.Temperature)
					case "top_p":
						scanFloat(&s, &p.TopP)
					default:
						if _, sure := jsonscan.Field(s.Key(), parameterKeys); !sure {
							return false
						}
						s.Skip()
					}
				}
			default:
				s.Fail("parameters: not an object")
			}
		default:
			if _, sure := jsonscan.Field(s.Key(), requestKeys); !sure {
				return false
			}
			s.Skip()
		}
	}
	return s.End()
}

// skipKind skips a value and returns its Kind.
func skipKind(s *jsonscan.Scanner) Kind {
	c := s.Peek()
	s.Skip()
	return Kind(c)
}

// scanFloat reads a number or null for an optional float64 member; any
// other value, or a number beyond float64's range, is encoding/json's type
// error and ends the fast path.
func scanFloat(s *jsonscan.Scanner, n *Num) {
	if s.Null() {
		*n = Num{}
		return
	}
	raw, _, ok := s.Number()
	if !ok {
		return
	}
	v, err := jsonscan.ParseFloat(raw)
	if err != nil {
		s.Fail("number out of range")
		return
	}
	*n = Num{v, true}
}

// ReadDeadliner sets the read deadline of a request's connection or
// stream.
type ReadDeadliner interface {
	SetReadDeadline(time.Time) error
}

// ReadBody reads the whole request body, at most limit bytes, within
// timeout (limits.read_timeout) when dl, where r's read deadline is set,
// is not nil (it is under the gateway's own HTTP server only). A body
// over the limit is a 413, one not in time a 408; any other read failure
// is a 400.
func ReadBody(r *http.Request, w http.ResponseWriter, dl ReadDeadliner, limit int64, timeout time.Duration) ([]byte, *apierror.Error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if dl != nil && timeout > 0 {
		// net/http lifts it when the body is read, as it starts reading
		// the connection in the background to notice a client leaving.
		_ = dl.SetReadDeadline(time.Now().Add(timeout))
	}
	var body []byte
	var err error
	if r.ContentLength > 0 {
		// A known length within the limit: net/http's body ends there,
		// so the limit needs no reader of its own.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(limit)
		}
		// The rest of the body will not be read: the connection closes
		// after the answer (net/http would otherwise wait for it, to
		// read the next request).
		w.Header().Set("Connection", "close")
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, apierror.New(http.StatusRequestTimeout, "invalid_request_error", "request_timeout",
				"the request body did not arrive within limits.read_timeout", exchange.ClassBadRequest)
		}
		return nil, apierror.BadRequest("could not read request body: " + err.Error())
	}
	return body, nil
}

func tooLarge(limit int64) *apierror.Error {
	return apierror.New(http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
		fmt.Sprintf("request body exceeds the limit of %d bytes", limit), exchange.ClassBadRequest)
}

// Parse checks that body is a JSON object with well-typed fields for op
// and returns the fields the gateway needs; anything else is a 400.
func Parse(op exchange.Operation, body []byte) (Fields, *apierror.Error) {
	var f Fields
	if len(body) == 0 {
		return f, apierror.BadRequest("request body is empty; expected a JSON object")
	}
	if !scanRequest(body, &f) {
		var j requestJSON
		err := json.Unmarshal(body, &j)
		f = j.fields()
		if err != nil {
			return f, decodeError(err)
		}
		f.Folded = foldedKeys(body)
	}
	need := func(k Kind, name string, kinds string) *apierror.Error {
		if !k.Present() {
			return apierror.BadRequest(fmt.Sprintf("'%s' is required", name))
		}
		for i := range len(kinds) {
			if byte(k) == kinds[i] {
				return nil
			}
		}
		return apierror.BadRequest(fmt.Sprintf("'%s' has the wrong type", name))
	}
	switch op {
	case exchange.OpChat:
		return f, need(f.Messages, "messages", "[")
	case exchange.OpCompletion:
		return f, need(f.Prompt, "prompt", "\"[")
	case exchange.OpEmbeddings:
		return f, need(f.Input, "input", "\"[")
	case exchange.OpGenerate:
		return f, need(f.Inputs, "inputs", "\"")
	case exchange.OpResponses:
		if e := need(f.Input, "input", "\"["); e != nil {
			return f, e
		}
		if e := optional(f.Instructions, "instructions", "\""); e != nil {
			return f, e
		}
		if e := optional(f.PreviousKind, "previous_response_id", "\""); e != nil {
			return f, e
		}
		if e := optional(f.ConversationKind, "conversation", "\"{"); e != nil {
			return f, e
		}
		if f.ConversationKind.Present() && f.Conversation == "" {
			return f, apierror.BadRequest("'conversation' must be a conversation id or an object with a string 'id'")
		}
		return f, nil
	case exchange.OpMessages:
		if e := need(f.Messages, "messages", "["); e != nil {
			return f, e
		}
		return f, optional(f.System, "system", "\"[")
	}
	return f, nil
}

// optional is the 400 for a member present (not null) with a type other
// than kinds, nil otherwise.
func optional(k Kind, name, kinds string) *apierror.Error {
	if !k.Present() || strings.IndexByte(kinds, byte(k)) >= 0 {
		return nil
	}
	return apierror.BadRequest(fmt.Sprintf("'%s' has the wrong type", name))
}

// foldedKeys reports whether a root key of body, a JSON object, matches
// one of requestKeys only without regard to case, as encoding/json matches
// keys to fields (Unicode simple folding: "ſ" is an "s").
func foldedKeys(body []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	for k := range m {
		for _, n := range requestKeys {
			if k != n && strings.EqualFold(k, n) {
				return true
			}
		}
	}
	return false
}

// decodeError is the 400 for a body encoding/json could not decode into
// requestJSON.
func decodeError(err error) *apierror.Error {
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if te.Field == "" {
			return apierror.BadRequest("request body must be a JSON object")
		}
		return apierror.BadRequest(fmt.Sprintf("'%s': expected %s, got %s", te.Field, te.Type.Kind(), te.Value))
	}
	return apierror.BadRequest("request body is not valid JSON: " + err.Error())
}

// SniffModel reads the "model" field of a passed-through JSON body, if any.
func SniffModel(body []byte) string {
	var f struct {
		Model *string `json:"model"` // a later null unsets it (requestJSON)
	}
	_ = json.Unmarshal(body, &f)
	return deref(f.Model)
}

// deref returns *p, or "" for nil.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
