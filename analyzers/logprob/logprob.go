// Package logprob extracts per-token confidence from LLM responses and
// summarizes each response: mean token logprob, perplexity, top-k entropy,
// top-1/top-2 margin and the share of low-confidence tokens (signals 2 and 4
// of the design), plus the usage counts, finish reason, id and model.
//
// It reads OpenAI chat, legacy completions and Responses API responses as
// OpenAI and vLLM write them, streamed (one SSE data payload at a time) or
// whole, and Hugging Face TGI's /generate and /generate_stream. The
// Anthropic Messages API has no logprobs: there is nothing to read. A small hand-written
// scanner walks only the fields it needs in place, so steady state
// allocates nothing per token, and memory is bounded whatever the response
// size: only running sums are kept.
//
// # Definitions
//
// Logprobs are natural logarithms, so entropies are in nats. At each
// generated position the chosen token has logprob l and probability
// p = e^l; the server also lists up to k alternatives (top_logprobs,
// top_tokens; for legacy completions the {token: logprob} dict, which vLLM
// completes with the chosen token). The known set K of a position is the
// listed alternatives plus the chosen token when it is not among them (it
// is recognised by its text for OpenAI, its id for TGI, or an equal logprob
// when the response names no chosen text), and r = 1 − Σ_{K} p is the mass
// the server did not list. A logprob above 0, a rounding artefact, is read
// as 0 here. Then:
//
//   - Entropy of a position: H = −Σ_{K} p·log p − r·log r (the second term
//     only when r > 0). Every unlisted token has probability at most r, so
//     −Σ p_i·log p_i over the unlisted tokens is at least −r·log r: H is a
//     lower bound of the Shannon entropy of the full next-token
//     distribution, reached when the unlisted mass sits on one token, and
//     it tightens as k grows. The bound assumes the listed logprobs are
//     exact; when rounding or noise makes Σ_{K} p exceed 1 the residual
//     term is dropped.
//   - Margin of a position: p(top1) − p(top2), the two most likely tokens
//     of K; exact when the server lists k ≥ 2 alternatives (the chosen
//     token, if unlisted, ranks below them). Positions whose K holds one
//     token have no margin. With k = 1 and an unlisted chosen token, the
//     chosen token stands in for top2, which gives an upper bound.
//   - A token is low-confidence when p < Options.LowProb.
//
// # What is counted
//
// A position counts in Tokens when its chosen logprob is usable: a finite
// number above −9999. null, NaN, ±Infinity (Python's json.dumps writes the
// bare words NaN, Infinity and -Infinity, which are not JSON; the scanner
// accepts them wherever a value may stand) and any value ≤ −9999 (OpenAI
// and vLLM clamp unrepresentable logprobs to the placeholder −9999.0) make
// the position Invalid instead. Alternatives with such values are left out
// of K, their mass left in the residual. TGI special tokens (special: true,
// such as the end-of-sequence token) are counted in Special and left out of
// the statistics: they mark structure, not content.
//
// When a response has several choices (n > 1, or a completions batch), all
// choices are pooled: their tokens share one summary, as their usage counts
// do. Prompt logprobs (vLLM's prompt_logprobs, TGI's prefill) are ignored:
// they score the prompt, not the answer. With echo=true a legacy completion
// lists the prompt's tokens among its own and they are counted too.
package logprob

import (
	"bytes"
	"errors"
	"math"
)

// Format is the kind of response being parsed. The format picks the family
// of shapes (OpenAI or TGI); within a family the parser accepts every shape,
// so that a chat response carrying legacy-style logprobs, or a TGI stream
// event given to AddBody, is still read.
type Format uint8

const (
	// OpenAIChat is /v1/chat/completions: chat.completion bodies and
	// chat.completion.chunk events, logprobs in choices[].logprobs.content
	// (and .refusal).
	OpenAIChat Format = iota
	// OpenAICompletion is /v1/completions: text_completion bodies and
	// chunks, logprobs in the legacy parallel arrays tokens,
	// token_logprobs and top_logprobs.
	OpenAICompletion
	// TGIGenerate is TGI's /generate body: details.tokens and
	// details.top_tokens.
	TGIGenerate
	// TGIStream is TGI's /generate_stream events: token, top_tokens and,
	// on the last event, details.
	TGIStream
	// OpenAIResponses is the Responses API (/v1/responses): response
	// bodies, logprobs in output[].content[].logprobs, and stream events,
	// logprobs in response.output_text.delta events (see responses.go).
	OpenAIResponses
)

