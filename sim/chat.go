package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// chatRequest holds the fields of a chat completion request the simulator
// reads; others are accepted and ignored, as vLLM does.
type chatRequest struct {
	Model               string         `json:"model"`
	Messages            []chatMessage  `json:"messages"`
	Stream              bool           `json:"stream"`
	StreamOptions       *streamOptions `json:"stream_options"`
	MaxTokens           *int           `json:"max_tokens"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	N                   *int           `json:"n"`
	Logprobs            bool           `json:"logprobs"`
	TopLogprobs         *int           `json:"top_logprobs"`
	PromptLogprobs      *int           `json:"prompt_logprobs"`
}

type chatMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

// chatPrompt concatenates the text of every message, the context the
// simulated model continues.
func chatPrompt(msgs []chatMessage) (string, *apiError) {
	if len(msgs) == 0 {
		return "", badRequest("messages: field required and must not be empty")
	}
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == nil || *m.Role == "" {
			return "", badRequest("messages[%d].role: field required", i)
		}
		if err := appendContent(&b, m.Content); err != nil {
			return "", badRequest("messages[%d].content: %s", i, err.msg)
		}
	}
	return b.String(), nil
}

// appendContent appends a message content: null, a string, or an array of
// content parts whose "text" parts count (images and others add nothing).
func appendContent(b *strings.Builder, raw json.RawMessage) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return badRequest("%s", describeJSONError(err))
		}
		b.WriteString(s)
		return nil
	case '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(raw, &parts); err != nil {
			return badRequest("must be a string or an array of content parts")
		}
		for i, p := range parts {
			if p.Type != "text" {
				continue
			}
			if p.Text == nil {
				return badRequest("part %d: a text part needs \"text\"", i)
			}
			b.WriteString(*p.Text)
		}
		return nil
	}
	return badRequest("must be a string or an array of content parts")
}

type chatResponse struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   *usageInfo   `json:"usage"`
	// PromptLogprobs is vLLM's; null unless prompt_logprobs was asked.
	PromptLogprobs []any `json:"prompt_logprobs"`
}

type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     *chatLogprobs  `json:"logprobs"`
	FinishReason string         `json:"finish_reason"`
	StopReason   *string        `json:"stop_reason"`
}

type chatMessageOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

type chatChunk struct {
	ID      string            `json:"id"`
	Object  string            `json:"object"`
	Created int64             `json:"created"`
	Model   string            `json:"model"`
	Choices []chatChunkChoice `json:"choices"`
	Usage   *usageInfo        `json:"usage,omitempty"`
}

type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     *chatLogprobs `json:"logprobs"`
	FinishReason *string       `json:"finish_reason"`
	// StopReason is present, as null, on the last chunk of a choice only.
	StopReason json.RawMessage `json:"stop_reason,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

var jsonNull = json.RawMessage("null")

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	body, decoded := decodeOpenAI(s, w, r, &req, func(q *chatRequest) string { return q.Model })
	if !decoded {
		return
	}
	text, e := chatPrompt(req.Messages)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	maxTokens := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = req.MaxCompletionTokens
	}
	sp, e := checkCommon(req.N, maxTokens, req.PromptLogprobs, req.Stream, req.StreamOptions)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	if req.TopLogprobs != nil {
		switch {
		case *req.TopLogprobs < 0:
			e = badRequest("`top_logprobs` must be a positive value.")
		case !req.Logprobs && *req.TopLogprobs > 0:
			e = badRequest("when using `top_logprobs`, `logprobs` must be set to true.")
		case *req.TopLogprobs > maxTopLogprobs:
			e = badRequest("Requested sample logprobs of %d, which is greater than max allowed: %d", *req.TopLogprobs, maxTopLogprobs)
		}
		if e != nil {
			s.failOpenAI(w, e)
			return
		}
		sp.topK = *req.TopLogprobs
	}
	k := s.Knobs()
	plans, e := plan(k, []promptText{{text: text}}, sp)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}

	rng := requestRNG(s.seed, body)
	if s.failNext(k.ErrorRate) {
		s.failOpenAI(w, errSimulated)
		return
	}
	id := "chatcmpl-" + hexID(rng)
	created := s.createdAt()
	m := newLM(s.seed, k)
	var promptLogprobs []any
	if sp.promptK >= 0 {
		promptLogprobs = promptLogprobsOf(m, plans[0].prompt, sp.promptK)
	}
	choices := startChoices(m, plans, sp.n, sp.topK)

	rn := s.begin(r.Context(), k, plans[0].tokens)
	if rn == nil {
		return
	}
	defer rn.end()
	if req.Stream {
		s.streamChat(w, rn, req.Logprobs, sp, id, created, plans, choices)
		return
	}

	logprobs := make([]*chatLogprobs, len(choices))
	if req.Logprobs {
		for i := range logprobs {
			logprobs[i] = &chatLogprobs{Content: make([]chatLogprobContent, 0, choices[i].plan.gen)}
		}
	}
	ok := generateSteps(rn, choices, maxGen(plans), func(c *choiceState, st step) error {
		if lp := logprobs[c.index]; lp != nil {
			lp.Content = append(lp.Content, chatLogprobOf(st))
		}
		return nil
	})
	if !ok {
		return
	}
	resp := chatResponse{
		ID: id, Object: "chat.completion", Created: created, Model: s.model,
		Choices:        make([]chatChoice, len(choices)),
		PromptLogprobs: promptLogprobs,
	}
	completion := 0
	for i, c := range choices {
		completion += c.done
		resp.Choices[i] = chatChoice{
			Index:        i,
			Message:      chatMessageOut{Role: "assistant", Content: c.text.String(), ToolCalls: []any{}},
			Logprobs:     logprobs[i],
			FinishReason: c.plan.finish,
		}
	}
	resp.Usage = newUsage(plans[0].tokens, completion)
	writeJSON(w, http.StatusOK, resp)
}

