package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
)

// completionRequest holds the fields of a legacy completion request the
// simulator reads.
type completionRequest struct {
	Model          string          `json:"model"`
	Prompt         json.RawMessage `json:"prompt"`
	Stream         bool            `json:"stream"`
	StreamOptions  *streamOptions  `json:"stream_options"`
	MaxTokens      *int            `json:"max_tokens"`
	N              *int            `json:"n"`
	Logprobs       *int            `json:"logprobs"`
	PromptLogprobs *int            `json:"prompt_logprobs"`
	TokenIDs       bool            `json:"return_tokens_as_token_ids"`
}

// parsePrompts reads a completions prompt: a string, an array of strings,
// an array of token ids, or an array of arrays of token ids.
func parsePrompts(raw json.RawMessage) ([]promptText, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, badRequest("prompt: field required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("prompt: %s", describeJSONError(err))
		}
		return []promptText{{text: s}}, nil
	}
	const want = "prompt: must be a string, an array of strings, an array of token ids or an array of arrays of token ids"
	if raw[0] != '[' {
		return nil, badRequest(want)
	}
	var texts []string
	if err := json.Unmarshal(raw, &texts); err == nil {
		if len(texts) == 0 {
			return nil, badRequest("prompt: must not be empty")
		}
		out := make([]promptText, len(texts))
		for i, t := range texts {
			out[i] = promptText{text: t}
		}
		return out, nil
	}
	var ids []int
	if err := json.Unmarshal(raw, &ids); err == nil {
		if len(ids) == 0 {
			return nil, badRequest("prompt: must not be empty")
		}
		p, e := idsPrompt(ids)
		if e != nil {
			return nil, e
		}
		return []promptText{p}, nil
	}
	var batches [][]int
	if err := json.Unmarshal(raw, &batches); err == nil && len(batches) > 0 {
		out := make([]promptText, len(batches))
		for i, ids := range batches {
			if len(ids) == 0 {
				return nil, badRequest("prompt[%d]: must not be empty", i)
			}
			p, e := idsPrompt(ids)
			if e != nil {
				return nil, e
			}
			out[i] = p
		}
		return out, nil
	}
	return nil, badRequest(want)
}

func idsPrompt(ids []int) (promptText, *apiError) {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 {
			return promptText{}, badRequest("prompt: token ids must not be negative, got %d", id)
		}
		b.WriteString(idText(id))
	}
	return promptText{text: b.String(), ids: ids}, nil
}

// completionResponse is vLLM's CompletionResponse.
type completionResponse struct {
	openAIHead
	Choices []any      `json:"choices"` // completionChoice values
	Usage   *usageInfo `json:"usage"`
}

// completionChoice is a choice of a completionResponse.
type completionChoice struct {
	Index          int               `json:"index"`
	Text           string            `json:"text"`
	Logprobs       tokenLogprobs     `json:"logprobs"` // a *completionLogprobs or nil
	FinishReason   string            `json:"finish_reason"`
	StopReason     *string           `json:"stop_reason"`
	PromptLogprobs promptLogprobList `json:"prompt_logprobs"`
}

// completionChunkChoice is a choice of a completions stream chunk.
type completionChunkChoice struct {
	Index        int           `json:"index"`
	Text         string        `json:"text"`
	Logprobs     tokenLogprobs `json:"logprobs"` // a *completionLogprobs or nil
	FinishReason *string       `json:"finish_reason"`
	StopReason   *string       `json:"stop_reason"`
}

// handleCompletions serves /v1/completions.
func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, &completionFormat)
}

func (q *completionRequest) model() string { return q.Model }

// generation returns the request's prompts and what it asks for.
func (q *completionRequest) generation() ([]promptText, sampling, *apiError) {
	prompts, e := parsePrompts(q.Prompt)
	if e != nil {
		return nil, sampling{}, e
	}
	sp, e := checkCommon(q.N, q.MaxTokens, q.PromptLogprobs, q.Stream, q.StreamOptions)
	if e == nil {
		e = sp.checkLogprobs(q.Logprobs != nil, "logprobs", q.Logprobs)
	}
	sp.tokenIDs = q.TokenIDs
	return prompts, sp, e
}

// completionFormat shapes legacy completions as vLLM does: each choice
// lists its own prompt_logprobs, and a stream has no opening chunk.
var completionFormat = openAIFormat{
	request:  func() openAIRequest { return new(completionRequest) },
	idPrefix: "cmpl-", object: "text_completion", chunkObject: "text_completion",
	newLogprobs: func() tokenLogprobs { return &completionLogprobs{} },
	chunk: func(index int, text string, lp tokenLogprobs, finish *string) any {
		return completionChunkChoice{Index: index, Text: text, Logprobs: lp, FinishReason: finish}
	},
	choice: func(c *choiceState, lp tokenLogprobs, promptLogprobs promptLogprobList) any {
		return completionChoice{
			Index: c.index, Text: c.text.String(), Logprobs: lp,
			FinishReason: c.plan.finish, PromptLogprobs: promptLogprobs,
		}
	},
	response: func(head openAIHead, choices []any, usage *usageInfo, _ promptLogprobList) any {
		return completionResponse{openAIHead: head, Choices: choices, Usage: usage}
	},
}
