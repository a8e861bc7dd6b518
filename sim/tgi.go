package sim

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// maxTopNTokens is TGI's default --max-top-n-tokens.
const maxTopNTokens = 5

type tgiRequest struct {
	Inputs     *string        `json:"inputs"`
	Parameters *tgiParameters `json:"parameters"`
}

// tgiParameters holds the generation parameters the simulator reads.
type tgiParameters struct {
	MaxNewTokens        *int    `json:"max_new_tokens"`
	Details             bool    `json:"details"`
	DecoderInputDetails bool    `json:"decoder_input_details"`
	TopNTokens          *int    `json:"top_n_tokens"`
	Seed                *uint64 `json:"seed"`
}

// tgiToken is TGI's Token.
type tgiToken struct {
	ID      int     `json:"id"`
	Text    string  `json:"text"`
	Logprob float64 `json:"logprob"`
	Special bool    `json:"special"`
}

// tgiPrefillToken is TGI's PrefillToken; the first has no logprob.
type tgiPrefillToken struct {
	ID      int      `json:"id"`
	Text    string   `json:"text"`
	Logprob *float64 `json:"logprob"`
}

// tgiDetails is TGI's Details, in the router's field order.
type tgiDetails struct {
	FinishReason    string            `json:"finish_reason"`
	GeneratedTokens int               `json:"generated_tokens"`
	Seed            *uint64           `json:"seed"`
	Prefill         []tgiPrefillToken `json:"prefill"`
	Tokens          []tgiToken        `json:"tokens"`
	TopTokens       [][]tgiToken      `json:"top_tokens,omitempty"`
}

type tgiGenerateResponse struct {
	GeneratedText string      `json:"generated_text"`
	Details       *tgiDetails `json:"details,omitempty"`
}

type tgiStreamDetails struct {
	FinishReason    string  `json:"finish_reason"`
	GeneratedTokens int     `json:"generated_tokens"`
	Seed            *uint64 `json:"seed"`
	InputLength     int     `json:"input_length"`
}

// tgiStreamResponse is TGI's StreamResponse.
type tgiStreamResponse struct {
	Index         int               `json:"index"`
	Token         tgiToken          `json:"token"`
	TopTokens     []tgiToken        `json:"top_tokens,omitempty"`
	GeneratedText *string           `json:"generated_text"`
	Details       *tgiStreamDetails `json:"details"`
}

// tgiError is TGI's ErrorResponse.
type tgiError struct {
	Error     string `json:"error"`
	ErrorType string `json:"error_type"`
}

// tgiValidation is an input validation failure: HTTP 422 with TGI's
// "Input validation error: " prefix (router/src/infer.rs, validation.rs).
func tgiValidation(format string, args ...any) *apiError {
	return &apiError{status: http.StatusUnprocessableEntity, msg: "Input validation error: " + fmt.Sprintf(format, args...)}
}

func (s *Server) failTGI(w http.ResponseWriter, e *apiError) {
	s.errors.Add(1)
	typ := "validation"
	if e.status >= 500 {
		typ = "generation"
	}
	writeJSON(w, e.status, tgiError{Error: e.msg, ErrorType: typ})
}

var errTGISimulated = &apiError{status: http.StatusInternalServerError, msg: "Request failed during generation: simulated backend error (error_rate)"}

// tgiJob is a validated TGI request.
type tgiJob struct {
	m      lm // the simulated model, under the request's knobs
	body   []byte
	p      tgiParameters
	prompt promptText
	tokens int
	gen    int
	finish string
	topN   int
}

