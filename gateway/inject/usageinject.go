package inject

import (
	"bytes"
	"encoding/json"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// Usage injection (usage.inject): most clients stream without
// stream_options.include_usage, which leaves the gateway without token
// counts. For the OpenAI chat and completions streams of such clients the
// gateway asks the backend for usage, lets the tap account it, and strips
// what that added (usagestrip.go) from what the client receives, so the
// client gets the bytes it would have got without injection.

// usageMember is appended to a request body that has no stream_options.
const usageMember = `,"stream_options":{"include_usage":true}`

// InjectUsage returns the body to send upstream for a request of operation
// op with fields f and body body, and whether usage was injected.
//
// Only chat and completions streams are eligible, and only when the client
// left usage off explicitly: stream_options absent or null, or an object
// whose "include_usage" is false or null. An object without
// "include_usage" is left alone: vLLM then defaults include_usage to true
// and OpenAI to false, so the gateway cannot know which bytes the client
// expects. Nor is a body whose keys the backend reads otherwise than
// encoding/json does (f.Folded). An object stream_options gets a second
// "stream_options" member appended, the client's object with
// "include_usage":true added last; the later key wins in Python's json
// module (vLLM), in Go's encoding/json, and among duplicate members inside
// the object alike. Anything else (include_usage true or malformed,
// stream_options not an object) returns body unchanged and false.
func InjectUsage(op exchange.Operation, f *request.Fields, body []byte) ([]byte, bool) {
	if (op != exchange.OpChat && op != exchange.OpCompletion) || !f.Stream || f.Folded {
		return body, false
	}
	so := f.StreamOptions
	if len(so) == 0 || string(so) == "null" {
		return appendMember(body, usageMember)
	}
	if so[0] != '{' {
		return body, false
	}
	// Decoding into a map compares keys after their escapes are decoded
	// and exactly (no case folding), as Python's json does, and keeps the
	// last of duplicate keys. It runs only for the rare client that sends
	// stream_options.
	var m map[string]json.RawMessage
	if json.Unmarshal(so, &m) != nil {
		return body, false
	}
	if v, ok := m["include_usage"]; !ok || (string(v) != "false" && string(v) != "null") {
		return body, false
	}
	opts, ok := appendMember(so, `,"include_usage":true`)
	if !ok {
		return body, false
	}
	member := make([]byte, 0, len(`,"stream_options":`)+len(opts))
	member = append(append(member, `,"stream_options":`...), opts...)
	return appendMember(body, string(member))
}

// appendMember returns obj, a JSON object, with member (which starts with
// its comma) inserted before the final '}', the comma left out when the
// object is empty. It reports false, with obj unchanged, when obj does not
// end with '}'.
func appendMember(obj []byte, member string) ([]byte, bool) {
	end := len(obj) - 1
	for end >= 0 && jsonscan.IsSpace(obj[end]) {
		end--
	}
	if end < 0 || obj[end] != '}' {
		return obj, false
	}
	if prev := bytes.TrimRight(obj[:end], " \t\r\n"); len(prev) > 0 && prev[len(prev)-1] == '{' {
		member = member[1:] // an empty object takes no comma
	}
	out := make([]byte, 0, len(obj)+len(member))
	out = append(out, obj[:end]...)
	out = append(out, member...)
	return append(out, obj[end:]...), true
}
