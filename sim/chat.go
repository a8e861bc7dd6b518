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
	// TokenIDs is vLLM's return_tokens_as_token_ids: logprobs name
	// tokens "token_id:<id>".
	TokenIDs bool `json:"return_tokens_as_token_ids"`
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

// chatResponse is vLLM's ChatCompletionResponse.
type chatResponse struct {
	openAIHead
	Choices []any      `json:"choices"` // chatChoice values
	Usage   *usageInfo `json:"usage"`
	// PromptLogprobs is vLLM's; null unless prompt_logprobs was asked.
	PromptLogprobs promptLogprobList `json:"prompt_logprobs"`
}

// chatChoice is a choice of a chatResponse.
type chatChoice struct {
	Index        int            `json:"index"`
	Message      chatMessageOut `json:"message"`
	Logprobs     tokenLogprobs  `json:"logprobs"` // a *chatLogprobs or nil
	FinishReason string         `json:"finish_reason"`
	StopReason   *string        `json:"stop_reason"`
}

type chatMessageOut struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []any  `json:"tool_calls"`
}

// chatChunkChoice is a choice of a chat stream chunk.
type chatChunkChoice struct {
	Index        int           `json:"index"`
	Delta        chatDelta     `json:"delta"`
	Logprobs     tokenLogprobs `json:"logprobs"` // a *chatLogprobs or nil
	FinishReason *string       `json:"finish_reason"`
	// StopReason is present, as null, on the last chunk of a choice only.
	StopReason json.RawMessage `json:"stop_reason,omitempty"`
}

type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

var jsonNull = json.RawMessage("null")

// handleChat serves /v1/chat/completions.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, &chatFormat)
}

func (q *chatRequest) model() string { return q.Model }

// generation returns the request's one prompt and what it asks for.
func (q *chatRequest) generation() ([]promptText, sampling, *apiError) {
	text, e := chatPrompt(q.Messages)
	if e != nil {
		return nil, sampling{}, e
	}
	maxTokens := q.MaxTokens
	if q.MaxCompletionTokens != nil {
		maxTokens = q.MaxCompletionTokens
	}
	sp, e := checkCommon(q.N, maxTokens, q.PromptLogprobs, q.Stream, q.StreamOptions)
	if e == nil {
		e = sp.checkLogprobs(q.Logprobs, "top_logprobs", q.TopLogprobs)
	}
	sp.tokenIDs = q.TokenIDs
	return []promptText{{text: text}}, sp, e
}

// chatFormat shapes chat completions as vLLM does; a stream opens each
// choice with a chunk holding the assistant role and empty content.
var chatFormat = openAIFormat{
	request:  func() openAIRequest { return new(chatRequest) },
	idPrefix: "chatcmpl-", object: "chat.completion", chunkObject: "chat.completion.chunk",
	newLogprobs: func() tokenLogprobs { return &chatLogprobs{} },
	opening: func(index int) any {
		empty := ""
		return chatChunkChoice{Index: index, Delta: chatDelta{Role: "assistant", Content: &empty}}
	},
	chunk: func(index int, text string, lp tokenLogprobs, finish *string) any {
		ch := chatChunkChoice{Index: index, Delta: chatDelta{Content: &text}, Logprobs: lp, FinishReason: finish}
		if finish != nil {
			ch.StopReason = jsonNull
		}
		return ch
	},
	choice: func(c *choiceState, lp tokenLogprobs, _ promptLogprobList) any {
		return chatChoice{
			Index:        c.index,
			Message:      chatMessageOut{Role: "assistant", Content: c.text.String(), ToolCalls: []any{}},
			Logprobs:     lp,
			FinishReason: c.plan.finish,
		}
	},
	response: func(head openAIHead, choices []any, usage *usageInfo, promptLogprobs promptLogprobList) any {
		return chatResponse{openAIHead: head, Choices: choices, Usage: usage, PromptLogprobs: promptLogprobs}
	},
}