// parseTGI validates a request as TGI's router does, in its order.
func (s *Server) parseTGI(w http.ResponseWriter, r *http.Request, k Knobs, stream bool) (*tgiJob, *apiError) {
	body, err := readBody(w, r)
	if err != nil {
		e := bodyError(err)
		if e.status == http.StatusBadRequest {
			e.status = http.StatusUnprocessableEntity
		}
		return nil, e
	}
	var req tgiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, &apiError{status: http.StatusUnprocessableEntity, msg: "Failed to deserialize the JSON body into the target type: " + describeJSONError(err)}
	}
	if req.Inputs == nil {
		return nil, &apiError{status: http.StatusUnprocessableEntity, msg: "Failed to deserialize the JSON body into the target type: missing field `inputs`"}
	}
	j := &tgiJob{body: body, prompt: promptText{text: *req.Inputs}}
	if req.Parameters != nil {
		j.p = *req.Parameters
	}
	if stream && j.p.DecoderInputDetails {
		return nil, tgiValidation("`decoder_input_details` == true is not supported when streaming tokens")
	}
	if n := j.p.TopNTokens; n != nil {
		if *n < 0 || *n > maxTopNTokens {
			return nil, tgiValidation("`top_n_tokens` must be >= 0 and <= %d. Given: %d", maxTopNTokens, *n)
		}
		j.topN = *n
	}
	if m := j.p.MaxNewTokens; m != nil && *m < 1 {
		return nil, tgiValidation("`max_new_tokens` must be strictly positive")
	}
	if *req.Inputs == "" {
		return nil, tgiValidation("`inputs` cannot be empty")
	}
	j.tokens = j.prompt.tokens()
	limit := k.MaxModelLen
	if m := j.p.MaxNewTokens; m != nil {
		j.gen, j.finish = *m, "length"
		if limit > 0 && j.tokens+j.gen > limit {
			return nil, tgiValidation("`inputs` tokens + `max_new_tokens` must be <= %d. Given: %d `inputs` tokens and %d `max_new_tokens`", limit, j.tokens, j.gen)
		}
	} else {
		j.gen, j.finish = k.OutputTokens, "eos_token"
		if limit > 0 && j.tokens < limit && j.tokens+j.gen > limit {
			j.gen, j.finish = limit-j.tokens, "length"
		}
	}
	if limit > 0 && j.tokens > limit-1 {
		return nil, tgiValidation("`inputs` must have less than %d tokens. Given: %d", limit-1, j.tokens)
	}
	if j.gen > maxGenTokens {
		return nil, tgiValidation("`max_new_tokens` must be <= %d. Given: %d", maxGenTokens, j.gen)
	}
	if j.p.DecoderInputDetails && j.tokens > maxPromptLogprobTokens {
		return nil, tgiValidation("`decoder_input_details` needs at most %d `inputs` tokens in the simulator. Given: %d", maxPromptLogprobTokens, j.tokens)
	}
	return j, nil
}

func toTGIToken(c candidate) tgiToken {
	return tgiToken{ID: c.id, Text: c.text, Logprob: c.logprob}
}

func topTGITokens(st step) []tgiToken {
	out := make([]tgiToken, len(st.top))
	for i, c := range st.top {
		out[i] = toTGIToken(c)
	}
	return out
}

// startTGI counts and checks a TGI request, draws the error decision and
// admits it under max_num_seqs. It returns a nil run when it answered
// (an error, or a client that left while waiting).
func (s *Server) startTGI(w http.ResponseWriter, r *http.Request, stream bool) (*tgiJob, []*choiceState, *run) {
	s.requests.Add(1)
	k := s.Knobs()
	j, e := s.parseTGI(w, r, k, stream)
	if e != nil {
		s.failTGI(w, e)
		return nil, nil, nil
	}
	if s.failNext(k.ErrorRate) {
		s.failTGI(w, errTGISimulated)
		return nil, nil, nil
	}
	j.m = newLM(s.seed, k)
	pl := choicePlan{prompt: j.prompt, tokens: j.tokens, gen: j.gen, finish: j.finish}
	choices := startChoices(j.m, []choicePlan{pl}, 1, j.topN)
	// TGI has no prompt_logprobs; decoder_input_details lists the prompt
	// tokens' logprobs, which a cached prefix would lack.
	ps := onePrompt(j.prompt, j.tokens, "")
	ps.noRead = j.p.DecoderInputDetails
	return j, choices, s.begin(r.Context(), k, ps)
}