func (f Format) tgi() bool { return f == TGIGenerate || f == TGIStream }

// ErrFormat is returned for a Format value outside the constants.
var ErrFormat = errors.New("logprob: unknown format")

// Defaults and limits of Options.
const (
	// DefaultLowProb is the default Options.LowProb: a token is
	// low-confidence when the model gave it less than even odds.
	DefaultLowProb = 0.5
	// DefaultMaxTopK is the default Options.MaxTopK, the most
	// alternatives OpenAI and vLLM (--max-logprobs) return by default.
	DefaultMaxTopK = 20
	// MaxTopKLimit caps Options.MaxTopK; it sizes the fixed scratch array.
	MaxTopKLimit = 64
)

// Options tune an Accumulator. The zero value means the defaults.
type Options struct {
	// LowProb is the probability below which a chosen token counts as
	// low-confidence. Values outside (0, 1], zero and NaN included, mean
	// DefaultLowProb.
	LowProb float64
	// MaxTopK caps the alternatives read per position, in the order the
	// server lists them; later ones are skipped, their mass left in the
	// residual. Zero or negative means DefaultMaxTopK; values above
	// MaxTopKLimit mean MaxTopKLimit. A legacy completions dict is read up
	// to MaxTopK+1 entries, since vLLM adds the chosen token to the k it
	// was asked for.
	MaxTopK int
}

func (o Options) normalized() Options {
	if !(o.LowProb > 0 && o.LowProb <= 1) {
		o.LowProb = DefaultLowProb
	}
	switch {
	case o.MaxTopK <= 0:
		o.MaxTopK = DefaultMaxTopK
	case o.MaxTopK > MaxTopKLimit:
		o.MaxTopK = MaxTopKLimit
	}
	return o
}

// Summary describes one response. Means over no tokens are NaN.
type Summary struct {
	// Tokens is the number of generated tokens with a usable logprob.
	Tokens int
	// SumLogprob is the sum of their logprobs.
	SumLogprob float64
	// MeanLogprob is SumLogprob / Tokens.
	MeanLogprob float64
	// Perplexity is exp(−MeanLogprob).
	Perplexity float64
	// MeanEntropy is the mean over Tokens of the top-k entropy lower bound
	// (nats; see the package documentation).
	MeanEntropy float64
	// MeanMargin is the mean over MarginTokens of p(top1) − p(top2).
	MeanMargin float64
	// MarginTokens is the number of tokens whose known set held at least
	// two tokens, the weight of MeanMargin.
	MarginTokens int
	// LowShare is the share of Tokens whose probability is below LowProb.
	LowShare float64
	// TopK is the largest number of alternatives read at one position
	// (after the MaxTopK cap); 0 when the server listed none, and the
	// entropy then rests on the chosen token alone.
	TopK int
	// OutputTokens is usage.completion_tokens (OpenAI) or
	// details.generated_tokens (TGI) when the response has it, else the
	// number of positions seen (Tokens + Invalid + Special), which is 0
	// when logprobs were not asked for.
	OutputTokens int
	// PromptTokens is usage.prompt_tokens (OpenAI) or details.input_length
	// (TGI streams; prompt_tokens in older TGI) when present, else 0.
	PromptTokens int
	// FinishReason is the last finish_reason seen: "stop", "length",
	// "tool_calls", ... for OpenAI; "eos_token", "length",
	// "stop_sequence" for TGI. With several choices, the last one's.
	FinishReason string
	// ID is the response id (OpenAI "id"); empty for TGI.
	ID string
	// Model is the "model" field; empty for TGI.
	Model string
	// Choices is the highest choices[].index seen plus one (OpenAI), or 1
	// once a TGI payload was read.
	Choices int
	// Invalid is the number of positions skipped for an unusable chosen
	// logprob: null, NaN, ±Infinity, a non-number, or ≤ −9999.
	Invalid int
	// Special is the number of TGI special tokens left out.
	Special int
	// ParseErrors is the number of payloads that were not valid JSON
	// objects; the tokens read before the fault still count.
	ParseErrors int
	// Truncated is true when a payload ended in the middle of a value, as a
	// body cut at a size cap does (its error wraps io.ErrUnexpectedEOF).
	Truncated bool
}

