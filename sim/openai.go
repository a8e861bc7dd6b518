package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// apiError is a refusal of a request, before any output.
type apiError struct {
	status int
	msg    string
	// typ, when set, is the error type instead of the one the route
	// derives from the status; param names the request field at fault.
	typ, param string
}

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// vllmError is vLLM's error body (vllm/entrypoints/openai/engine/protocol.py,
// ErrorResponse holding ErrorInfo). vLLM up to about v0.10 sent the same
// fields flat with "object": "error"; the nested form is also what OpenAI
// sends and what the OpenAI SDKs read.
type vllmError struct {
	Error vllmErrorInfo `json:"error"`
}

type vllmErrorInfo struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// failOpenAI answers e in vLLM's format and counts the error.
func (s *Server) failOpenAI(w http.ResponseWriter, e *apiError) {
	s.errors.Add(1)
	writeOpenAIError(w, e)
}

// writeOpenAIError answers e in vLLM's format without counting it, for the
// routes that are not inference requests.
func writeOpenAIError(w http.ResponseWriter, e *apiError) {
	typ := "BadRequestError"
	switch e.status {
	case http.StatusNotFound:
		typ = "NotFoundError"
	case http.StatusInternalServerError:
		typ = "InternalServerError"
	}
	if e.typ != "" {
		typ = e.typ
	}
	var param *string
	if e.param != "" {
		param = &e.param
	}
	writeJSON(w, e.status, vllmError{vllmErrorInfo{Message: e.msg, Type: typ, Param: param, Code: e.status}})
}

// errSimulated is the error ErrorRate draws.
var errSimulated = &apiError{status: http.StatusInternalServerError, msg: "simulated backend error (error_rate)"}

// decodeOpenAI counts an OpenAI request, reads and decodes its body into
// req, a pointer, and checks the model it names, which model reads from
// req; on failure it answers with vLLM's error body and returns ok false.
func decodeOpenAI(s *Server, w http.ResponseWriter, r *http.Request, req any, model func() string) (body []byte, ok bool) {
	s.requests.Add(1)
	body, err := readBody(w, r)
	if err != nil {
		s.failOpenAI(w, bodyError(err))
		return nil, false
	}
	if err := json.Unmarshal(body, req); err != nil {
		s.failOpenAI(w, bodyError(err))
		return nil, false
	}
	if e := s.checkModel(model()); e != nil {
		s.failOpenAI(w, e)
		return nil, false
	}
	return body, true
}

// bodyError maps a failure to read or decode a request body.
func bodyError(err error) *apiError {
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return &apiError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", mb.Limit)}
	}
	return badRequest("%s", describeJSONError(err))
}

// describeJSONError turns encoding/json errors into messages that name the
// offending field.
func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON body: %v (at byte %d)", se, se.Offset)
	case errors.As(err, &te) && te.Field != "":
		return fmt.Sprintf("%s: expected %s, got JSON %s", te.Field, jsonKind(te.Type), te.Value)
	case errors.As(err, &te):
		return "request body must be a JSON object"
	}
	return "invalid JSON body: " + err.Error()
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

func (s *Server) checkModel(model string) *apiError {
	if model == "" || s.anyModel || model == s.model || slices.Contains(s.adapters, model) {
		return nil
	}
	return &apiError{status: http.StatusNotFound, msg: fmt.Sprintf("The model `%s` does not exist.", model)}
}

// servedName is the model a response names for a request that named model:
// the adapter it named, else the base model, as vLLM answers.
func (s *Server) servedName(model string) string {
	if model != "" && (s.anyModel || slices.Contains(s.adapters, model)) {
		return model
	}
	return s.model
}

// streamOptions is OpenAI's stream_options. As in vLLM, include_usage
// defaults to true once stream_options is given.
type streamOptions struct {
	IncludeUsage         *bool `json:"include_usage"`
	ContinuousUsageStats bool  `json:"continuous_usage_stats"`
}

func (o *streamOptions) includeUsage() bool {
	return o != nil && (o.IncludeUsage == nil || *o.IncludeUsage)
}

func (o *streamOptions) continuous() bool { return o.includeUsage() && o.ContinuousUsageStats }

// usageInfo is vLLM's UsageInfo, in its field order.
type usageInfo struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// PromptTokensDetails is vLLM's under --enable-prompt-tokens-details:
	// set whenever prefix caching is on, absent when it is off.
	PromptTokensDetails *promptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

type promptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

func newUsage(prompt, completion int) *usageInfo {
	return &usageInfo{PromptTokens: prompt, TotalTokens: prompt + completion, CompletionTokens: completion}
}

