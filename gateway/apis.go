package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/upstream"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// The Responses API (OpenAI) and the Messages API (Anthropic): what their
// routes need beyond a chat route's. Their streams are named events
// ("event: X" + "data: {"type":"X",…}"), which the SSE splitter passes by
// their data lines; usage and content come from the events named here.

// routeSpec is what a Responses or Messages route needs besides its
// operation.
type routeSpec struct {
	// parse is how the body is checked when the operation is not
	// analyzed (count_tokens: as a Messages body); "": by the operation.
	parse exchange.Operation
	shape apierror.Shape
	owner ownerFrom
	// owners is the server's: kept here so that a call reaches it
	// without a field of its own.
	owners *owners
}

// ownerFrom says where a route finds the response whose backend must
// answer it.
type ownerFrom uint8

const (
	ownerNone      ownerFrom = iota
	ownerFromParam           // the :id of /v1/responses/:id…
	ownerFromBody            // previous_response_id, else conversation
)

// shapeOf is the error shape of a path's clients, for errors made before a
// route's call exists.
func shapeOf(path string) apierror.Shape {
	if path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/") {
		return apierror.ShapeAnthropic
	}
	return apierror.ShapeOpenAI
}

// ownerBackend finds the backend that must answer a follow-up: nil (and
// no error) when the request names no response, or names a conversation
// no backend holds yet (it goes where the balancer picks, and that
// backend becomes the conversation's). Never another backend than the
// owner: the response lives only in the memory of its instance.
func (s *Server) ownerBackend(ctx context.Context, x *call, f *request.Fields, id string) (*upstream.Backend, *apierror.Error) {
	var key, what string
	switch {
	case x.spec.owner == ownerFromParam:
		key, what = responseKey(id), id
	case f == nil:
		return nil, nil
	case f.PreviousResponseID != "":
		key, what = responseKey(f.PreviousResponseID), f.PreviousResponseID
	case f.Conversation != "":
		key, what = conversationKey(f.Conversation), f.Conversation
	default:
		return nil, nil
	}
	name, ok, err := s.owners.lookup(ctx, key)
	switch {
	case err != nil:
		s.log.Warn("response owner lookup failed", "key", key, "err", err)
		return nil, apierror.New(http.StatusServiceUnavailable, "server_error", "response_owner_lookup_failed",
			fmt.Sprintf("the backend holding '%s' could not be looked up", what), exchange.ClassNoBackend)
	case !ok && key == conversationKey(what):
		x.newConversation = true
		return nil, nil
	case !ok:
		return nil, apierror.New(http.StatusNotFound, "invalid_request_error", "response_not_found",
			fmt.Sprintf("Response with id '%s' not found.", what), exchange.ClassBadRequest)
	}
	for _, b := range s.pool.Backends() {
		if b.Name != name {
			continue
		}
		if !b.Healthy() {
			return nil, apierror.New(http.StatusConflict, "invalid_request_error", "response_backend_unavailable",
				fmt.Sprintf("'%s' is held by backend %q, which is not available (unhealthy or ejected)", what, name), exchange.ClassNoBackend)
		}
		return b, nil
	}
	return nil, apierror.New(http.StatusConflict, "invalid_request_error", "response_backend_unavailable",
		fmt.Sprintf("'%s' is held by backend %q, which is no longer configured", what, name), exchange.ClassNoBackend)
}

// maxIDScan bounds the prefix of a plain Responses body searched for its
// root id: the id comes first in what vLLM writes.
const maxIDScan = 64 << 10

// ownerFromCapture records the owner of a plain Responses body once its
// root "id" has arrived (before the bytes reach the client, so that the
// client's next request finds it).
func (x *call) ownerFromCapture() {
	doc := x.resp.captured
	if id := rootID(doc); id != "" {
		x.recordOwner(id)
		return
	}
	if len(doc) >= maxIDScan || x.resp.truncated {
		x.findOwner = false // give up
	}
}

// recordOwner records the call's backend as the owner of response id and
// stops looking for one.
func (x *call) recordOwner(id string) {
	x.spec.owners.record(responseKey(id), x.backend.Name)
	x.findOwner = false
}