// streamChat sends vLLM's chunk sequence: per choice a first chunk with the
// assistant role and empty content, then a chunk per token (the last one
// with finish_reason), then the usage chunk if asked, then [DONE].
func (s *Server) streamChat(w http.ResponseWriter, rn *run, logprobs bool, sp sampling, id string, created int64, plans []choicePlan, choices []*choiceState) {
	sse := newSSE(w, "data: ")
	chunk := func(ch chatChunkChoice, usage *usageInfo) error {
		return sse.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.model,
			Choices: []chatChunkChoice{ch}, Usage: usage})
	}
	prompt := plans[0].tokens
	completion := 0
	continuous := func() *usageInfo {
		if sp.opts.continuous() {
			return newUsage(prompt, completion)
		}
		return nil
	}
	ok := generateSteps(rn, choices, maxGen(plans), func(c *choiceState, st step) error {
		if c.done == 1 {
			empty := ""
			if err := chunk(chatChunkChoice{Index: c.index, Delta: chatDelta{Role: "assistant", Content: &empty}}, continuous()); err != nil {
				return err
			}
		}
		completion++
		ch := chatChunkChoice{Index: c.index, Delta: chatDelta{Content: &st.text}}
		if logprobs {
			ch.Logprobs = &chatLogprobs{Content: []chatLogprobContent{chatLogprobOf(st)}}
		}
		if c.done == c.plan.gen {
			ch.FinishReason = &c.plan.finish
			ch.StopReason = jsonNull
		}
		return chunk(ch, continuous())
	})
	if !ok {
		return
	}
	if sp.opts.includeUsage() {
		if err := sse.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: s.model,
			Choices: []chatChunkChoice{}, Usage: newUsage(prompt, completion)}); err != nil {
			rn.cancel()
			return
		}
	}
	if err := sse.event("[DONE]"); err != nil {
		rn.cancel()
	}
}