// placeholder is the logprob OpenAI and vLLM write for a token too unlikely
// to represent (vLLM: max(logprob, -9999.0)); anything at or below it is
// treated as unknown.
const placeholder = -9999.0

// usable reports whether a logprob read as v of kind k carries information.
func usable(v float64, k numKind) bool { return k == numFinite && v > placeholder }

// An Accumulator summarizes one response fed to it as SSE payloads or as a
// whole body. It keeps running sums only, so its memory is fixed; Reset
// makes it ready for the next response without allocating. It is used by
// one goroutine and is not safe for concurrent use. The zero value is ready
// for OpenAIChat with default Options.
type Accumulator struct {
	f        Format
	o        Options
	ready    bool
	haveOut  bool // OutputTokens came from the response
	sumEnt   float64
	sumMarg  float64
	low      int
	position int

	s Summary

	// model keeps the last model name across Reset, so that a gateway
	// serving one model allocates it once.
	model string

	// alt holds the logprobs of the known set of the current position:
	// the listed alternatives, then the chosen token if unlisted.
	alt    [MaxTopKLimit + 2]float64
	nalt   int
	listed bool // the chosen token is among alt[:nalt]
}

// Reset forgets the current response and prepares for one of format f.
func (a *Accumulator) Reset(f Format, o Options) {
	model := a.model
	*a = Accumulator{f: f, o: o.normalized(), ready: true, model: model}
}

func (a *Accumulator) init() {
	if !a.ready {
		a.Reset(a.f, Options{})
	}
}

var done = []byte("[DONE]")

// AddEvent reads one SSE data payload: a chat.completion.chunk, a
// text_completion chunk, a Responses stream event or a TGI stream event. The payload is read during
// the call only. "[DONE]" and empty payloads are ignored. A payload that is
// not a valid JSON object returns an error wrapping ErrSyntax and counts in
// ParseErrors; what was read before the fault still counts, and the
// Accumulator stays usable.
func (a *Accumulator) AddEvent(payload []byte) error {
	a.init()
	p := bytes.TrimSpace(payload)
	if len(p) == 0 || bytes.Equal(p, done) {
		return nil
	}
	return a.add(p)
}

// AddBody reads a whole non-streaming body: chat.completion,
// text_completion, a Responses response or TGI /generate (an object, or an array of them as TGI's
// "/" route answers). A body cut short (at a capture cap) returns an error
// wrapping both ErrSyntax and io.ErrUnexpectedEOF, sets Truncated and
// counts in ParseErrors. The positions wholly read before the cut count: a
// chat entry once its object closes; a legacy completions or TGI position
// once its top_logprobs / top_tokens entry is read (a cut before that list
// begins counts none of that choice, since whether alternatives would have
// followed is unknown). A longer cut never counts fewer tokens.
func (a *Accumulator) AddBody(body []byte) error {
	a.init()
	return a.add(body)
}

func (a *Accumulator) add(p []byte) error {
	s := newScanner(p)
	var ok bool
	switch {
	case a.f == OpenAIChat || a.f == OpenAICompletion:
		ok = a.openAI(&s)
	case a.f.tgi():
		ok = a.tgi(&s)
	case a.f == OpenAIResponses:
		ok = a.responses(&s)
	default:
		return ErrFormat
	}
	if ok {
		ok = s.End()
	}
	if ok {
		return nil
	}
	if s.OK() {
		// Walkers fail only through the scanner; keep the contract anyway.
		s.Fail("malformed payload")
	}
	a.s.ParseErrors++
	if s.Truncated() {
		a.s.Truncated = true
	}
	return s.err()
}

