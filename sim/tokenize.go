package sim

import (
	"net/http"
	"strconv"
	"strings"
)

// --- /tokenize --------------------------------------------------------------

// tokenizeRequest is vLLM's: a completion prompt, or chat messages
// rendered as the chat route renders them.
type tokenizeRequest struct {
	Model    string        `json:"model"`
	Prompt   *string       `json:"prompt"`
	Messages []chatMessage `json:"messages"`
	// AddGenerationPrompt and AddSpecialTokens are accepted and change
	// nothing: the simulator's chat rendering has no generation prompt
	// and its tokenizer no special tokens.
	AddGenerationPrompt *bool `json:"add_generation_prompt"`
	AddSpecialTokens    *bool `json:"add_special_tokens"`
}

// tokenizeResponse is vLLM's.
type tokenizeResponse struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"`
	Tokens      []int `json:"tokens"`
}

// handleTokenize answers vLLM's POST /tokenize with one token per byte of
// the prompt (ids byteIDBase + byte): given back as a completions prompt,
// they read as the same text, so the model sees the same context as for
// the text itself. That is what teacher forcing needs (the gateway scores
// one backend's continuation with another on the prompt as the reference
// tokenized it); the count is not the ⌈characters/4⌉ that usage reports.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if _, ok := decodeOpenAI(s, w, r, &req, func() string { return req.Model }); !ok {
		return
	}
	var text string
	switch {
	case req.Prompt != nil && req.Messages != nil:
		s.failOpenAI(w, badRequest("give either prompt or messages, not both"))
		return
	case req.Prompt != nil:
		text = *req.Prompt
	case req.Messages != nil:
		t, e := chatPrompt(req.Messages)
		if e != nil {
			s.failOpenAI(w, e)
			return
		}
		text = t
	default:
		s.failOpenAI(w, badRequest("prompt or messages: field required"))
		return
	}
	ids := make([]int, len(text))
	for i := range len(text) {
		ids[i] = byteIDBase + int(text[i])
	}
	writeJSON(w, http.StatusOK, tokenizeResponse{Count: len(ids), MaxModelLen: s.Knobs().MaxModelLen, Tokens: ids})
}

// named is st as the response lists it: under return_tokens_as_token_ids,
// the token and its alternatives are named "token_id:<id>".
func (sp *sampling) named(st step) step {
	if !sp.tokenIDs {
		return st
	}
	out := st
	out.text = tokenIDName(st.id)
	out.top = make([]candidate, len(st.top))
	for i, c := range st.top {
		c.text = tokenIDName(c.id)
		out.top[i] = c
	}
	return out
}

func tokenIDName(id int) string { return "token_id:" + strconv.Itoa(id) }

// --- /detokenize ------------------------------------------------------------

type detokenizeRequest struct {
	Model  string `json:"model"`
	Tokens []int  `json:"tokens"`
}

// handleDetokenize answers vLLM's POST /detokenize: the text of the token
// ids, each read as a completions prompt reads it (the bytes of
// /tokenize's ids, the words of the vocabulary), so that detokenizing what
// /tokenize returned gives back the text.
func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req detokenizeRequest
	if _, ok := decodeOpenAI(s, w, r, &req, func() string { return req.Model }); !ok {
		return
	}
	if req.Tokens == nil {
		s.failOpenAI(w, badRequest("tokens: field required"))
		return
	}
	p, e := idsPrompt(req.Tokens)
	if e != nil {
		e.msg = strings.Replace(e.msg, "prompt:", "tokens:", 1)
		s.failOpenAI(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": p.text})
}