func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request) {
	j, choices, rn := s.startTGI(w, r, false)
	if rn == nil {
		return
	}
	defer rn.end()
	var details *tgiDetails
	if j.p.Details {
		details = &tgiDetails{FinishReason: j.finish, GeneratedTokens: j.gen, Seed: j.p.Seed,
			Prefill: []tgiPrefillToken{}, Tokens: make([]tgiToken, 0, j.gen)}
	}
	ok := generateSteps(rn, choices, j.gen, func(_ *choiceState, st step) error {
		if details != nil {
			details.Tokens = append(details.Tokens, toTGIToken(st.candidate))
			if j.topN > 0 {
				details.TopTokens = append(details.TopTokens, topTGITokens(st))
			}
		}
		return nil
	})
	if !ok {
		return
	}
	if details != nil && j.p.DecoderInputDetails {
		for i, st := range j.m.promptScores(j.prompt, 0) {
			t := tgiPrefillToken{ID: st.id, Text: st.text}
			if i > 0 {
				lp := st.logprob
				t.Logprob = &lp
			}
			details.Prefill = append(details.Prefill, t)
		}
	}
	writeJSON(w, http.StatusOK, tgiGenerateResponse{GeneratedText: choices[0].text.String(), Details: details})
}

// handleGenerateStream sends an event per token, numbered from 1 as TGI
// numbers them; the last carries generated_text, and details when asked.
func (s *Server) handleGenerateStream(w http.ResponseWriter, r *http.Request) {
	j, choices, rn := s.startTGI(w, r, true)
	if rn == nil {
		return
	}
	defer rn.end()
	sse := newSSE(w, "data:")
	generateSteps(rn, choices, j.gen, func(c *choiceState, st step) error {
		ev := tgiStreamResponse{Index: c.done, Token: toTGIToken(st.candidate)}
		if j.topN > 0 {
			ev.TopTokens = topTGITokens(st)
		}
		if c.done == j.gen {
			text := c.text.String() + st.text
			ev.GeneratedText = &text
			if j.p.Details {
				ev.Details = &tgiStreamDetails{FinishReason: j.finish, GeneratedTokens: j.gen, Seed: j.p.Seed, InputLength: j.tokens}
			}
		}
		return sse.event(ev)
	})
}

// tgiInfo is TGI's Info.
type tgiInfo struct {
	ModelID               string  `json:"model_id"`
	ModelSHA              *string `json:"model_sha"`
	ModelDtype            string  `json:"model_dtype"`
	ModelDeviceType       string  `json:"model_device_type"`
	ModelPipelineTag      string  `json:"model_pipeline_tag"`
	MaxConcurrentRequests int     `json:"max_concurrent_requests"`
	MaxBestOf             int     `json:"max_best_of"`
	MaxStopSequences      int     `json:"max_stop_sequences"`
	MaxInputTokens        int     `json:"max_input_tokens"`
	MaxTotalTokens        int     `json:"max_total_tokens"`
	ValidationWorkers     int     `json:"validation_workers"`
	MaxClientBatchSize    int     `json:"max_client_batch_size"`
	Router                string  `json:"router"`
	Version               string  `json:"version"`
	SHA                   *string `json:"sha"`
	DockerLabel           *string `json:"docker_label"`
}

func (s *Server) handleInfo(w http.ResponseWriter, _ *http.Request) {
	k := s.Knobs()
	total := k.MaxModelLen
	if total == 0 {
		total = maxGenTokens
	}
	writeJSON(w, http.StatusOK, tgiInfo{
		ModelID: s.model, ModelDtype: "torch.float16", ModelDeviceType: "cuda",
		ModelPipelineTag: "text-generation", MaxConcurrentRequests: k.MaxNumSeqs,
		MaxBestOf: 2, MaxStopSequences: 4, MaxInputTokens: total - 1, MaxTotalTokens: total,
		ValidationWorkers: 2, MaxClientBatchSize: 4, Router: "text-generation-router", Version: "vigil-sim",
	})
}
