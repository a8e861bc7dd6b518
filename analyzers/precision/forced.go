package precision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/vigil-gw/vigil/internal/jsonscan"
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
//
// The response lists every position of the prompt the client sent, of
// which only the continuation's few are compared: a long prompt made
// decoding the whole list with encoding/json the gateway's costliest work
// (2,000 prompt tokens with 5 alternatives each: 0.5 MB, milliseconds of
// CPU per comparison). scanPromptLogprobs checks the prompt's positions
// without keeping them, an eleventh of the time; encoding/json decodes only
// what the scanner declines, and gives the errors.
func ParsePromptLogprobs(body []byte, from int) ([]Position, error) {
	if out, ok := scanPromptLogprobs(body, from); ok {
		return out, nil
	}
	return decodePromptLogprobs(body, from)
}

// A rankedAlt is one listed token of a prompt position with its rank.
type rankedAlt struct {
	alt  Alt
	rank int
}

// promptPosition makes a Position of a prompt position's listed tokens,
// which it sorts by rank. The top-k are the entries ranked 1, 2, … k; the
// prompt's own token, listed too, may rank below them. Which entry is the
// prompt's token is known from the backend's continuation (alignForced).
func promptPosition(list []rankedAlt) Position {
	pos := Position{Logprob: math.NaN()}
	slices.SortStableFunc(list, func(a, b rankedAlt) int { return a.rank - b.rank })
	for j, e := range list {
		pos.Top = append(pos.Top, e.alt)
		if e.rank == j+1 && pos.TopK == j {
			pos.TopK = j + 1
		}
	}
	return pos
}

// decodePromptLogprobs is ParsePromptLogprobs by encoding/json.
func decodePromptLogprobs(body []byte, from int) ([]Position, error) {
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
	var list []rankedAlt
	for i := from; i < len(pl); i++ {
		list = list[:0]
		for id, e := range pl[i] {
			lp := usable(e.Logprob)
			if math.IsNaN(lp) {
				continue
			}
			list = append(list, rankedAlt{Alt{"token_id:" + id, lp}, e.Rank})
		}
		out = append(out, promptPosition(list))
	}
	return out, nil
}

// scanPromptLogprobs is ParsePromptLogprobs by jsonscan, validating the
// whole body as encoding/json would. It reports false, for
// decodePromptLogprobs to answer, on anything it cannot be sure to read as
// encoding/json does (an error, a key that needs decoding or case folding,
// a member or token named twice, a rank that is not a plain integer).
func scanPromptLogprobs(body []byte, from int) ([]Position, bool) {
	s := jsonscan.New(body, jsonscan.Options{})
	var out []Position
	ok := memberOnce(&s, "choices", func() bool {
		if !s.Enter('[') {
			return false
		}
		for e := 0; s.Element(&e); {
			if e > 1 {
				if !s.Skip() {
					return false
				}
				continue
			}
			var ok bool
			if out, ok = scanChoicePrompt(&s, from); !ok {
				return false
			}
		}
		return s.OK()
	})
	if !ok || !s.End() || out == nil {
		return nil, false
	}
	return out, true
}

// memberOnce walks the object at s, skipping every member but name, whose
// value read consumes. It reports false on a failure, on a key that only
// encoding/json can match, and on name given twice (encoding/json keeps
// the last).
func memberOnce(s *jsonscan.Scanner, name string, read func() bool) bool {
	if !s.Enter('{') {
		return false
	}
	names := []string{name}
	seen := false
	for n := 0; s.Member(&n); {
		i, sure := jsonscan.Field(s.Key(), names)
		switch {
		case !sure || i == 0 && seen:
			return false
		case i < 0:
			if !s.Skip() {
				return false
			}
			continue
		}
		seen = true
		if !read() {
			return false
		}
	}
	return s.OK()
}

// scanChoicePrompt reads a choice's prompt_logprobs from position from on;
// nil and true for a choice without them (an error for the caller).
func scanChoicePrompt(s *jsonscan.Scanner, from int) ([]Position, bool) {
	var out []Position
	ok := memberOnce(s, "prompt_logprobs", func() bool {
		if !s.Enter('[') {
			return false
		}
		var list []rankedAlt
		var e int
		for s.Element(&e) {
			// The prompt's positions are read for their types only, as
			// encoding/json would fail on them, and kept nowhere.
			keep := e > from
			var ok bool
			if list, ok = scanPromptTokens(s, list[:0], keep); !ok {
				return false
			}
			if keep {
				out = append(out, promptPosition(list))
			}
		}
		if !s.OK() || from < 1 || from > e {
			return false
		}
		if out == nil {
			out = []Position{}
		}
		return true
	})
	return out, ok
}

// scanPromptTokens reads one prompt position (an object of token id →
// {logprob, rank}, or null) and, when keep is true, appends its usable
// listed tokens to list.
func scanPromptTokens(s *jsonscan.Scanner, list []rankedAlt, keep bool) ([]rankedAlt, bool) {
	if s.Null() {
		return list, true
	}
	if !s.Enter('{') {
		return nil, false
	}
	start := len(list)
	for n := 0; s.Member(&n); {
		id := s.Key()
		if !jsonscan.Verbatim(id) {
			return nil, false
		}
		for _, e := range list[start:] {
			if e.alt.Token[len("token_id:"):] == string(id) {
				return nil, false // named twice: encoding/json keeps the last
			}
		}
		lp, hasLP := 0.0, false
		rank := 0
		if !s.Null() {
			if !s.Enter('{') {
				return nil, false
			}
			for m := 0; s.Member(&m); {
				f, sure := jsonscan.Field(s.Key(), []string{"logprob", "rank"})
				switch {
				case !sure:
					return nil, false
				case f < 0:
					if !s.Skip() {
						return nil, false
					}
				case s.Null():
					if f == 0 {
						hasLP = false
					}
				default:
					raw, _, ok := s.Number()
					if !ok {
						return nil, false
					}
					if f == 0 {
						v, err := jsonscan.ParseFloat(raw)
						if err != nil {
							return nil, false
						}
						lp, hasLP = v, true
						continue
					}
					// Atoi refuses what encoding/json refuses for an
					// int: a fraction, an exponent, an overflow.
					r, err := strconv.Atoi(string(raw))
					if err != nil {
						return nil, false
					}
					rank = r
				}
			}
		}
		if !keep || !hasLP {
			continue
		}
		if v := usable(&lp); !math.IsNaN(v) {
			list = append(list, rankedAlt{Alt{"token_id:" + string(id), v}, rank})
		}
	}
	return list, s.OK()
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
