package precision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Teacher forcing: the reference scores the backend's own
// continuation, so that every position is compared on the same context,
// not only those before the two greedy sequences part. The backend's side
// is its response, whose tokens are vLLM's "token_id:<id>"; the
// reference's is vLLM's prompt_logprobs over prompt + continuation
// (gateway/shadow makes both requests).

// ParsePromptLogprobs returns the positions from index from on of the
// first choice's vLLM prompt_logprobs in a completions response: at each,
// the prompt's token as "token_id:<id>" with its logprob, and Top holding
// every listed token (the top-k, and the prompt's token when it ranks
// below them). TopK counts the listed tokens whose ranks run 1, 2, … without
// a gap: the server's top-k list.
func ParsePromptLogprobs(body []byte, from int) ([]Position, error) {
	var r struct {
		Choices []struct {
			PromptLogprobs []map[string]struct {
				Logprob *float64 `json:"logprob"`
				Rank    int      `json:"rank"`
			} `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("precision: scoring response: %w", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].PromptLogprobs == nil {
		return nil, errors.New("precision: scoring response has no prompt_logprobs")
	}
	pl := r.Choices[0].PromptLogprobs
	if from < 1 || from > len(pl) {
		return nil, fmt.Errorf("precision: prompt_logprobs has %d positions, the continuation starts at %d", len(pl), from)
	}
	out := make([]Position, 0, len(pl)-from)
	type ranked struct {
		alt  Alt
		rank int
	}
	var list []ranked
	for i := from; i < len(pl); i++ {
		pos := Position{Logprob: math.NaN()}
		list = list[:0]
		for id, e := range pl[i] {
			lp := usable(e.Logprob)
			if math.IsNaN(lp) {
				continue
			}
			list = append(list, ranked{Alt{"token_id:" + id, lp}, e.Rank})
		}
		// The top-k are the entries ranked 1, 2, … k; the prompt's own
		// token, listed too, may rank below them. Which entry is the
		// prompt's token is known from the backend's continuation
		// (alignForced).
		slices.SortFunc(list, func(a, b ranked) int { return a.rank - b.rank })
		for j, e := range list {
			pos.Top = append(pos.Top, e.alt)
			if e.rank == j+1 && pos.TopK == j {
				pos.TopK = j + 1
			}
		}
		out = append(out, pos)
	}
	return out, nil
}

// alignForced sets each reference position's token and logprob from the
// backend's continuation, which the reference scored: position i of the
// reference is the distribution the backend's token i was drawn from.
func alignForced(backend, reference []Position) error {
	if len(backend) < len(reference) {
		return fmt.Errorf("precision: %d continuation tokens, %d scored positions", len(backend), len(reference))
	}
	for i := range reference {
		tok := backend[i].Token
		if _, err := strconv.Atoi(tokenIDOf(tok)); err != nil {
			return fmt.Errorf("precision: backend token %d is %q, not a token id", i, tok)
		}
		r := &reference[i]
		r.Token = tok
		for _, a := range r.Top {
			if a.Token == tok {
				r.Logprob = a.Logprob
				break
			}
		}
		if math.IsNaN(r.Logprob) {
			return fmt.Errorf("precision: the reference did not score token %d (%s)", i, tok)
		}
	}
	return nil
}

// tokenIDOf is the id part of "token_id:<id>", or "" for another token.
func tokenIDOf(tok string) string {
	const prefix = "token_id:"
	if len(tok) <= len(prefix) || tok[:len(prefix)] != prefix {
		return ""
	}
	return tok[len(prefix):]
}

// CompareForced measures backend against reference at every position of
// the backend's continuation that the reference scored (all of it, or its
// first precision.max_tokens): backend are the positions of its response
// (tokens as "token_id:<id>"), reference those of the reference's
// prompt_logprobs over the continuation (ParsePromptLogprobs). At each it
// records the KL(reference ‖ backend) estimate and lower bound
// (Divergence), whether the most likely tokens agree, and the chosen
// token's logprob delta. Split reports that the reference's most likely
// token differed from the backend's at some position: its greedy sequence
// would have parted there.
func CompareForced(backend, reference []Position) (Comparison, error) {
	c := Comparison{Method: MethodTeacherForced}
	if err := alignForced(backend, reference); err != nil {
		return c, err
	}
	// The reference may have scored only the first tokens of a long
	// answer.
	backend = backend[:len(reference)]
	for i := range backend {
		b, r := &backend[i], &reference[i]
		if len(b.Top) == 0 || len(r.Top) == 0 {
			continue
		}
		bs, rs := b.side(), r.side()
		est, lower := Divergence(rs, bs)
		c.Compared++
		c.KL = append(c.KL, est)
		c.KLLower = append(c.KLLower, lower)
		agree := 0.0
		if Top1(bs) == Top1(rs) {
			agree = 1
		} else {
			c.Split = true
		}
		c.Top1 = append(c.Top1, agree)
		c.Delta = append(c.Delta, b.Logprob-r.Logprob)
	}
	return c, nil
}

// side is the position's distribution as Divergence reads it.
func (p *Position) side() Side {
	k := p.TopK
	if k == 0 {
		k = len(p.Top)
	}
	return Side{Alts: p.Top, TopK: k}
}
