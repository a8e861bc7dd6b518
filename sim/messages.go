package sim

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
)

// messagesRequest holds the fields of an Anthropic Messages API request the
// simulator reads; others (tools, metadata, stop_sequences, thinking...)
// are accepted and ignored.
type messagesRequest struct {
	Model       *string           `json:"model"`
	MaxTokens   *int              `json:"max_tokens"`
	System      json.RawMessage   `json:"system"`
	Messages    []messagesMessage `json:"messages"`
	Stream      bool              `json:"stream"`
	Temperature *float64          `json:"temperature"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicMessage is the Message object.
type anthropicMessage struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []textBlock    `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        anthropicUsage `json:"usage"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicUsage is the Message's usage. With prefix caching on, as vLLM
// reports it since it maps prompt_tokens_details: input_tokens are the
// prompt tokens the cache did not hold, cache_read_input_tokens those it
// held, and cache_creation_input_tokens 0 (vLLM has no cache writes to
// report), so that their sum is the prompt, as Anthropic defines it. With
// caching off the cache fields are absent.
type anthropicUsage struct {
	InputTokens              int  `json:"input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens,omitempty"`
	OutputTokens             int  `json:"output_tokens"`
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string             `json:"type"`
	Error anthropicErrorInfo `json:"error"`
}

type anthropicErrorInfo struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorType is Anthropic's error type for an HTTP status.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case 529:
		return "overloaded_error"
	}
	if status >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// failAnthropic answers e in Anthropic's format and counts the error.
func (s *Server) failAnthropic(w http.ResponseWriter, e *apiError) {
	s.errors.Add(1)
	writeJSON(w, e.status, anthropicError{Type: "error", Error: anthropicErrorInfo{Type: anthropicErrorType(e.status), Message: e.msg}})
}

// decodeMessages counts a Messages API request, reads and decodes it, and
// renders its prompt: the system text, then every message's text (text
// blocks; images, tool uses and others add nothing). It answers the
// error itself and returns ok false on failure. needMaxTokens is false for
// count_tokens, which takes no max_tokens.
func (s *Server) decodeMessages(w http.ResponseWriter, r *http.Request, needMaxTokens bool) (req messagesRequest, body []byte, prompt string, ok bool) {
	s.requests.Add(1)
	body, err := readBody(w, r)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		e := bodyError(err)
		var mb *http.MaxBytesError
		if !errors.As(err, &mb) {
			e.msg = strings.TrimPrefix(e.msg, "invalid JSON body: ")
		}
		s.failAnthropic(w, e)
		return req, nil, "", false
	}
	if e := s.checkMessages(&req, needMaxTokens); e != nil {
		s.failAnthropic(w, e)
		return req, nil, "", false
	}
	var b strings.Builder
	if e := appendContent(&b, req.System); e != nil {
		s.failAnthropic(w, badRequest("system: %s", e.msg))
		return req, nil, "", false
	}
	for i, m := range req.Messages {
		if e := appendContent(&b, m.Content); e != nil {
			s.failAnthropic(w, badRequest("messages.%d.content: %s", i, e.msg))
			return req, nil, "", false
		}
	}
	return req, body, b.String(), true
}

// checkMessages validates the fields as Anthropic's API does, with its
// messages' style ("field: problem").
func (s *Server) checkMessages(req *messagesRequest, needMaxTokens bool) *apiError {
	switch {
	case req.Model == nil:
		return badRequest("model: Field required")
	case *req.Model != s.model && !slices.Contains(s.adapters, *req.Model):
		return &apiError{status: http.StatusNotFound, msg: "model: " + *req.Model}
	case needMaxTokens && req.MaxTokens == nil:
		return badRequest("max_tokens: Field required")
	case needMaxTokens && *req.MaxTokens < 1:
		return badRequest("max_tokens: Input should be greater than or equal to 1")
	case req.Messages == nil:
		return badRequest("messages: Field required")
	case len(req.Messages) == 0:
		return badRequest("messages: at least one message is required")
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return badRequest("messages.%d.role: Input should be 'user' or 'assistant'", i)
		}
	}
	return nil
}

// stopReason maps a finish reason to Anthropic's.
func stopReason(finish string) *string {
	r := "end_turn"
	if finish == "length" {
		r = "max_tokens"
	}
	return &r
}

// handleMessages serves POST /v1/messages. max_tokens, which Anthropic
// requires, is a cap here, not the length as chat's max_tokens is: the
// answer has Knobs.OutputTokens tokens (stop_reason end_turn), or
// max_tokens when that is fewer (stop_reason max_tokens).
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	req, body, prompt, ok := s.decodeMessages(w, r, true)
	if !ok {
		return
	}
	k := s.Knobs()
	m := newLM(s.seed, k)
	var maxTokens *int
	if *req.MaxTokens < k.OutputTokens {
		maxTokens = req.MaxTokens
	}
	c, e := planOne(k, m, prompt, "max_tokens", maxTokens, 0)
	if e != nil {
		s.failAnthropic(w, e)
		return
	}
	rng := requestRNG(s.seed, body)
	if s.failNext(k.ErrorRate) {
		s.failAnthropic(w, &apiError{status: http.StatusInternalServerError, msg: errSimulated.msg})
		return
	}
	rn := s.begin(r.Context(), k, onePrompt(c.plan.prompt, c.plan.tokens, *req.Model))
	if rn == nil {
		return
	}
	defer rn.end()
	msg := anthropicMessage{
		ID: "msg_" + hexID(rng), Type: "message", Role: "assistant", Model: s.servedName(*req.Model),
		Content: []textBlock{}, Usage: anthropicUsage{InputTokens: c.plan.tokens},
	}
	if k.PrefixCacheBlocks > 0 {
		read, created := rn.cached, 0
		msg.Usage.InputTokens -= read
		msg.Usage.CacheReadInputTokens, msg.Usage.CacheCreationInputTokens = &read, &created
	}
	if req.Stream {
		s.streamMessage(w, rn, c, msg)
		return
	}
	if !generateSteps(rn, []*choiceState{c}, c.plan.gen, func(*choiceState, step) error { return nil }) {
		return
	}
	msg.Content = []textBlock{{Type: "text", Text: c.text.String()}}
	msg.StopReason = stopReason(c.plan.finish)
	msg.Usage.OutputTokens = c.done
	writeJSON(w, http.StatusOK, msg)
}

// Events of a Messages stream.
type (
	messageStartEvent struct {
		Type    string           `json:"type"`
		Message anthropicMessage `json:"message"`
	}
	contentBlockStartEvent struct {
		Type         string    `json:"type"`
		Index        int       `json:"index"`
		ContentBlock textBlock `json:"content_block"`
	}
	contentBlockDeltaEvent struct {
		Type  string    `json:"type"`
		Index int       `json:"index"`
		Delta textDelta `json:"delta"`
	}
	textDelta struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	contentBlockStopEvent struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	messageDeltaEvent struct {
		Type  string             `json:"type"`
		Delta messageDeltaFields `json:"delta"`
		Usage messageDeltaUsage  `json:"usage"`
	}
	messageDeltaFields struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	}
	messageDeltaUsage struct {
		OutputTokens int `json:"output_tokens"`
	}
	typeOnlyEvent struct {
		Type string `json:"type"`
	}
)

// streamMessage sends Anthropic's event sequence: message_start (no output
// tokens yet), content_block_start and a ping at once, a
// content_block_delta per token, then content_block_stop, message_delta
// with the stop reason and the output tokens, and message_stop.
func (s *Server) streamMessage(w http.ResponseWriter, rn *run, c *choiceState, msg anthropicMessage) {
	sse := newSSE(w, "data: ")
	send := func(name string, v any) bool {
		if err := sse.named(name, v); err != nil {
			rn.cancel()
			return false
		}
		return true
	}
	if !send("message_start", messageStartEvent{Type: "message_start", Message: msg}) ||
		!send("content_block_start", contentBlockStartEvent{Type: "content_block_start", ContentBlock: textBlock{Type: "text"}}) ||
		!send("ping", typeOnlyEvent{Type: "ping"}) {
		return
	}
	if !generateSteps(rn, []*choiceState{c}, c.plan.gen, func(_ *choiceState, st step) error {
		return sse.named("content_block_delta", contentBlockDeltaEvent{Type: "content_block_delta", Delta: textDelta{Type: "text_delta", Text: st.text}})
	}) {
		return
	}
	if !send("content_block_stop", contentBlockStopEvent{Type: "content_block_stop"}) {
		return
	}
	if !send("message_delta", messageDeltaEvent{Type: "message_delta",
		Delta: messageDeltaFields{StopReason: stopReason(c.plan.finish)}, Usage: messageDeltaUsage{OutputTokens: c.done}}) {
		return
	}
	send("message_stop", typeOnlyEvent{Type: "message_stop"})
}

// handleCountTokens serves POST /v1/messages/count_tokens: the input
// tokens the same request would count.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	_, _, prompt, ok := s.decodeMessages(w, r, false)
	if !ok {
		return
	}
	if limit := s.Knobs().MaxModelLen; limit > 0 {
		if n := (promptText{text: prompt}).tokens(); n > limit {
			s.failAnthropic(w, badRequest("prompt is too long: %d tokens > %d maximum", n, limit))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": (promptText{text: prompt}).tokens()})
}
