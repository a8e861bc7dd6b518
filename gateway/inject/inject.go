package inject

import (
	"math/rand/v2"
	"strconv"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// Logprob injection (analyzers.confidence.inject): for a sampled
// share of the chat, completions and Responses requests whose clients did not ask for
// logprobs, the gateway asks the backend for them, lets the tap hand them
// to the analyzers, and strips them (strip.go) from what the client gets,
// so the client receives the bytes it would have received without
// injection.
//
// TGI's /generate and /generate_stream are never injected: their options
// sit nested in "parameters", so appending a key is not enough, and TGI's
// "details" change more of the response than one value per choice (the
// non-streaming body gains a "details" object, the last stream event
// carries one), so there is no single value to null.

// Injector decides which requests get logprobs injected. The zero value
// injects nothing. It is safe for concurrent use.
type Injector struct {
	ratio float64
	// chat, completion and responses are the members appended to chat,
	// legacy completions and Responses bodies, each starting with its
	// comma.
	chat, completion, responses string
}

// responsesInclude is the include value that asks a Responses backend for
// the logprobs of the output text.
const responsesInclude = "message.output_text.logprobs"

// NewInjector returns the Injector that config c describes: it samples
// c.SampleRatio of the eligible requests and asks for c.TopLogprobs.
func NewInjector(c config.Inject) Injector {
	k := strconv.Itoa(c.TopLogprobs)
	return Injector{
		ratio:      c.SampleRatio,
		chat:       `,"logprobs":true,"top_logprobs":` + k,
		completion: `,"logprobs":` + k,
		responses:  `,"include":["` + responsesInclude + `"],"top_logprobs":` + k,
	}
}

// Sample reports whether a request of operation op with fields f gets
// logprobs injected. A request is eligible when its client did not ask for
// logprobs: chat without "top_logprobs" and with "logprobs" absent, null or
// false; legacy completions with "logprobs" absent or null (0 asks for the
// chosen token's logprob, so it is the client asking); Responses with
// "include" and "top_logprobs" absent or null and "store": false.
//
// A Responses request with an "include" of its own is skipped, whatever it
// holds: appending a second "include" would replace the client's (the
// later key wins), and splicing a value into the client's array is more
// rewriting than the gain is worth. A stored response (the default, and
// what background requests and previous_response_id need) keeps the
// injected logprobs in the backend, where a later GET /v1/responses/{id}
// reads them past the stripper: only a request that opts out of storage
// gets them.
func (in Injector) Sample(op exchange.Operation, f *request.Fields) bool {
	return in.ratio > 0 && Eligible(op, f) && rand.Float64() < in.ratio
}

// Eligible reports whether logprobs may be injected into a request of
// operation op with fields f: its client did not ask for any (Sample), as
// the backend reads the body (f.Folded).
func Eligible(op exchange.Operation, f *request.Fields) bool {
	if f.Folded {
		return false
	}
	switch op {
	case exchange.OpChat:
		if (f.Logprobs.Present() && f.Logprobs != 'f') || f.TopLogprobs.Present() {
			return false
		}
	case exchange.OpCompletion:
		if f.Logprobs.Present() {
			return false
		}
	case exchange.OpResponses:
		if f.Include.Present() || f.TopLogprobs.Present() || f.Background == 't' || f.Store != 'f' {
			return false
		}
	default:
		return false
	}
	return true
}

// Rewrite returns body, a JSON object, with the logprob members for op
// appended before its final '}'. When the client sent "logprobs": false or
// null, the body then holds the key twice; the later one wins in Python's
// json module (vLLM) and in Go's encoding/json alike.
func (in Injector) Rewrite(op exchange.Operation, body []byte) []byte {
	add := in.completion
	switch op {
	case exchange.OpChat:
		add = in.chat
	case exchange.OpResponses:
		add = in.responses
	}
	return AppendMembers(body, add)
}

// AppendMembers returns body, a JSON object, with add (members, starting
// with a comma) appended before its final '}'.
func AppendMembers(body []byte, add string) []byte {
	end := len(body) - 1
	for end >= 0 && jsonscan.IsSpace(body[end]) {
		end--
	}
	if end < 0 || body[end] != '}' {
		return body // request.Parse admits only objects; keep the bytes if not
	}
	prev := end - 1
	for prev >= 0 && jsonscan.IsSpace(body[prev]) {
		prev--
	}
	if prev >= 0 && body[prev] == '{' {
		add = add[1:] // an empty object takes no comma
	}
	out := make([]byte, 0, len(body)+len(add))
	out = append(out, body[:end]...)
	out = append(out, add...)
	return append(out, body[end:]...)
}