// Summary returns the summary of what was read so far.
func (a *Accumulator) Summary() Summary {
	s := a.s
	nan := math.NaN()
	s.MeanLogprob, s.Perplexity, s.MeanEntropy, s.LowShare, s.MeanMargin = nan, nan, nan, nan, nan
	if s.Tokens > 0 {
		n := float64(s.Tokens)
		s.MeanLogprob = s.SumLogprob / n
		s.Perplexity = math.Exp(-s.MeanLogprob)
		s.MeanEntropy = a.sumEnt / n
		s.LowShare = float64(a.low) / n
	}
	if s.MarginTokens > 0 {
		s.MeanMargin = a.sumMarg / float64(s.MarginTokens)
	}
	if !a.haveOut {
		s.OutputTokens = a.position
	}
	return s
}

// --- per-position statistics ----------------------------------------------

// startAlts empties the known set before reading a position's alternatives.
func (a *Accumulator) startAlts() {
	a.nalt = 0
	a.listed = false
}

// alternative records one listed alternative; isChosen says it is the
// chosen token. Callers stop at the MaxTopK cap, so alt never overflows.
func (a *Accumulator) alternative(lp float64, kind numKind, isChosen bool) {
	if usable(lp, kind) && a.nalt < MaxTopKLimit+1 {
		a.alt[a.nalt] = lp
		a.nalt++
		a.listed = a.listed || isChosen
	}
}

// token records a position whose chosen token has logprob lp of kind kind,
// with the alternatives gathered since startAlts.
func (a *Accumulator) token(lp float64, kind numKind) {
	a.position++
	if !usable(lp, kind) {
		a.s.Invalid++
		return
	}
	a.s.Tokens++
	a.s.SumLogprob += lp
	if math.Exp(lp) < a.o.LowProb {
		a.low++
	}
	a.s.TopK = max(a.s.TopK, a.nalt)
	known := a.alt[:a.nalt]
	if !a.listed {
		known = a.alt[:a.nalt+1]
		known[a.nalt] = lp
	}
	var sum, h, p1, p2 float64
	for _, l := range known {
		l = min(l, 0)
		p := math.Exp(l)
		sum += p
		h -= p * l
		switch {
		case p > p1:
			p1, p2 = p, p1
		case p > p2:
			p2 = p
		}
	}
	if r := 1 - sum; r > 0 {
		h -= r * math.Log(r)
	}
	a.sumEnt += h
	if len(known) >= 2 {
		a.sumMarg += p1 - p2
		a.s.MarginTokens++
	}
}

// special records a TGI special token.
func (a *Accumulator) special() {
	a.position++
	a.s.Special++
}

// --- strings ----------------------------------------------------------------

// setString reads a string value into *dst, allocating only when it differs
// from what *dst holds already (stream chunks repeat the id and model).
// null and non-strings leave *dst as it is.
func setString(s *scanner, dst *string) bool {
	raw, valid, ok := s.rawString()
	if !valid {
		return ok
	}
	if bytes.IndexByte(raw, '\\') >= 0 {
		if v := unescape(raw); v != *dst {
			*dst = v
		}
	} else if string(raw) != *dst {
		*dst = string(raw)
	}
	return true
}

// setFinish reads a finish reason, interning the common ones.
func setFinish(s *scanner, dst *string) bool {
	raw, valid, ok := s.rawString()
	if valid {
		*dst = finishOf(raw, *dst)
	}
	return ok
}

// finishOf returns the finish reason raw (a JSON string's contents),
// interning the common ones; old when it is equal already.
func finishOf(raw []byte, old string) string {
	switch string(raw) {
	case "stop":
		return "stop"
	case "length":
		return "length"
	case "tool_calls":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	case "function_call":
		return "function_call"
	case "abort":
		return "abort"
	case "eos_token":
		return "eos_token"
	case "stop_sequence":
		return "stop_sequence"
	}
	switch {
	case bytes.IndexByte(raw, '\\') >= 0:
		return unescape(raw)
	case string(raw) != old:
		return string(raw)
	}
	return old
}

// setCount reads a count into *dst and sets *have; null and non-counts are
// ignored.
func setCount(s *scanner, dst *int, have *bool) bool {
	n, valid, ok := s.integer()
	if valid {
		*dst, *have = n, true
	}
	return ok
}