// usage is the request's usage after completion tokens, with the cached
// prompt tokens when prefix caching is on.
func (r *run) usage(prompt, completion int) *usageInfo {
	u := newUsage(prompt, completion)
	if r.k.PrefixCacheBlocks > 0 {
		u.PromptTokensDetails = &promptTokensDetails{CachedTokens: r.cached}
	}
	return u
}

// sampling is what the common request fields ask for.
type sampling struct {
	n         int
	maxTokens *int
	stream    bool
	opts      *streamOptions
	// logprobs says whether each generated token comes with its logprobs.
	logprobs bool
	// topK is the number of most likely tokens to list per position.
	topK int
	// promptK is prompt_logprobs, -1 when not asked.
	promptK int
	// tokenIDs: logprobs name tokens "token_id:<id>" (vLLM's
	// return_tokens_as_token_ids).
	tokenIDs bool
}

// checkCommon validates the fields chat and completions share, with vLLM's
// messages where vLLM has one.
func checkCommon(n, maxTokens, promptLogprobs *int, stream bool, opts *streamOptions) (sampling, *apiError) {
	sp := sampling{n: 1, maxTokens: maxTokens, stream: stream, opts: opts, promptK: -1}
	if n != nil {
		if *n < 1 {
			return sp, badRequest("n must be at least 1, got %d.", *n)
		}
		sp.n = *n
	}
	if maxTokens != nil && *maxTokens < 1 {
		return sp, badRequest("max_tokens must be at least 1, got %d.", *maxTokens)
	}
	if opts != nil && !stream {
		return sp, badRequest("Stream options can only be defined when `stream=True`.")
	}
	if promptLogprobs != nil {
		switch {
		case stream:
			return sp, badRequest("`prompt_logprobs` are not available when `stream=True`.")
		case *promptLogprobs < 0:
			return sp, badRequest("`prompt_logprobs` must be a positive value.")
		case *promptLogprobs > maxTopLogprobs:
			return sp, badRequest("Requested prompt logprobs of %d, which is greater than max allowed: %d", *promptLogprobs, maxTopLogprobs)
		}
		sp.promptK = *promptLogprobs
	}
	return sp, nil
}

// checkLogprobs validates the logprobs a request asks for: logprobs says
// whether it asks for any, k (nil when not given) how many alternatives per
// token, named field in the request; vLLM's messages.
func (sp *sampling) checkLogprobs(logprobs bool, field string, k *int) *apiError {
	sp.logprobs = logprobs
	if k == nil {
		return nil
	}
	switch {
	case *k < 0:
		return badRequest("`%s` must be a positive value.", field)
	case !logprobs && *k > 0:
		return badRequest("when using `%s`, `logprobs` must be set to true.", field)
	case *k > maxTopLogprobs:
		return badRequest("Requested sample logprobs of %d, which is greater than max allowed: %d", *k, maxTopLogprobs)
	}
	sp.topK = *k
	return nil
}

// choicePlan is the length and finish reason of the choices of one prompt.
type choicePlan struct {
	prompt promptText
	tokens int // prompt tokens
	gen    int
	finish string
}

// plan checks every prompt against the context length and sizes its
// choices: max_tokens if given (finish "length"), else OutputTokens (finish
// "stop"), cut at the context length (finish "length").
func plan(k Knobs, prompts []promptText, sp sampling) ([]choicePlan, *apiError) {
	if len(prompts)*sp.n > maxChoices {
		return nil, badRequest("n times the number of prompts must be at most %d in the simulator, got %d.", maxChoices, len(prompts)*sp.n)
	}
	out := make([]choicePlan, len(prompts))
	total := 0
	for i, p := range prompts {
		c := choicePlan{prompt: p, tokens: p.tokens()}
		limit := k.MaxModelLen
		if sp.maxTokens != nil {
			c.gen, c.finish = *sp.maxTokens, "length"
			if limit > 0 && c.tokens+c.gen > limit {
				// vLLM's serving_engine.py _validate_input, shared by chat
				// and completions.
				return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
					limit, c.tokens+c.gen, c.tokens, c.gen)
			}
		} else {
			c.gen, c.finish = k.OutputTokens, "stop"
			if limit > 0 {
				if c.tokens >= limit {
					return nil, badRequest("This model's maximum context length is %d tokens. However, you requested %d tokens in the messages, Please reduce the length of the messages.",
						limit, c.tokens)
				}
				if c.tokens+c.gen > limit {
					c.gen, c.finish = limit-c.tokens, "length"
				}
			}
		}
		if c.gen > maxGenTokens {
			return nil, badRequest("max_tokens must be at most %d in the simulator, got %d.", maxGenTokens, c.gen)
		}
		if sp.promptK >= 0 && c.tokens > maxPromptLogprobTokens {
			return nil, badRequest("prompt_logprobs needs a prompt of at most %d tokens in the simulator, got %d.", maxPromptLogprobTokens, c.tokens)
		}
		total += c.gen * sp.n
		out[i] = c
	}
	if total > maxTotalGenTokens {
		return nil, badRequest("the request asks for %d tokens in all; the simulator generates at most %d per request.", total, maxTotalGenTokens)
	}
	if sp.topK > 0 && total*(sp.topK+1) > 8*maxTotalGenTokens {
		return nil, badRequest("the request asks for %d logprobs in all; the simulator returns at most %d per request.", total*(sp.topK+1), 8*maxTotalGenTokens)
	}
	return out, nil
}

