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

type completionResponse struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []completionChoice `json:"choices"`
	Usage   *usageInfo         `json:"usage"`
}

type completionChoice struct {
	Index          int                 `json:"index"`
	Text           string              `json:"text"`
	Logprobs       *completionLogprobs `json:"logprobs"`
	FinishReason   string              `json:"finish_reason"`
	StopReason     *string             `json:"stop_reason"`
	PromptLogprobs []any               `json:"prompt_logprobs"`
}

type completionChunk struct {
	ID      string                  `json:"id"`
	Object  string                  `json:"object"`
	Created int64                   `json:"created"`
	Model   string                  `json:"model"`
	Choices []completionChunkChoice `json:"choices"`
	Usage   *usageInfo              `json:"usage,omitempty"`
}

type completionChunkChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
	StopReason   *string             `json:"stop_reason"`
}

func (s *Server) handleCompletions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	body, decoded := decodeOpenAI(s, w, r, &req, func(q *completionRequest) string { return q.Model })
	if !decoded {
		return
	}
	prompts, e := parsePrompts(req.Prompt)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	sp, e := checkCommon(req.N, req.MaxTokens, req.PromptLogprobs, req.Stream, req.StreamOptions)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	if req.Logprobs != nil {
		switch {
		case *req.Logprobs < 0:
			e = badRequest("`logprobs` must be a positive value.")
		case *req.Logprobs > maxTopLogprobs:
			e = badRequest("Requested sample logprobs of %d, which is greater than max allowed: %d", *req.Logprobs, maxTopLogprobs)
		}
		if e != nil {
			s.failOpenAI(w, e)
			return
		}
		sp.topK = *req.Logprobs
	}
	k := s.Knobs()
	plans, e := plan(k, prompts, sp)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}

	rng := requestRNG(s.seed, body)
	if s.failNext(k.ErrorRate) {
		s.failOpenAI(w, errSimulated)
		return
	}
	id := "cmpl-" + hexID(rng)
	created := s.createdAt()
	m := newLM(s.seed, k)
	promptTokens := 0
	for _, p := range plans {
		promptTokens += p.tokens
	}
	choices := startChoices(m, plans, sp.n, sp.topK)

	rn := s.begin(r.Context(), k, promptTokens)
	if rn == nil {
		return
	}
	defer rn.end()
	if req.Stream {
		s.streamCompletion(w, rn, req.Logprobs != nil, sp, id, created, promptTokens, plans, choices)
		return
	}

	logprobs := make([]*completionLogprobs, len(choices))
	if req.Logprobs != nil {
		for i := range logprobs {
			logprobs[i] = &completionLogprobs{}
		}
	}
	ok := generateSteps(rn, choices, maxGen(plans), func(c *choiceState, st step) error {
		if lp := logprobs[c.index]; lp != nil {
			lp.add(st, c.offset, sp.topK)
		}
		return nil
	})
	if !ok {
		return
	}
	resp := completionResponse{
		ID: id, Object: "text_completion", Created: created, Model: s.model,
		Choices: make([]completionChoice, len(choices)),
	}
	completion := 0
	var promptLogprobs map[*choicePlan][]any
	if sp.promptK >= 0 {
		promptLogprobs = make(map[*choicePlan][]any, len(plans))
		for i := range plans {
			promptLogprobs[&plans[i]] = promptLogprobsOf(m, plans[i].prompt, sp.promptK)
		}
	}
	for i, c := range choices {
		completion += c.done
		resp.Choices[i] = completionChoice{
			Index: i, Text: c.text.String(), Logprobs: logprobs[i],
			FinishReason: c.plan.finish, PromptLogprobs: promptLogprobs[c.plan],
		}
	}
	resp.Usage = newUsage(promptTokens, completion)
	writeJSON(w, http.StatusOK, resp)
}

// streamCompletion sends a chunk per token (the last one of a choice with
// finish_reason), the usage chunk if asked, then [DONE].
func (s *Server) streamCompletion(w http.ResponseWriter, rn *run, logprobs bool, sp sampling, id string, created int64, promptTokens int, plans []choicePlan, choices []*choiceState) {
	sse := newSSE(w, "data: ")
	completion := 0
	ok := generateSteps(rn, choices, maxGen(plans), func(c *choiceState, st step) error {
		completion++
		ch := completionChunkChoice{Index: c.index, Text: st.text}
		if logprobs {
			ch.Logprobs = &completionLogprobs{}
			ch.Logprobs.add(st, c.offset, sp.topK)
		}
		if c.done == c.plan.gen {
			ch.FinishReason = &c.plan.finish
		}
		var usage *usageInfo
		if sp.opts.continuous() {
			usage = newUsage(promptTokens, completion)
		}
		return sse.event(completionChunk{ID: id, Object: "text_completion", Created: created, Model: s.model,
			Choices: []completionChunkChoice{ch}, Usage: usage})
	})
	if !ok {
		return
	}
	if sp.opts.includeUsage() {
		if err := sse.event(completionChunk{ID: id, Object: "text_completion", Created: created, Model: s.model,
			Choices: []completionChunkChoice{}, Usage: newUsage(promptTokens, completion)}); err != nil {
			rn.cancel()
			return
		}
	}
	if err := sse.event("[DONE]"); err != nil {
		rn.cancel()
	}
}
