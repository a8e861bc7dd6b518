package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Teacher forcing. The greedy walk compares two generations
// only up to their first disagreement, so top-1 agreement is 1 by
// construction and the positions that matter most are never seen. Teacher
// forcing scores the backend's own continuation with the reference, on the
// same context, at every position:
//
//  1. The continuation is the client's own response when its logprobs
//     name token ids, else one greedy shadow request to the backend with
//     logprobs, its top alternatives and vLLM's
//     "return_tokens_as_token_ids": every token comes back as
//     "token_id:<id>".
//  2. The reference renders and tokenizes the prompt itself (vLLM's
//     POST /tokenize, with the chat messages or the completion prompt), so
//     the chat template is the reference's.
//  3. The backend and the reference score prompt + continuation as token
//     ids, without generating, both at once: POST /v1/completions with the
//     ids as the prompt, max_tokens 1 and vLLM's "prompt_logprobs": k.
//     The continuation's positions are aligned by id, never by
//     re-tokenized text.
//
// Both sides are measured by one request each, sent together: the two
// distributions describe the two models at one moment. The continuation's
// own logprobs would not: they were drawn a whole generation earlier (the
// client's request, or the shadow one: seconds on a slow backend), so a
// change that reached both models in between (a redeployment, a
// simulator's knobs) was scored as divergence between them.
//
// The tokenize call costs no inference: the comparison adds one scoring
// request (a prefill) to each side and, unless the client's answer served,
// one generation to the backend. A backend that rejects or ignores
// return_tokens_as_token_ids or prompt_logprobs, or a reference without
// /tokenize or prompt_logprobs (TGI, OpenAI), falls back to the greedy
// walk, and is not asked again for forcingRetry; /admin/signals says which
// method ran.

// forcingRetry is how long a backend or reference that cannot take part in
// teacher forcing is left to the greedy walk before it is tried again.
const forcingRetry = 10 * time.Minute

// tokenIDMark is the prefix of vLLM's tokens under return_tokens_as_token_ids.
var tokenIDMark = []byte(`"token_id:`)

// HasTokenIDs reports whether a response's logprobs name token ids
// ("token_id:<id>", vLLM's return_tokens_as_token_ids): such a client
// answer's tokens can serve as the continuation of a teacher-forced
// comparison.
func HasTokenIDs(body []byte) bool { return bytes.Contains(body, tokenIDMark) }

// errCannotForce wraps why a comparison cannot be teacher-forced; the
// caller falls back to the greedy walk.
var errCannotForce = errors.New("teacher forcing unavailable")

// canForce reports whether teacher forcing is worth trying for the pair.
func (sh *Shadower) canForce(backend, ref *upstream.Backend) bool {
	now := time.Now()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return !now.Before(sh.unable[backend.Name]) && !now.Before(sh.unable[ref.Name])
}

// cannot records that b cannot take part in teacher forcing, and returns
// the error that makes the caller fall back.
func (sh *Shadower) cannot(b *upstream.Backend, why error) error {
	sh.mu.Lock()
	sh.unable[b.Name] = time.Now().Add(forcingRetry)
	delete(sh.ids, b.Name)
	sh.mu.Unlock()
	return fmt.Errorf("%w: %s: %w", errCannotForce, b.Name, why)
}