// choiceState is one choice being generated.
type choiceState struct {
	index  int
	plan   *choicePlan
	seq    *sequence
	done   int
	text   strings.Builder
	offset int // characters so far, for legacy text_offset
}

func startChoices(m lm, plans []choicePlan, n, k int) []*choiceState {
	out := make([]*choiceState, 0, len(plans)*n)
	for i := range plans {
		ctx := newContext(plans[i].prompt.text)
		for j := range n {
			out = append(out, &choiceState{index: len(out), plan: &plans[i], seq: m.sequence(ctx, j, k)})
		}
	}
	return out
}

func maxGen(plans []choicePlan) int {
	n := 0
	for _, p := range plans {
		n = max(n, p.gen)
	}
	return n
}

// generateSteps paces the choices: at step i it waits for token i and calls
// emit for every choice that still has a token to produce. It returns false
// when the client went away or emit failed (the client went away too).
func generateSteps(rn *run, choices []*choiceState, steps int, emit func(c *choiceState, st step) error) bool {
	for i := range steps {
		if !rn.wait(i) {
			return false
		}
		produced := 0
		for _, c := range choices {
			if c.done >= c.plan.gen {
				continue
			}
			st := c.seq.next()
			c.done++
			produced++
			if err := emit(c, st); err != nil {
				rn.generated(produced)
				rn.cancel()
				return false
			}
			c.text.WriteString(st.text)
			c.offset += utf8.RuneCountInString(st.text)
		}
		rn.generated(produced)
	}
	for _, c := range choices {
		rn.finished(c.plan.finish)
	}
	return true
}

// --- logprob shapes -------------------------------------------------------

// chatLogprob is vLLM's ChatCompletionLogProb.
type chatLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// chatLogprobContent is vLLM's ChatCompletionLogProbsContent.
type chatLogprobContent struct {
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	Bytes       []int         `json:"bytes"`
	TopLogprobs []chatLogprob `json:"top_logprobs"`
}

// chatLogprobs is vLLM's ChatCompletionLogProbs.
type chatLogprobs struct {
	Content []chatLogprobContent `json:"content"`
}

// add appends token st with every alternative the step holds; chat logprobs
// have no offsets.
func (l *chatLogprobs) add(st step, _, _ int) {
	l.Content = append(l.Content, chatLogprobOf(st))
}

func tokenBytes(s string) []int {
	out := make([]int, len(s))
	for i := range len(s) {
		out[i] = int(s[i])
	}
	return out
}

func chatLogprobOf(st step) chatLogprobContent {
	top := make([]chatLogprob, len(st.top))
	for i, c := range st.top {
		top[i] = chatLogprob{Token: c.text, Logprob: c.logprob, Bytes: tokenBytes(c.text)}
	}
	return chatLogprobContent{Token: st.text, Logprob: st.logprob, Bytes: tokenBytes(st.text), TopLogprobs: top}
}

// completionLogprobs is vLLM's CompletionLogProbs, in its field order.
type completionLogprobs struct {
	TextOffset    []int       `json:"text_offset"`
	TokenLogprobs []float64   `json:"token_logprobs"`
	Tokens        []string    `json:"tokens"`
	TopLogprobs   []floatDict `json:"top_logprobs"`
}

// add appends token st, which starts at character offset, with its k most
// likely alternatives.
func (l *completionLogprobs) add(st step, offset, k int) {
	l.TextOffset = append(l.TextOffset, offset)
	l.TokenLogprobs = append(l.TokenLogprobs, st.logprob)
	l.Tokens = append(l.Tokens, st.text)
	l.TopLogprobs = append(l.TopLogprobs, topDict(st, k))
}

// topDict is the legacy {token: logprob} of the k most likely tokens, plus
// the generated token when it is not among them, as vLLM does.
func topDict(st step, k int) floatDict {
	d := make(floatDict, 0, k+1)
	seen := false
	for _, c := range st.top[:min(k, len(st.top))] {
		d = append(d, floatEntry{c.text, c.logprob})
		seen = seen || c.id == st.id
	}
	if !seen {
		d = append(d, floatEntry{st.text, st.logprob})
	}
	return d
}

// floatDict is a JSON object of string to number that keeps its order
// (rank order, as Python dicts keep insertion order).
type floatDict []floatEntry

