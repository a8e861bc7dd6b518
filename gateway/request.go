package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/vigil-gw/vigil/exchange"
)

// jsonKind records only the first byte of a JSON value ('"', '[', '{', 'n',
// 't', 'f' or a digit) so that a field can be type-checked without copying it.
type jsonKind byte

func (k *jsonKind) UnmarshalJSON(b []byte) error {
	if len(b) > 0 {
		*k = jsonKind(b[0])
	}
	return nil
}

func (k jsonKind) present() bool { return k != 0 && k != 'n' }

// requestFields are the few fields the gateway reads from a request body.
// Everything else is forwarded untouched and unread.
type requestFields struct {
	Model    string   `json:"model"`
	Stream   bool     `json:"stream"`
	Messages jsonKind `json:"messages"`
	Prompt   jsonKind `json:"prompt"`
	Input    jsonKind `json:"input"`
	Inputs   jsonKind `json:"inputs"`
	// Logprobs and TopLogprobs decide whether logprobs may be injected
	// (inject.go); decoding them here spares a second parse.
	Logprobs    jsonKind `json:"logprobs"`
	TopLogprobs jsonKind `json:"top_logprobs"`
	// StreamOptions decides whether usage may be injected
	// (usageinject.go). Absent, it is nil: no copy for most requests.
	StreamOptions json.RawMessage `json:"stream_options"`
	// Sampling parameters, for the inference span (OpenAI names, then TGI's).
	MaxTokens           *float64 `json:"max_tokens"`
	MaxCompletionTokens *float64 `json:"max_completion_tokens"`
	Temperature         *float64 `json:"temperature"`
	TopP                *float64 `json:"top_p"`
	Seed                jsonKind `json:"seed"` // present: deterministic, cacheable
	Parameters          struct {
		MaxNewTokens *float64 `json:"max_new_tokens"`
		Temperature  *float64 `json:"temperature"`
		TopP         *float64 `json:"top_p"`
	} `json:"parameters"`
}

// readBody reads the whole request body, at most limit bytes. A body over the
// limit is a 413; any other read failure is a 400.
func readBody(r *http.Request, w http.ResponseWriter, limit int64) ([]byte, *apiError) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	var body []byte
	var err error
	if r.ContentLength > 0 {
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(limit)
		}
		return nil, badRequest("could not read request body: " + err.Error())
	}
	return body, nil
}

func tooLarge(limit int64) *apiError {
	return &apiError{http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large",
		fmt.Sprintf("request body exceeds the limit of %d bytes", limit), exchange.ClassBadRequest}
}

// parseRequest checks that body is a JSON object with well-typed fields for
// op and returns the fields the gateway needs.
func parseRequest(op exchange.Operation, body []byte) (requestFields, *apiError) {
	var f requestFields
	if len(body) == 0 {
		return f, badRequest("request body is empty; expected a JSON object")
	}
	if err := json.Unmarshal(body, &f); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			if te.Field == "" {
				return f, badRequest("request body must be a JSON object")
			}
			return f, badRequest(fmt.Sprintf("'%s': expected %s, got %s", te.Field, te.Type.Kind(), te.Value))
		}
		return f, badRequest("request body is not valid JSON: " + err.Error())
	}
	need := func(k jsonKind, name string, kinds string) *apiError {
		if !k.present() {
			return badRequest(fmt.Sprintf("'%s' is required", name))
		}
		for i := range len(kinds) {
			if byte(k) == kinds[i] {
				return nil
			}
		}
		return badRequest(fmt.Sprintf("'%s' has the wrong type", name))
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
	}
	return f, nil
}
