package sim

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// includeLogprobs is the include value that asks for the logprobs of the
// output text.
const includeLogprobs = "message.output_text.logprobs"

// responsesRequest holds the fields of a Responses API request the
// simulator reads; others (tools, reasoning, text, metadata...) are
// accepted and ignored, as vLLM ignores what it does not support.
type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
	Stream             bool            `json:"stream"`
	Store              *bool           `json:"store"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Include            []string        `json:"include"`
	TopLogprobs        *int            `json:"top_logprobs"`
	User               *string         `json:"user"`
}

// responseObject is the Response object, with the fields vLLM's
// ResponsesResponse sends, in its order; those the simulator has no use for
// are their defaults.
type responseObject struct {
	ID                 string             `json:"id"`
	CreatedAt          int64              `json:"created_at"`
	IncompleteDetails  any                `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	Metadata           any                `json:"metadata"`
	Model              string             `json:"model"`
	Object             string             `json:"object"`
	Output             []responseMessage  `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	Temperature        float64            `json:"temperature"`
	ToolChoice         string             `json:"tool_choice"`
	Tools              []any              `json:"tools"`
	TopP               float64            `json:"top_p"`
	Background         bool               `json:"background"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	MaxToolCalls       *int               `json:"max_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Prompt             any                `json:"prompt"`
	Reasoning          any                `json:"reasoning"`
	ServiceTier        string             `json:"service_tier"`
	Status             string             `json:"status"`
	Text               any                `json:"text"`
	TopLogprobs        *int               `json:"top_logprobs"`
	Truncation         string             `json:"truncation"`
	Usage              *responseUsage     `json:"usage"`
	User               *string            `json:"user"`
	Error              *responseErrorInfo `json:"error"`
}

type responseErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// responseMessage is an output item of type "message".
type responseMessage struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

// outputText is an "output_text" content part. Logprobs are null unless
// the request included them.
type outputText struct {
	Type        string               `json:"type"`
	Text        string               `json:"text"`
	Annotations []any                `json:"annotations"`
	Logprobs    []chatLogprobContent `json:"logprobs"`
}

// responseUsage is the Responses API's usage.
type responseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// eventHead starts every event of a Responses stream.
type eventHead struct {
	Type           string `json:"type"`
	SequenceNumber int    `json:"sequence_number"`
}

type responseEvent struct {
	eventHead
	Response *responseObject `json:"response"`
}

type outputItemEvent struct {
	eventHead
	OutputIndex int             `json:"output_index"`
	Item        responseMessage `json:"item"`
}

type contentPartEvent struct {
	eventHead
	ItemID       string     `json:"item_id"`
	OutputIndex  int        `json:"output_index"`
	ContentIndex int        `json:"content_index"`
	Part         outputText `json:"part"`
}

type textDeltaEvent struct {
	eventHead
	ItemID       string         `json:"item_id"`
	OutputIndex  int            `json:"output_index"`
	ContentIndex int            `json:"content_index"`
	Delta        string         `json:"delta"`
	Logprobs     []deltaLogprob `json:"logprobs"`
}

type textDoneEvent struct {
	eventHead
	ItemID       string         `json:"item_id"`
	OutputIndex  int            `json:"output_index"`
	ContentIndex int            `json:"content_index"`
	Text         string         `json:"text"`
	Logprobs     []deltaLogprob `json:"logprobs"`
}

// deltaLogprob is the logprob of a token in a text delta or done event,
// which, unlike output_text's, has no bytes.
type deltaLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
}

func deltaLogprobOf(st step) deltaLogprob {
	top := make([]topLogprob, len(st.top))
	for i, c := range st.top {
		top[i] = topLogprob{Token: c.text, Logprob: c.logprob}
	}
	return deltaLogprob{Token: st.text, Logprob: st.logprob, TopLogprobs: top}
}

// responseInput is a request's input, read.
type responseInput struct {
	// items are the input items as input_items lists them: messages
	// with their content as parts and an id, other items as given.
	items []json.RawMessage
	// text is the text the items add to the prompt.
	text string
}

// inputMessage is a message input item as stored.
type inputMessage struct {
	ID      string            `json:"id"`
	Type    string            `json:"type"`
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
	Status  string            `json:"status"`
}

// parseInput reads input: a string (one user message) or a list of items.
// Message items count the text of their content (a string or parts of type
// input_text, output_text or text); other items (function calls and their
// outputs, references) are kept for input_items and add nothing. Items
// without an id get one drawn from rng.
func parseInput(raw json.RawMessage, rng *rand.Rand) (responseInput, *apiError) {
	raw = bytes.TrimSpace(raw)
	var in responseInput
	if len(raw) == 0 || string(raw) == "null" {
		return in, &apiError{status: http.StatusBadRequest, msg: "input: field required", param: "input"}
	}
	var b strings.Builder
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return in, badRequest("input: %s", describeJSONError(err))
		}
		part, _ := marshal(map[string]string{"type": "input_text", "text": s})
		item, _ := marshal(inputMessage{ID: "msg_" + hexID(rng), Type: "message", Role: "user", Content: []json.RawMessage{part}, Status: "completed"})
		return responseInput{items: []json.RawMessage{item}, text: s}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return in, badRequest("input: must be a string or an array of input items")
	}
	for i, it := range items {
		var m struct {
			ID      string          `json:"id"`
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Status  string          `json:"status"`
		}
		if err := json.Unmarshal(it, &m); err != nil {
			return in, badRequest("input[%d]: must be an object", i)
		}
		if m.Type != "" && m.Type != "message" {
			in.items = append(in.items, it)
			continue
		}
		switch m.Role {
		case "user", "assistant", "system", "developer":
		case "":
			return in, badRequest("input[%d].role: field required", i)
		default:
			return in, badRequest("input[%d].role: must be one of user, assistant, system or developer, got %q", i, m.Role)
		}
		msg := inputMessage{ID: m.ID, Type: "message", Role: m.Role, Status: m.Status}
		if msg.ID == "" {
			msg.ID = "msg_" + hexID(rng)
		}
		if msg.Status == "" {
			msg.Status = "completed"
		}
		c := bytes.TrimSpace(m.Content)
		switch {
		case len(c) > 0 && c[0] == '"':
			var s string
			if err := json.Unmarshal(c, &s); err != nil {
				return in, badRequest("input[%d].content: %s", i, describeJSONError(err))
			}
			typ := "input_text"
			if m.Role == "assistant" {
				typ = "output_text"
			}
			part, _ := marshal(map[string]string{"type": typ, "text": s})
			msg.Content = []json.RawMessage{part}
			b.WriteString(s)
		case len(c) > 0 && c[0] == '[':
			if err := json.Unmarshal(c, &msg.Content); err != nil {
				return in, badRequest("input[%d].content: must be a string or an array of content parts", i)
			}
			for j, p := range msg.Content {
				var part struct {
					Type string  `json:"type"`
					Text *string `json:"text"`
				}
				if err := json.Unmarshal(p, &part); err != nil {
					return in, badRequest("input[%d].content[%d]: must be an object", i, j)
				}
				switch part.Type {
				case "input_text", "output_text", "text":
					if part.Text == nil {
						return in, badRequest("input[%d].content[%d]: a text part needs \"text\"", i, j)
					}
					b.WriteString(*part.Text)
				}
			}
		default:
			return in, badRequest("input[%d].content: must be a string or an array of content parts", i)
		}
		item, _ := marshal(msg)
		in.items = append(in.items, item)
	}
	in.text = b.String()
	return in, nil
}

// responseNotFound is vLLM's answer for an id this instance does not hold;
// param names the request field that carried it, "" for a path.
func responseNotFound(id, param string) *apiError {
	return &apiError{status: http.StatusNotFound, typ: "invalid_request_error", param: param,
		msg: "Response with id '" + id + "' not found."}
}

// handleResponses serves POST /v1/responses.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	var req responsesRequest
	body, ok := decodeOpenAI(s, w, r, &req, func() string { return req.Model })
	if !ok {
		return
	}
	logprobs := slices.Contains(req.Include, includeLogprobs)
	topK := 0
	if t := req.TopLogprobs; t != nil {
		if *t < 0 || *t > maxTopLogprobs {
			s.failOpenAI(w, &apiError{status: http.StatusBadRequest, param: "top_logprobs",
				msg: "top_logprobs must be in [0, " + strconv.Itoa(maxTopLogprobs) + "], got " + strconv.Itoa(*t) + "."})
			return
		}
		topK = *t
		// Asking for alternatives asks for logprobs, where OpenAI wants the
		// include as well: the simulator is lenient.
		logprobs = logprobs || topK > 0
	}
	// vLLM echoes top_logprobs: the client's value, null when it sent
	// null, its default 0 when it sent none. (Logprob injection relies on
	// this: it strips the injected value back to what was echoed.)
	echoTop := req.TopLogprobs
	var sent struct {
		TopLogprobs json.RawMessage `json:"top_logprobs"`
	}
	if json.Unmarshal(body, &sent) == nil && sent.TopLogprobs == nil {
		echoTop = new(int)
	}
	rng := requestRNG(s.seed, body)
	respID, msgID := "resp_"+hexID(rng), "msg_"+hexID(rng)
	in, e := parseInput(req.Input, rng)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	// The prompt is what vLLM renders, without the chat template: the
	// instructions, the previous response's conversation without its
	// instructions (they do not carry over), its output, then the input.
	var prompt strings.Builder
	if req.Instructions != nil {
		prompt.WriteString(*req.Instructions)
	}
	var history strings.Builder
	if id := req.PreviousResponseID; id != nil && *id != "" {
		prev, ok := s.stored.get(*id)
		if !ok {
			s.failOpenAI(w, responseNotFound(*id, "previous_response_id"))
			return
		}
		history.WriteString(prev.history)
	}
	history.WriteString(in.text)
	prompt.WriteString(history.String())

	k := s.Knobs()
	m := newLM(s.seed, k)
	c, e := planOne(k, m, prompt.String(), "max_output_tokens", req.MaxOutputTokens, topK)
	if e != nil {
		s.failOpenAI(w, e)
		return
	}
	if s.failNext(k.ErrorRate) {
		s.failOpenAI(w, errSimulated)
		return
	}
	resp := &responseObject{
		ID: respID, CreatedAt: s.createdAt(), Instructions: req.Instructions, Model: s.servedName(req.Model),
		Object: "response", Output: []responseMessage{}, ParallelToolCalls: true,
		Temperature: 1, ToolChoice: "auto", Tools: []any{}, TopP: 1,
		MaxOutputTokens: req.MaxOutputTokens, PreviousResponseID: req.PreviousResponseID,
		ServiceTier: "auto", Status: "in_progress", TopLogprobs: echoTop,
		Truncation: "disabled", User: req.User,
	}
	if req.Temperature != nil {
		resp.Temperature = *req.Temperature
	}
	if req.TopP != nil {
		resp.TopP = *req.TopP
	}

	rn := s.begin(r.Context(), k, onePrompt(c.plan.prompt, c.plan.tokens, req.Model))
	if rn == nil {
		return
	}
	defer rn.end()
	var lps []chatLogprobContent
	finish := func() {
		part := outputText{Type: "output_text", Text: c.text.String(), Annotations: []any{}, Logprobs: lps}
		resp.Output = []responseMessage{{Type: "message", ID: msgID, Status: "completed", Role: "assistant", Content: []outputText{part}}}
		resp.Status = "completed"
		u := &responseUsage{InputTokens: c.plan.tokens, OutputTokens: c.done, TotalTokens: c.plan.tokens + c.done}
		u.InputTokensDetails.CachedTokens = rn.cached
		resp.Usage = u
	}
	store := req.Store == nil || *req.Store
	save := func() {
		if store {
			history.WriteString(c.text.String())
			s.stored.put(&storedResponse{resp: *resp, items: in.items, history: history.String()})
		}
	}
	if req.Stream {
		if s.streamResponse(w, rn, c, resp, msgID, logprobs, func(st step) {
			if logprobs {
				lps = append(lps, chatLogprobOf(st))
			}
		}, finish) {
			save()
		}
		return
	}
	if !generateSteps(rn, []*choiceState{c}, c.plan.gen, func(_ *choiceState, st step) error {
		if logprobs {
			lps = append(lps, chatLogprobOf(st))
		}
		return nil
	}) {
		return
	}
	finish()
	save()
	writeJSON(w, http.StatusOK, resp)
}

// streamResponse sends the events of a Responses stream, as vLLM orders
// them: response.created and response.in_progress at once, the output
// item and its content part opened with the first token, a delta per
// token, then the closing events and response.completed with the whole
// response; no [DONE]. onToken sees each token before its event, finish
// completes resp after the last. It returns whether the stream was sent
// to the end.
func (s *Server) streamResponse(w http.ResponseWriter, rn *run, c *choiceState, resp *responseObject, msgID string, logprobs bool, onToken func(step), finish func()) bool {
	sse := newSSE(w, "data: ")
	seq := 0
	head := func(typ string) eventHead {
		h := eventHead{Type: typ, SequenceNumber: seq}
		seq++
		return h
	}
	snapshot := func() *responseObject {
		cp := *resp
		return &cp
	}
	send := func(h eventHead, v any) bool {
		if err := sse.named(h.Type, v); err != nil {
			rn.cancel()
			return false
		}
		return true
	}
	for _, typ := range []string{"response.created", "response.in_progress"} {
		if h := head(typ); !send(h, responseEvent{eventHead: h, Response: snapshot()}) {
			return false
		}
	}
	var deltaLPs []deltaLogprob
	opened := false
	open := func() error {
		opened = true
		item := responseMessage{Type: "message", ID: msgID, Status: "in_progress", Role: "assistant", Content: []outputText{}}
		h := head("response.output_item.added")
		if err := sse.named(h.Type, outputItemEvent{eventHead: h, Item: item}); err != nil {
			return err
		}
		var lp []chatLogprobContent
		if logprobs {
			lp = []chatLogprobContent{}
		}
		h = head("response.content_part.added")
		return sse.named(h.Type, contentPartEvent{eventHead: h, ItemID: msgID,
			Part: outputText{Type: "output_text", Text: "", Annotations: []any{}, Logprobs: lp}})
	}
	ok := generateSteps(rn, []*choiceState{c}, c.plan.gen, func(_ *choiceState, st step) error {
		if !opened {
			if err := open(); err != nil {
				return err
			}
		}
		onToken(st)
		lp := []deltaLogprob{}
		if logprobs {
			lp = []deltaLogprob{deltaLogprobOf(st)}
			deltaLPs = append(deltaLPs, lp[0])
		}
		h := head("response.output_text.delta")
		return sse.named(h.Type, textDeltaEvent{eventHead: h, ItemID: msgID, Delta: st.text, Logprobs: lp})
	})
	if !ok {
		return false
	}
	if !opened {
		if err := open(); err != nil {
			rn.cancel()
			return false
		}
	}
	finish()
	item := resp.Output[0]
	if deltaLPs == nil {
		deltaLPs = []deltaLogprob{}
	}
	h := head("response.output_text.done")
	if !send(h, textDoneEvent{eventHead: h, ItemID: msgID, Text: item.Content[0].Text, Logprobs: deltaLPs}) {
		return false
	}
	h = head("response.content_part.done")
	if !send(h, contentPartEvent{eventHead: h, ItemID: msgID, Part: item.Content[0]}) {
		return false
	}
	h = head("response.output_item.done")
	if !send(h, outputItemEvent{eventHead: h, Item: item}) {
		return false
	}
	h = head("response.completed")
	return send(h, responseEvent{eventHead: h, Response: snapshot()})
}

// handleGetResponse serves GET /v1/responses/{id}: the stored response.
func (s *Server) handleGetResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sr, ok := s.stored.get(id)
	if !ok {
		writeOpenAIError(w, responseNotFound(id, ""))
		return
	}
	writeJSON(w, http.StatusOK, sr.resp)
}

// handleDeleteResponse serves DELETE /v1/responses/{id}, as OpenAI does.
func (s *Server) handleDeleteResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.stored.remove(id) {
		writeOpenAIError(w, responseNotFound(id, ""))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": "response", "deleted": true})
}

// handleCancelResponse serves POST /v1/responses/{id}/cancel. Only a
// background response can be cancelled, and the simulator runs none: a
// stored response is always complete, and vLLM answers a request to
// cancel one with this 400.
func (s *Server) handleCancelResponse(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, ok := s.stored.get(id); !ok {
		writeOpenAIError(w, responseNotFound(id, ""))
		return
	}
	writeOpenAIError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error",
		msg: "Cannot cancel a synchronous response."})
}

// inputItemList is OpenAI's list of a response's input items.
type inputItemList struct {
	Object  string            `json:"object"`
	Data    []json.RawMessage `json:"data"`
	FirstID *string           `json:"first_id"`
	LastID  *string           `json:"last_id"`
	HasMore bool              `json:"has_more"`
}

// handleInputItems serves GET /v1/responses/{id}/input_items with OpenAI's
// query parameters order (desc by default), limit (20 by default, 1 to
// 100) and after (an item id).
func (s *Server) handleInputItems(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sr, ok := s.stored.get(id)
	if !ok {
		writeOpenAIError(w, responseNotFound(id, ""))
		return
	}
	q := r.URL.Query()
	items := append([]json.RawMessage{}, sr.items...)
	switch q.Get("order") {
	case "", "desc":
		slices.Reverse(items)
	case "asc":
	default:
		writeOpenAIError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "order",
			msg: "order must be asc or desc, got " + strconv.Quote(q.Get("order")) + "."})
		return
	}
	limit := 20
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			writeOpenAIError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "limit",
				msg: "limit must be an integer in [1, 100], got " + strconv.Quote(l) + "."})
			return
		}
		limit = n
	}
	ids := make([]string, len(items))
	for i, it := range items {
		var v struct {
			ID string `json:"id"`
		}
		json.Unmarshal(it, &v)
		ids[i] = v.ID
	}
	if after := q.Get("after"); after != "" {
		i := slices.Index(ids, after)
		if i < 0 {
			writeOpenAIError(w, &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "after",
				msg: "No input item with id " + strconv.Quote(after) + "."})
			return
		}
		items, ids = items[i+1:], ids[i+1:]
	}
	out := inputItemList{Object: "list", Data: items, HasMore: len(items) > limit}
	if len(items) > limit {
		out.Data, ids = items[:limit], ids[:limit]
	}
	if len(ids) > 0 {
		out.FirstID, out.LastID = &ids[0], &ids[len(ids)-1]
	}
	writeJSON(w, http.StatusOK, out)
}