type floatEntry struct {
	key string
	val float64
}

// MarshalJSON writes the entries in order.
func (d floatDict) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := marshal(e.key)
		v, err := marshal(e.val)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// promptLogprob is vLLM's Logprob as prompt_logprobs lists it.
type promptLogprob struct {
	Logprob      float64 `json:"logprob"`
	Rank         int     `json:"rank"`
	DecodedToken string  `json:"decoded_token"`
}

// promptDict maps token ids to their Logprob: the prompt's own token first,
// then the most likely tokens in rank order.
type promptDict []promptDictEntry

type promptDictEntry struct {
	id int
	lp promptLogprob
}

// promptLogprobList is vLLM's prompt_logprobs: null for the first prompt
// token, then a promptDict per token; a nil list is null. It writes itself
// by hand: a long prompt lists thousands of positions, and encoding/json's
// reflection and per-value compaction made it most of the simulator's CPU
// under teacher forcing.
type promptLogprobList []promptDict

func (l promptLogprobList) MarshalJSON() ([]byte, error) {
	if l == nil {
		return []byte("null"), nil
	}
	// About 64 bytes a listed token: a guess at the size, not a bound.
	per := 8
	if n := len(l); n > 0 {
		per += len(l[n-1]) * 64
	}
	b := make([]byte, 0, 64+len(l)*per)
	b = append(b, '[')
	for i, d := range l {
		if i > 0 {
			b = append(b, ',')
		}
		if d == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '{')
		for j, e := range d {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = strconv.AppendInt(b, int64(e.id), 10)
			b = append(b, `":{"logprob":`...)
			var err error
			if b, err = appendJSONFloat(b, e.lp.Logprob); err != nil {
				return nil, err
			}
			b = append(b, `,"rank":`...)
			b = strconv.AppendInt(b, int64(e.lp.Rank), 10)
			b = append(b, `,"decoded_token":`...)
			b = appendJSONString(b, e.lp.DecodedToken)
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// appendJSONFloat appends f as encoding/json writes a float64.
func appendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("sim: unsupported float %v", f)
	}
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		// e-09 → e-9, as encoding/json does.
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b, nil
}

// appendJSONString appends s as marshal writes a string (no HTML
// escaping): as it is when nothing in it needs escaping or replacing.
func appendJSONString(b []byte, s string) []byte {
	plain := utf8.ValidString(s) && !strings.ContainsAny(s, "\u2028\u2029")
	for i := 0; plain && i < len(s); i++ {
		plain = s[i] >= 0x20 && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		b = append(b, '"')
		b = append(b, s...)
		return append(b, '"')
	}
	q, _ := marshal(s) // a string always marshals
	return append(b, q...)
}

// promptLogprobsOf renders vLLM's prompt_logprobs of prompt p with its k
// most likely tokens at each position.
func promptLogprobsOf(m lm, p promptText, k int) promptLogprobList {
	scores := m.promptScores(p, k)
	out := make(promptLogprobList, len(scores))
	for i, st := range scores {
		if i == 0 {
			continue
		}
		d := promptDict{{st.id, promptLogprob{st.logprob, st.rank, st.text}}}
		for r, c := range st.top {
			if c.id != st.id {
				d = append(d, promptDictEntry{c.id, promptLogprob{c.logprob, r + 1, c.text}})
			}
		}
		out[i] = d
	}
	return out
}

// --- /v1/models -----------------------------------------------------------

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen *int              `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// handleModels lists the base model, then the LoRA adapters as vLLM's
// show_available_models does: with the base model as parent, the
// adapter's path as root and no max_model_len.
func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	created := s.createdAt()
	var maxLen *int
	if l := s.Knobs().MaxModelLen; l > 0 {
		maxLen = &l
	}
	perm := func(name string) []modelPermission {
		return []modelPermission{{
			ID:     "modelperm-" + hexID(requestRNG(s.seed, []byte(name))),
			Object: "model_permission", Created: created,
			AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*",
		}}
	}
	cards := []modelCard{{
		ID: s.model, Object: "model", Created: created, OwnedBy: "vllm", Root: s.model,
		MaxModelLen: maxLen, Permission: perm(s.model),
	}}
	for _, a := range s.adapters {
		cards = append(cards, modelCard{
			ID: a, Object: "model", Created: created, OwnedBy: "vllm", Root: loraPath(a),
			Parent: &s.model, Permission: perm(a),
		})
	}
	writeJSON(w, http.StatusOK, modelList{Object: "list", Data: cards})
}

// loraPath is the local path /v1/models gives as an adapter's root: the
// simulator loads none, so it is made up, shaped as vLLM's
// --lora-modules name=path would give it.
func loraPath(name string) string { return "/adapters/" + name }
