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
	// Compared is the number of positions measured: those before the
	// first disagreement on the chosen token where both sides had a
	// distribution.
	Compared int
	// KL, Top1 and Delta hold one value per compared position: the KL
	// divergence, 1 or 0 for top-1 agreement, and the chosen token's
	// logprob delta (backend − reference; NaN when either is unknown).
	KL, Top1, Delta []float64
	// Split reports that the sequences chose different tokens at some
	// position (or differ in length) before either ended.
	Split bool
}

// Compare measures backend against reference (see the package comment).
func Compare(backend, reference []Position) Comparison {
	var c Comparison
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
		c.KL = append(c.KL, KL(r.Top, b.Top))
		agree := 0.0
		if top1(b.Top) == top1(r.Top) {
			agree = 1
		}
		c.Top1 = append(c.Top1, agree)
		c.Delta = append(c.Delta, b.Logprob-r.Logprob)
	}
	return c
}

// top1 is the most likely alternative's token; ties go to the first listed.
func top1(alts []Alt) string {
	best := 0
	for i, a := range alts {
		if a.Logprob > alts[best].Logprob {
			best = i
		}
	}
	return alts[best].Token
}

// minProb floors every probability of KL, so that a token one side gives no
// mass to costs a large but finite amount.
const minProb = 1e-10

// KL is the Kullback–Leibler divergence KL(p ‖ q) in nats between two
// next-token distributions known through their top-k lists. The support is
// the union of the listed tokens plus "rest", the probability mass outside
// the union. A side's mass outside its own list, 1 − Σ its listed
// probabilities, is spread evenly over the union's tokens it does not list
// and its "rest" bucket, the least committal assumption consistent with
// what it reported. Probabilities are floored at 1e-10 and each side is
// renormalized. Duplicate tokens in a list count once (the first).
func KL(p, q []Alt) float64 {
	union := make([]string, 0, len(p)+len(q))
	idx := make(map[string]int, len(p)+len(q))
	for _, list := range [2][]Alt{p, q} {
		for _, a := range list {
			if _, ok := idx[a.Token]; !ok {
				idx[a.Token] = len(union)
				union = append(union, a.Token)
			}
		}
	}
	pd, qd := spread(p, idx, len(union)), spread(q, idx, len(union))
	kl := 0.0
	for i := range pd {
		kl += pd[i] * math.Log(pd[i]/qd[i])
	}
	return max(kl, 0)
}

// spread is one side's distribution over the union (index by idx) and, last,
// the rest bucket.
func spread(alts []Alt, idx map[string]int, n int) []float64 {
	d := make([]float64, n+1)
	known := make([]bool, n)
	mass := 0.0
	for _, a := range alts {
		i := idx[a.Token]
		if known[i] {
			continue
		}
		known[i] = true
		pr := math.Exp(a.Logprob)
		d[i] = pr
		mass += pr
	}
	unknown := 1 // the rest bucket
	for _, k := range known {
		if !k {
			unknown++
		}
	}
	share := max(1-mass, 0) / float64(unknown)
	for i, k := range known {
		if !k {
			d[i] = share
		}
	}
	d[n] = share
	sum := 0.0
	for i := range d {
		d[i] = max(d[i], minProb)
		sum += d[i]
	}
	for i := range d {
		d[i] /= sum
	}
	return d
}