// rootID returns the root "id" string of a JSON object, possibly cut
// short after it; "" when it has none (yet).
func rootID(doc []byte) string {
	s := jsonscan.New(doc, jsonscan.Options{MaxDepth: maxScanDepth})
	if s.Peek() != '{' || !s.Enter('{') {
		return ""
	}
	for n := 0; s.Member(&n); {
		if string(s.Key()) != "id" {
			s.Skip()
			continue
		}
		raw, ok := s.Str()
		if !ok || !jsonscan.Verbatim(raw) {
			return ""
		}
		return string(raw)
	}
	return ""
}

// apiEvent handles one data payload of a Responses or Messages stream: it
// reports whether the event is a content delta, which the tap counts and
// times as a chat content chunk (one scan of the event's root), and
// whether it ends the stream; it decodes the few events with usage or the
// response's id.
func (x *call) apiEvent(payload []byte) (content, end bool) {
	typ, content, ok := scanAPIEvent(payload)
	if !ok {
		var e apiEventJSON
		if json.Unmarshal(payload, &e) != nil {
			return false, false
		}
		typ, content = e.Type, e.Delta.content()
	}
	switch typ {
	case "response.output_text.delta", "response.reasoning_text.delta", "response.refusal.delta",
		"response.function_call_arguments.delta", "content_block_delta":
		return content, false
	case "response.created", "message_start", "message_delta":
		x.apiUsage(typ, payload)
	case "response.completed", "response.incomplete", "response.failed":
		x.apiUsage(typ, payload)
		return false, true
	case "message_stop":
		return false, true
	}
	return false, false
}

// scanAPIEvent reads the root "type" of an event and whether its "delta"
// carries content: a non-empty string (Responses) or an object with a
// non-empty "text", "thinking" or "partial_json" (Messages). ok is false
// when it cannot read the event exactly.
func scanAPIEvent(doc []byte) (typ string, content, ok bool) {
	s := jsonscan.New(doc, jsonscan.Options{MaxDepth: maxScanDepth})
	if s.Peek() != '{' || !s.Enter('{') {
		return "", false, false
	}
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "type":
			raw, ok := s.Str()
			if !ok || !jsonscan.Verbatim(raw) {
				return "", false, false
			}
			typ = apiEventType(raw)
		case "delta":
			switch s.Peek() {
			case '"':
				raw, ok := s.Str()
				if !ok {
					return "", false, false
				}
				content = len(raw) > 0
			case '{':
				s.Enter('{')
				for m := 0; s.Member(&m); {
					switch string(s.Key()) {
					case "text", "thinking", "partial_json":
						if s.Peek() != '"' {
							s.Skip()
							continue
						}
						raw, ok := s.Str()
						if !ok {
							return "", false, false
						}
						content = content || len(raw) > 0
					default:
						s.Skip()
					}
				}
			default:
				s.Skip()
			}
		default:
			s.Skip()
		}
	}
	return typ, content, s.End()
}

// apiEventTypes are the event types apiEvent tells apart, so that naming
// one costs no allocation.
var apiEventTypes = []string{
	"response.output_text.delta", "response.reasoning_text.delta", "response.refusal.delta",
	"response.function_call_arguments.delta", "content_block_delta",
	"response.created", "response.completed", "response.incomplete", "response.failed",
	"message_start", "message_delta", "message_stop",
}

func apiEventType(raw []byte) string {
	for _, t := range apiEventTypes {
		if string(raw) == t {
			return t
		}
	}
	return ""
}

// apiEventJSON is an event as encoding/json reads it, where scanAPIEvent
// cannot.
type apiEventJSON struct {
	Type  string        `json:"type"`
	Delta apiDeltaField `json:"delta"`
}

// apiDeltaField is a Responses delta (a string) or a Messages one (an object).
type apiDeltaField struct {
	text string
}

func (d *apiDeltaField) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		d.text = s
		return nil
	}
	var o struct {
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		PartialJSON string `json:"partial_json"`
	}
	if json.Unmarshal(b, &o) == nil {
		d.text = o.Text + o.Thinking + o.PartialJSON
	}
	return nil
}

func (d apiDeltaField) content() bool { return d.text != "" }

