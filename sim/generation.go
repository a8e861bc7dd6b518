package sim

import "net/http"

// An openAIFormat is what tells the chat and legacy completions routes apart
// on the generation path they share, [Server.generate]: the names in their
// bodies and the functions that shape their choices. The two formats,
// chatFormat and completionFormat, are package values and never change.
type openAIFormat struct {
	// request returns an empty request of the route, to decode into.
	request func() openAIRequest
	// idPrefix starts every response id: "chatcmpl-" or "cmpl-".
	idPrefix string
	// object is the "object" of a response, chunkObject that of a stream
	// chunk.
	object, chunkObject string
	// newLogprobs returns the empty logprobs of one choice, in the
	// route's shape.
	newLogprobs func() tokenLogprobs
	// opening, when not nil, is the chunk choice that opens each streamed
	// choice, sent just before its first token (chat's role chunk). Nil
	// means none.
	opening func(index int) any
	// chunk is the chunk choice of one streamed token of choice index: its
	// text, its logprobs (nil when not asked) and finish, nil but on the
	// choice's last token.
	chunk func(index int, text string, lp tokenLogprobs, finish *string) any
	// choice is a choice of the non-streaming response, with its logprobs
	// (nil when not asked) and those of its prompt (nil when not asked).
	choice func(c *choiceState, lp tokenLogprobs, promptLogprobs promptLogprobList) any
	// response is the non-streaming body. promptLogprobs are those of the
	// first prompt, nil when not asked: chat lists them once, at the top,
	// where completions list them per choice.
	response func(head openAIHead, choices []any, usage *usageInfo, promptLogprobs promptLogprobList) any
}

// An openAIRequest is a decoded chat or completions request.
type openAIRequest interface {
	// model is the model the request names, "" for none.
	model() string
	// generation checks the request's fields and returns its prompts and
	// what it asks for, or vLLM's refusal.
	generation() ([]promptText, sampling, *apiError)
}

var (
	_ openAIRequest = (*chatRequest)(nil)
	_ openAIRequest = (*completionRequest)(nil)
)

// tokenLogprobs collects the logprobs of a choice's tokens in one route's
// shape: *chatLogprobs or *completionLogprobs.
type tokenLogprobs interface {
	// add appends token st, which starts at character offset of the
	// choice's text, listing k alternatives where the shape takes a count.
	add(st step, offset, k int)
}

var (
	_ tokenLogprobs = (*chatLogprobs)(nil)
	_ tokenLogprobs = (*completionLogprobs)(nil)
)

// openAIHead is the fields every chat and completions response and stream
// chunk starts with.
type openAIHead struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
}

// openAIChunk is a stream chunk of chat or completions; Choices hold the
// route's chunk choices, none in the usage chunk.
type openAIChunk struct {
	openAIHead
	Choices []any      `json:"choices"`
	Usage   *usageInfo `json:"usage,omitempty"`
}

// generate serves a chat or completions request in format f: it decodes
// and checks the request, plans, paces and answers it, streamed or whole,
// with vLLM's error body on any refusal.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, f *openAIFormat) {
	req := f.request()
	body, ok := decodeOpenAI(s, w, r, req, req.model)
	if !ok {
		return
	}
	prompts, sp, e := req.generation()
	if e != nil {
		s.failOpenAI(w, e)
		return
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
	head := openAIHead{ID: f.idPrefix + hexID(rng), Object: f.object, Created: s.createdAt(), Model: s.servedName(req.model())}
	m := newLM(s.seed, k)
	promptTokens := 0
	for _, p := range plans {
		promptTokens += p.tokens
	}
	var promptLogprobs map[*choicePlan]promptLogprobList
	if sp.promptK >= 0 {
		promptLogprobs = make(map[*choicePlan]promptLogprobList, len(plans))
		for i := range plans {
			promptLogprobs[&plans[i]] = promptLogprobsOf(m, plans[i].prompt, sp.promptK)
		}
	}
	choices := startChoices(m, plans, sp.n, sp.topK)

	// vLLM computes a prompt_logprobs request's prompt whole: it reads
	// nothing from the prefix cache.
	rn := s.begin(r.Context(), k, admission{plans: plans, model: req.model(), noRead: sp.promptK >= 0})
	if rn == nil {
		return
	}
	defer rn.end()
	if sp.stream {
		head.Object = f.chunkObject
		s.streamGeneration(w, rn, f, sp, head, promptTokens, choices, maxGen(plans))
		return
	}

	logprobs := make([]tokenLogprobs, len(choices))
	if sp.logprobs {
		for i := range logprobs {
			logprobs[i] = f.newLogprobs()
		}
	}
	ok = generateSteps(rn, choices, maxGen(plans), func(c *choiceState, st step) error {
		if lp := logprobs[c.index]; lp != nil {
			lp.add(sp.named(st), c.offset, sp.topK)
		}
		return nil
	})
	if !ok {
		return
	}
	out := make([]any, len(choices))
	completion := 0
	for i, c := range choices {
		completion += c.done
		out[i] = f.choice(c, logprobs[i], promptLogprobs[c.plan])
	}
	writeJSON(w, http.StatusOK, f.response(head, out, rn.usage(promptTokens, completion), promptLogprobs[&plans[0]]))
}

// streamGeneration sends vLLM's chunk sequence: per choice the opening
// chunk if the format has one, then a chunk per token (the last one with
// finish_reason), then the usage chunk if asked, then [DONE]. Every chunk
// carries the usage so far when continuous_usage_stats asks for it.
func (s *Server) streamGeneration(w http.ResponseWriter, rn *run, f *openAIFormat, sp sampling, head openAIHead, promptTokens int, choices []*choiceState, steps int) {
	sse := newSSE(w, "data: ")
	completion := 0
	send := func(choice any) error {
		var usage *usageInfo
		if sp.opts.continuous() {
			// vLLM's continuous usage has no prompt_tokens_details;
			// the final usage chunk has them.
			usage = newUsage(promptTokens, completion)
		}
		return sse.event(openAIChunk{openAIHead: head, Choices: []any{choice}, Usage: usage})
	}
	ok := generateSteps(rn, choices, steps, func(c *choiceState, st step) error {
		if c.done == 1 && f.opening != nil {
			if err := send(f.opening(c.index)); err != nil {
				return err
			}
		}
		completion++
		var lp tokenLogprobs
		if sp.logprobs {
			lp = f.newLogprobs()
			lp.add(sp.named(st), c.offset, sp.topK)
		}
		var finish *string
		if c.done == c.plan.gen {
			finish = &c.plan.finish
		}
		return send(f.chunk(c.index, st.text, lp, finish))
	})
	if !ok {
		return
	}
	if sp.opts.includeUsage() {
		if err := sse.event(openAIChunk{openAIHead: head, Choices: []any{}, Usage: rn.usage(promptTokens, completion)}); err != nil {
			rn.cancel()
			return
		}
	}
	if err := sse.event("[DONE]"); err != nil {
		rn.cancel()
	}
}
