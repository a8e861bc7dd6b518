// Package precision is signal 5, precision divergence: a low-precision
// (quantized) backend against a full-precision reference backend, compared
// on a sampled shadow copy of live traffic.
//
// The gateway sends the same greedy request (temperature 0, logprobs with
// the top alternatives) to a backend and to its reference, off the request
// path, and hands both bodies to a Monitor. Compare walks the two token
// sequences position by position while they agree on the chosen token:
// beyond the first disagreement the two models condition on different text
// and their distributions no longer describe the same step. At each compared
// position it measures
//
//   - the KL divergence KL(reference ‖ backend) of the next-token
//     distributions, in nats, over the union of both top-k lists plus one
//     bucket for the rest of the probability mass (see KL);
//   - whether the most likely token is the same on both (top-1 agreement);
//   - the log-probability delta of the chosen token, backend − reference.
//
// A quantized model keeps the argmax most of the time and moves the
// probabilities a little: its KL stays near zero and its agreement near 1.
// A broken quantization, a wrong kernel or a corrupted checkpoint moves
// them far.
package precision

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Position is one generated token and the distribution it was drawn from,
// as far as the top-k list shows it.
type Position struct {
	Token   string
	Logprob float64 // NaN when the server gave none (null, vLLM's -9999 placeholder)
	Top     []Alt   // most likely first is not assumed
	// TopK is how many of Top are the server's top-k list (the rest
	// are other tokens whose logprobs it gave); 0: all of them.
	TopK int
}

// Alt is one of the top alternatives at a position.
type Alt struct {
	Token   string
	Logprob float64
}

// placeholder is vLLM's stand-in for a logprob it could not compute; at or
// below it a value is unknown.
const placeholder = -9999.0

func usable(lp *float64) float64 {
	if lp == nil || math.IsNaN(*lp) || math.IsInf(*lp, 0) || *lp <= placeholder {
		return math.NaN()
	}
	return *lp
}

// ErrNoLogprobs is returned for a body whose first choice carries no logprobs.
var ErrNoLogprobs = errors.New("precision: response has no logprobs")

// ParseChat returns the positions of the first choice of a non-streaming
// OpenAI chat completion asked with "logprobs": true and "top_logprobs".
func ParseChat(body []byte) ([]Position, error) {
	var r struct {
		Choices []struct {
			Logprobs *struct {
				Content []struct {
					Token       string
					Logprob     *float64
					TopLogprobs []struct {
						Token   string
						Logprob *float64
					} `json:"top_logprobs"`
				}
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("precision: chat response: %w", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].Logprobs == nil {
		return nil, ErrNoLogprobs
	}
	content := r.Choices[0].Logprobs.Content
	out := make([]Position, len(content))
	for i, c := range content {
		out[i] = Position{Token: c.Token, Logprob: usable(c.Logprob)}
		for _, a := range c.TopLogprobs {
			if lp := usable(a.Logprob); !math.IsNaN(lp) {
				out[i].Top = append(out[i].Top, Alt{a.Token, lp})
			}
		}
	}
	return out, nil
}

// ParseCompletion returns the positions of the first choice of a
// non-streaming legacy completion asked with "logprobs": k.
func ParseCompletion(body []byte) ([]Position, error) {
	var r struct {
		Choices []struct {
			Logprobs *struct {
				Tokens        []string
				TokenLogprobs []*float64            `json:"token_logprobs"`
				TopLogprobs   []map[string]*float64 `json:"top_logprobs"`
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("precision: completion response: %w", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].Logprobs == nil {
		return nil, ErrNoLogprobs
	}
	lp := r.Choices[0].Logprobs
	out := make([]Position, len(lp.Tokens))
	for i, tok := range lp.Tokens {
		out[i] = Position{Token: tok, Logprob: math.NaN()}
		if i < len(lp.TokenLogprobs) {
			out[i].Logprob = usable(lp.TokenLogprobs[i])
		}
		if i < len(lp.TopLogprobs) {
			for t, v := range lp.TopLogprobs[i] {
				if x := usable(v); !math.IsNaN(x) {
					out[i].Top = append(out[i].Top, Alt{t, x})
				}
			}
		}
	}
	return out, nil
}

// Comparison is what Compare found in one pair of responses.
type Comparison struct {
	// Method is MethodTeacherForced or MethodGreedyWalk.
	Method string
	// Compared is the number of positions measured where both sides had
	// a distribution: every position of the backend's continuation when
	// teacher-forced, those before the first disagreement on the chosen
	// token in the greedy walk.
	Compared int
	// KL, KLLower, Top1 and Delta hold one value per compared position:
	// the KL divergence estimate and its lower bound (Divergence), 1 or
	// 0 for top-1 agreement, and the chosen token's logprob delta
	// (backend − reference; NaN when either is unknown).
	KL, KLLower, Top1, Delta []float64
	// Split reports that the sequences chose different tokens at some
	// position (or differ in length) before either ended.
	Split bool
}

// Methods of a comparison, as /admin/signals names them.
const (
	MethodTeacherForced = "teacher_forced"
	MethodGreedyWalk    = "greedy_walk"
)

// Compare measures backend against reference (see the package comment).
func Compare(backend, reference []Position) Comparison {
	c := Comparison{Method: MethodGreedyWalk}
	n := min(len(backend), len(reference))
	c.Split = len(backend) != len(reference)
	for i := range n {
		b, r := &backend[i], &reference[i]
		if b.Token != r.Token {
			c.Split = true
			break
		}
		if len(b.Top) == 0 || len(r.Top) == 0 {
			continue
		}
		c.Compared++
		bs, rs := b.side(), r.side()
		est, lower := Divergence(rs, bs)
		c.KL = append(c.KL, est)
		c.KLLower = append(c.KLLower, lower)
		agree := 0.0
		if Top1(bs) == Top1(rs) {
			agree = 1
		}
		c.Top1 = append(c.Top1, agree)
		c.Delta = append(c.Delta, b.Logprob-r.Logprob)
	}
	return c
}