// NamesIDs reports whether backend's answers named token ids when a
// comparison asked it to: its clients' sampled requests may then ask for
// logprobs by id themselves, and the answer's tokens serve as the
// continuation.
func (sh *Shadower) NamesIDs(backend *upstream.Backend) bool {
	if sh == nil || backend == nil {
		return false
	}
	ref := sh.ref[backend.Name]
	if ref == nil {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.ids[backend.Name] && !time.Now().Before(sh.unable[ref.Name])
}

// Injection returns the members that ask a client's request of operation
// op for the comparison's logprobs (precision.top_logprobs alternatives),
// without and with return_tokens_as_token_ids, each starting with a comma.
func (sh *Shadower) Injection(op exchange.Operation) (plain, ids string) {
	k := strconv.Itoa(sh.cfg.TopLogprobs)
	plain = `,"logprobs":` + k
	if op == exchange.OpChat {
		plain = `,"logprobs":true,"top_logprobs":` + k
	}
	return plain, plain + `,"return_tokens_as_token_ids":true`
}

// force runs a teacher-forced comparison. An error wrapping errCannotForce
// means the pair (or this request) cannot be forced.
func (sh *Shadower) force(ctx context.Context, backend, ref *upstream.Backend, op exchange.Operation, body, shadow, answer []byte, auth string) (*exchange.Shadow, error) {
	var req struct {
		Model    json.RawMessage `json:"model"`
		Messages json.RawMessage `json:"messages"`
		Prompt   json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("shadow body: %w", err)
	}
	cont, ok := continuationIDs(op, answer)
	if !ok {
		b, err := withMember(shadow, "return_tokens_as_token_ids", "true")
		if err != nil {
			return nil, err
		}
		out, err := sh.post(ctx, backend, shadowPath[op], b, auth)
		if se := (*statusError)(nil); errors.As(err, &se) && se.status == http.StatusBadRequest {
			return nil, sh.cannot(backend, err)
		}
		if err != nil {
			return nil, err
		}
		if cont, ok = continuationIDs(op, out); !ok {
			return nil, sh.cannot(backend, errors.New("its logprobs do not name token ids (return_tokens_as_token_ids)"))
		}
		sh.mu.Lock()
		sh.ids[backend.Name] = true
		sh.mu.Unlock()
	}
	if len(cont) == 0 {
		return nil, fmt.Errorf("%s: no tokens generated", backend.Name)
	}
	// A client's answer may be long: its first max_tokens are compared.
	cont = cont[:min(len(cont), sh.cfg.MaxTokens)]
	prompt, err := sh.promptIDs(ctx, ref, op, req.Model, req.Messages, req.Prompt, auth)
	if err != nil {
		return nil, err
	}
	score, err := json.Marshal(struct {
		Model          json.RawMessage `json:"model"`
		Prompt         []int           `json:"prompt"`
		MaxTokens      int             `json:"max_tokens"`
		Temperature    int             `json:"temperature"`
		PromptLogprobs int             `json:"prompt_logprobs"`
	}{req.Model, append(prompt, cont...), 1, 0, sh.cfg.TopLogprobs})
	if err != nil {
		return nil, err
	}
	// Both sides at once (see the top of this file).
	var scored [2][]byte
	var errs [2]error
	var wg sync.WaitGroup
	for i, b := range []*upstream.Backend{backend, ref} {
		wg.Go(func() { scored[i], errs[i] = sh.score(ctx, b, score, auth) })
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return nil, err
	}
	return &exchange.Shadow{Backend: backend.Name, Reference: ref.Name, Operation: op, Method: exchange.ShadowTeacherForced,
		Time: time.Now(), BackendBody: scored[0], ReferenceBody: scored[1], PromptTokens: len(prompt), Continuation: cont}, nil
}

// score has b score a prompt of token ids with vLLM's prompt_logprobs.
func (sh *Shadower) score(ctx context.Context, b *upstream.Backend, body []byte, auth string) ([]byte, error) {
	scored, err := sh.post(ctx, b, "/v1/completions", body, auth)
	if se := (*statusError)(nil); errors.As(err, &se) && (se.status == http.StatusBadRequest || se.status == http.StatusNotFound) {
		return nil, sh.cannot(b, err)
	}
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(scored, []byte(`"prompt_logprobs":[`)) {
		return nil, sh.cannot(b, errors.New("its completions carry no prompt_logprobs"))
	}
	return scored, nil
}

// promptIDs returns the prompt's token ids as the reference renders and
// tokenizes it: a completion prompt given as ids is used as it is.
func (sh *Shadower) promptIDs(ctx context.Context, ref *upstream.Backend, op exchange.Operation, model, messages, prompt json.RawMessage, auth string) ([]int, error) {
	var tok any
	switch {
	case op == exchange.OpChat && len(messages) > 0:
		tok = struct {
			Model               json.RawMessage `json:"model"`
			Messages            json.RawMessage `json:"messages"`
			AddGenerationPrompt bool            `json:"add_generation_prompt"`
		}{model, messages, true}
	case op == exchange.OpCompletion && len(prompt) > 0 && prompt[0] == '"':
		tok = struct {
			Model  json.RawMessage `json:"model"`
			Prompt json.RawMessage `json:"prompt"`
		}{model, prompt}
	case op == exchange.OpCompletion && len(prompt) > 0 && prompt[0] == '[':
		var ids []int
		if err := json.Unmarshal(prompt, &ids); err == nil {
			return ids, nil
		}
		// A batch of prompts: the shadow compares the first choice only.
		return nil, fmt.Errorf("%w: a batch of prompts", errCannotForce)
	default:
		return nil, fmt.Errorf("%w: no prompt", errCannotForce)
	}
	b, err := json.Marshal(tok)
	if err != nil {
		return nil, err
	}
	out, err := sh.post(ctx, ref, "/tokenize", b, auth)
	if se := (*statusError)(nil); errors.As(err, &se) && (se.status == http.StatusBadRequest || se.status == http.StatusNotFound || se.status == http.StatusMethodNotAllowed) {
		return nil, sh.cannot(ref, err)
	}
	if err != nil {
		return nil, err
	}
	var r struct {
		Tokens []int `json:"tokens"`
	}
	if err := json.Unmarshal(out, &r); err != nil || len(r.Tokens) == 0 {
		return nil, sh.cannot(ref, fmt.Errorf("/tokenize answered no tokens: %.200s", out))
	}
	return r.Tokens, nil
}

// continuationIDs returns the token ids of the first choice of a
// non-streaming response whose logprobs name them ("token_id:<id>"), and
// whether every token did.
func continuationIDs(op exchange.Operation, body []byte) ([]int, bool) {
	if !bytes.Contains(body, tokenIDMark) {
		return nil, false
	}
	var tokens []string
	switch op {
	case exchange.OpChat:
		var r struct {
			Choices []struct {
				Logprobs *struct {
					Content []struct {
						Token string `json:"token"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if json.Unmarshal(body, &r) != nil || len(r.Choices) == 0 || r.Choices[0].Logprobs == nil {
			return nil, false
		}
		for _, c := range r.Choices[0].Logprobs.Content {
			tokens = append(tokens, c.Token)
		}
	case exchange.OpCompletion:
		var r struct {
			Choices []struct {
				Logprobs *struct {
					Tokens []string `json:"tokens"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if json.Unmarshal(body, &r) != nil || len(r.Choices) == 0 || r.Choices[0].Logprobs == nil {
			return nil, false
		}
		tokens = r.Choices[0].Logprobs.Tokens
	default:
		return nil, false
	}
	ids := make([]int, len(tokens))
	for i, t := range tokens {
		id, ok := tokenID(t)
		if !ok {
			return nil, false
		}
		ids[i] = id
	}
	return ids, true
}

// tokenID parses vLLM's "token_id:<id>".
func tokenID(tok string) (int, bool) {
	const prefix = "token_id:"
	if len(tok) <= len(prefix) || tok[:len(prefix)] != prefix {
		return 0, false
	}
	id, err := strconv.Atoi(tok[len(prefix):])
	return id, err == nil && id >= 0
}

// withMember returns the JSON object b with member name set to the raw
// value v.
func withMember(b []byte, name, v string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	m[name] = json.RawMessage(v)
	return json.Marshal(m)
}