// apiUsageJSON is the usage of both APIs: input and output tokens, and
// the prompt tokens read from the backend's prefix cache: the Responses
// API's input_tokens_details.cached_tokens (part of input_tokens), the
// Messages API's cache_read_input_tokens (which, with
// cache_creation_input_tokens, input_tokens leaves out).
type apiUsageJSON struct {
	InputTokens        *int `json:"input_tokens"`
	OutputTokens       *int `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
}

// apiDocJSON is a plain Responses or Messages body, or the object an
// event carries (response, message).
type apiDocJSON struct {
	ID         string        `json:"id"`
	Model      string        `json:"model"`
	Status     string        `json:"status"`
	StopReason string        `json:"stop_reason"`
	Usage      *apiUsageJSON `json:"usage"`
}

// apiUsage records what a stream's rare events carry: the response's id
// (its owner), model and finish reason, and the token usage.
func (x *call) apiUsage(typ string, payload []byte) {
	var e struct {
		Response *apiDocJSON   `json:"response"`
		Message  *apiDocJSON   `json:"message"`
		Usage    *apiUsageJSON `json:"usage"`
		Delta    struct {
			StopReason string `json:"stop_reason"`
		} `json:"delta"`
	}
	if json.Unmarshal(payload, &e) != nil {
		return
	}
	switch typ {
	case "response.created":
		if r := e.Response; r != nil && r.ID != "" {
			x.span.found(r.ID, r.Model, "")
			if x.findOwner {
				x.recordOwner(r.ID)
			}
		}
	case "response.completed", "response.incomplete", "response.failed":
		if r := e.Response; r != nil {
			x.span.found("", "", r.Status)
			x.apiTokens(r.Usage, true)
		}
	case "message_start":
		if m := e.Message; m != nil {
			x.span.found(m.ID, m.Model, "")
			if m.Usage != nil && m.Usage.InputTokens != nil {
				// The output count comes with message_delta; until then
				// the stream's deltas are counted.
				t := x.resp.tokens()
				t.prompt = *m.Usage.InputTokens
				t.apiCache(m.Usage, true)
				x.resp.setTokens(t)
			}
		}
	case "message_delta":
		x.span.found("", "", e.Delta.StopReason)
		x.apiTokens(e.Usage, false)
	}
}

// apiTokens records reported usage: both counts (Responses), or the
// output count and the input count when given (Messages' message_delta).
func (x *call) apiTokens(u *apiUsageJSON, both bool) {
	if u == nil || u.OutputTokens == nil {
		return
	}
	t := x.resp.tokens()
	if u.InputTokens != nil && (both || *u.InputTokens > 0) {
		t.prompt = *u.InputTokens
	}
	t.apiCache(u, both)
	t.completion, t.reported = *u.OutputTokens, true
	x.resp.setTokens(t)
}

// apiCache takes the cached prompt tokens of a usage object into t: all
// that it reports, or (message_delta, whose counts are cumulative and may
// be left out or zero) those above zero.
func (t *tokenCounts) apiCache(u *apiUsageJSON, all bool) {
	set := func(dst *int32, v *int) {
		if v != nil && (all || *v > 0) {
			*dst = clampTokens(*v)
		}
	}
	if d := u.InputTokensDetails; d != nil {
		set(&t.cached, d.CachedTokens)
	}
	if u.CacheReadInputTokens != nil || u.CacheCreationInputTokens != nil {
		// Anthropic's input_tokens counts only what follows the last
		// cache breakpoint: reads and writes come on top of it.
		read, created := t.cached, t.extraPrompt-t.cached
		set(&read, u.CacheReadInputTokens)
		set(&created, u.CacheCreationInputTokens)
		t.cached, t.extraPrompt = read, clampTokens(int(read)+int(created))
	}
}

// apiUsageFromCapture records the usage, id and model of a plain
// Responses or Messages body.
func (x *call) apiUsageFromCapture() {
	if len(x.resp.captured) == 0 || x.resp.captured[0] != '{' || x.resp.truncated {
		return
	}
	var d apiDocJSON
	if json.Unmarshal(x.resp.captured, &d) != nil {
		return
	}
	finish := d.StopReason // Messages'
	if finish == "" {
		finish = d.Status // Responses'
	}
	x.span.found(d.ID, d.Model, finish)
	x.apiTokens(d.Usage, true)
}
