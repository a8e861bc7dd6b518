package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Knobs are the simulator's behaviour settings. All of them can change while
// the server runs (see [Server.SetKnobs] and POST /sim/knobs); a request
// reads them once, when it arrives, and keeps that snapshot to the end.
//
// In JSON the fields are snake_case; durations are Go duration strings such
// as "50ms", and a bare number is read as milliseconds.
type Knobs struct {
	// TTFT is the fixed part of the delay before the first token: with
	// PrefillPerToken it is TTFT + PrefillPerToken × the prompt tokens the
	// prefix cache did not hold. Zero means none.
	TTFT time.Duration
	// PrefillPerToken is the prefill time of one prompt token that is not
	// in the prefix cache, spent while the request holds its MaxNumSeqs
	// slot. Zero (the default) means prefill is free and TTFT alone is the
	// delay, whatever the cache holds.
	PrefillPerToken time.Duration
	// ITL is the inter-token latency: the delay before every token after
	// the first. Zero means none. A non-streaming response of n tokens is
	// sent when its last token is generated, after TTFT + (n-1)·ITL (plus
	// Stall, when it falls within), the moment the stream of the same
	// request would end.
	ITL time.Duration
	// Stall is a pause in the middle of a stream, as a backend that
	// preempts a sequence or swaps its KV cache: once per request, the
	// token that follows the first StallAfter tokens of each choice waits
	// Stall on top of its ITL (on top of TTFT when StallAfter is 0). A
	// request whose choices end within StallAfter tokens does not stall.
	// Zero means none.
	Stall time.Duration
	// StallAfter is the number of tokens of each choice generated before
	// the stall. It matters only with a non-zero Stall.
	StallAfter int
	// ErrorRate is the share of requests answered with HTTP 500, in [0, 1].
	ErrorRate float64
	// Hang makes the server accept every request but its own /sim/*
	// routes and answer nothing, not even headers, until the client goes
	// away: a backend whose process is wedged while its socket still
	// accepts. Requests already in flight when it is set keep going.
	// False means normal answers.
	Hang bool
	// MaxModelLen is the context length in tokens: prompt plus completion
	// beyond it is refused as vLLM and TGI refuse it. Zero means no limit.
	MaxModelLen int
	// Confidence is the mean probability of the top-1 (chosen) token, in
	// (0, 1]; draws spread by 0.3·c·(1-c), so 1 gives logprob 0 exactly.
	// Lower values lower the mean logprob. Zero in [Options] or
	// [Server.SetKnobs] means the default, 0.8.
	Confidence float64
	// Noise is the standard deviation of gaussian noise added to every
	// logprob, as quantization perturbs a model; the listed tokens are
	// then shifted together to keep their total probability (and capped
	// at 0). Zero means none.
	Noise float64
	// OutputTokens is the number of tokens generated when a request sets no
	// max_tokens (or max_completion_tokens, max_new_tokens). Zero in
	// [Options] or [Server.SetKnobs] means the default, 32.
	OutputTokens int
	// MaxNumSeqs is the number of requests generating at once; beyond it
	// requests wait in FIFO order, as vLLM's --max-num-seqs. Zero in
	// [Options] or [Server.SetKnobs] means the default, 64.
	MaxNumSeqs int
	// ExtraWaiting is added to vllm:num_requests_waiting on /metrics, as if
	// other clients had that many requests queued: it loads the backend as
	// a balancer sees it without holding real requests. Zero means none.
	ExtraWaiting int
	// KVCacheUsage, when above zero, is reported as vllm:kv_cache_usage_perc
	// (and vllm:gpu_cache_usage_perc) instead of the measured usage, in
	// [0, 1]. Zero means the measured usage.
	KVCacheUsage float64
	// PrefixCacheBlocks is the capacity, in blocks of BlockSize tokens, of
	// the simulated automatic prefix cache (vLLM's
	// --enable-prefix-caching); see the package documentation. Zero (the
	// default) turns prefix caching off. Lowering it evicts the least
	// recently used blocks down to the new capacity.
	PrefixCacheBlocks int
	// BlockSize is the number of tokens per KV cache block, vLLM's
	// --block-size: the prefix cache holds and matches whole blocks.
	// Zero in [Options] or [Server.SetKnobs] means the default, 16.
	// Changing it empties the cache, whose block hashes no longer match.
	BlockSize int
}

// Limits that keep every request's memory and time bounded whatever the input.
const (
	// maxTopLogprobs is vLLM's default --max-logprobs.
	maxTopLogprobs = 20
	// maxGenTokens caps the tokens of one choice when MaxModelLen is 0.
	maxGenTokens = 1 << 16
	// maxTotalGenTokens caps the tokens of all choices of one request.
	maxTotalGenTokens = 1 << 18
	// maxChoices caps n times the number of prompts.
	maxChoices = 128
	// maxPromptLogprobTokens caps the prompt length for prompt_logprobs and
	// TGI's decoder_input_details, which list every prompt token.
	maxPromptLogprobTokens = 1 << 15
	// maxPrefixCacheBlocks bounds the prefix cache's memory (about 100
	// bytes a block): 2^20 blocks of 16 tokens are 16M tokens.
	maxPrefixCacheBlocks = 1 << 20
	// maxBlockSize bounds BlockSize; vLLM's largest is 256.
	maxBlockSize = 1 << 12
	// defaultBlockSize is vLLM's default --block-size on GPUs.
	defaultBlockSize = 16
)

// DefaultKnobs returns the defaults: no latency, no errors, no context limit,
// confidence 0.8, no noise, 32 output tokens, 64 concurrent sequences, no
// prefix cache (blocks of 16 tokens when one is set).
func DefaultKnobs() Knobs {
	return Knobs{Confidence: 0.8, OutputTokens: 32, MaxNumSeqs: 64, BlockSize: defaultBlockSize}
}

// Validate reports every knob outside its range, each error naming the
// knob by its JSON name (for example "error_rate: must be in [0, 1], got 2").
// It is strict: unlike [New] and [Server.SetKnobs], it does not read zero
// Confidence, OutputTokens, MaxNumSeqs or BlockSize as "the default".
func (k Knobs) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{name}, args...)...))
	}
	if k.TTFT < 0 {
		bad("ttft", "must not be negative, got %s", k.TTFT)
	}
	if k.PrefillPerToken < 0 {
		bad("prefill_per_token", "must not be negative, got %s", k.PrefillPerToken)
	}
	if k.ITL < 0 {
		bad("itl", "must not be negative, got %s", k.ITL)
	}
	if k.Stall < 0 {
		bad("stall", "must not be negative, got %s", k.Stall)
	}
	if k.StallAfter < 0 {
		bad("stall_after", "must not be negative, got %d", k.StallAfter)
	}
	if !(k.ErrorRate >= 0 && k.ErrorRate <= 1) {
		bad("error_rate", "must be in [0, 1], got %v", k.ErrorRate)
	}
	if k.MaxModelLen < 0 {
		bad("max_model_len", "must not be negative (0 means no limit), got %d", k.MaxModelLen)
	}
	if !(k.Confidence > 0 && k.Confidence <= 1) {
		bad("confidence", "must be in (0, 1], got %v", k.Confidence)
	}
	if !(k.Noise >= 0 && k.Noise <= 100) {
		bad("noise", "must be in [0, 100], got %v", k.Noise)
	}
	if k.OutputTokens < 1 || k.OutputTokens > maxGenTokens {
		bad("output_tokens", "must be in [1, %d], got %d", maxGenTokens, k.OutputTokens)
	}
	if k.MaxNumSeqs < 1 {
		bad("max_num_seqs", "must be at least 1, got %d", k.MaxNumSeqs)
	}
	if k.ExtraWaiting < 0 {
		bad("extra_waiting", "must not be negative, got %d", k.ExtraWaiting)
	}
	if !(k.KVCacheUsage >= 0 && k.KVCacheUsage <= 1) {
		bad("kv_cache_usage", "must be in [0, 1] (0 means measured), got %v", k.KVCacheUsage)
	}
	if k.PrefixCacheBlocks < 0 || k.PrefixCacheBlocks > maxPrefixCacheBlocks {
		bad("prefix_cache_blocks", "must be in [0, %d] (0 means no prefix caching), got %d", maxPrefixCacheBlocks, k.PrefixCacheBlocks)
	}
	if k.BlockSize < 1 || k.BlockSize > maxBlockSize {
		bad("block_size", "must be in [1, %d], got %d", maxBlockSize, k.BlockSize)
	}
	return errors.Join(errs...)
}

// normalized fills zero Confidence, OutputTokens, MaxNumSeqs and BlockSize with their
// defaults and clamps everything else into range, so that the hot path never
// sees a value it cannot use, whatever a caller of SetKnobs passed.
func (k Knobs) normalized() Knobs {
	d := DefaultKnobs()
	k.TTFT = max(k.TTFT, 0)
	k.PrefillPerToken = max(k.PrefillPerToken, 0)
	k.ITL = max(k.ITL, 0)
	k.Stall = max(k.Stall, 0)
	k.StallAfter = max(k.StallAfter, 0)
	k.ErrorRate = clampFinite(k.ErrorRate, 0, 1, 0)
	k.MaxModelLen = max(k.MaxModelLen, 0)
	if k.Confidence == 0 {
		k.Confidence = d.Confidence
	}
	k.Confidence = clampFinite(k.Confidence, 1e-6, 1, d.Confidence)
	k.Noise = clampFinite(k.Noise, 0, 100, 0)
	if k.OutputTokens <= 0 {
		k.OutputTokens = d.OutputTokens
	}
	k.OutputTokens = min(k.OutputTokens, maxGenTokens)
	if k.MaxNumSeqs <= 0 {
		k.MaxNumSeqs = d.MaxNumSeqs
	}
	k.ExtraWaiting = max(k.ExtraWaiting, 0)
	k.KVCacheUsage = clampFinite(k.KVCacheUsage, 0, 1, 0)
	k.PrefixCacheBlocks = min(max(k.PrefixCacheBlocks, 0), maxPrefixCacheBlocks)
	if k.BlockSize <= 0 {
		k.BlockSize = d.BlockSize
	}
	k.BlockSize = min(k.BlockSize, maxBlockSize)
	return k
}

func clampFinite(v, lo, hi, ifNaN float64) float64 {
	if math.IsNaN(v) {
		return ifNaN
	}
	return min(max(v, lo), hi)
}

// knobsJSON is the wire form of Knobs, in field order.
type knobsJSON struct {
	TTFT              string  `json:"ttft"`
	PrefillPerToken   string  `json:"prefill_per_token"`
	ITL               string  `json:"itl"`
	Stall             string  `json:"stall"`
	StallAfter        int     `json:"stall_after"`
	ErrorRate         float64 `json:"error_rate"`
	Hang              bool    `json:"hang"`
	MaxModelLen       int     `json:"max_model_len"`
	Confidence        float64 `json:"confidence"`
	Noise             float64 `json:"noise"`
	OutputTokens      int     `json:"output_tokens"`
	MaxNumSeqs        int     `json:"max_num_seqs"`
	ExtraWaiting      int     `json:"extra_waiting"`
	KVCacheUsage      float64 `json:"kv_cache_usage"`
	PrefixCacheBlocks int     `json:"prefix_cache_blocks"`
	BlockSize         int     `json:"block_size"`
}

// knobsPatch is what UnmarshalJSON accepts: every field optional.
type knobsPatch struct {
	TTFT              json.RawMessage `json:"ttft"`
	PrefillPerToken   json.RawMessage `json:"prefill_per_token"`
	ITL               json.RawMessage `json:"itl"`
	Stall             json.RawMessage `json:"stall"`
	StallAfter        *int            `json:"stall_after"`
	ErrorRate         *float64        `json:"error_rate"`
	Hang              *bool           `json:"hang"`
	MaxModelLen       *int            `json:"max_model_len"`
	Confidence        *float64        `json:"confidence"`
	Noise             *float64        `json:"noise"`
	OutputTokens      *int            `json:"output_tokens"`
	MaxNumSeqs        *int            `json:"max_num_seqs"`
	ExtraWaiting      *int            `json:"extra_waiting"`
	KVCacheUsage      *float64        `json:"kv_cache_usage"`
	PrefixCacheBlocks *int            `json:"prefix_cache_blocks"`
	BlockSize         *int            `json:"block_size"`
}

// MarshalJSON writes the knobs with snake_case names and durations as Go
// duration strings.
func (k Knobs) MarshalJSON() ([]byte, error) {
	return json.Marshal(knobsJSON{
		TTFT:              k.TTFT.String(),
		PrefillPerToken:   k.PrefillPerToken.String(),
		ITL:               k.ITL.String(),
		Stall:             k.Stall.String(),
		StallAfter:        k.StallAfter,
		ErrorRate:         k.ErrorRate,
		Hang:              k.Hang,
		MaxModelLen:       k.MaxModelLen,
		Confidence:        k.Confidence,
		Noise:             k.Noise,
		OutputTokens:      k.OutputTokens,
		MaxNumSeqs:        k.MaxNumSeqs,
		ExtraWaiting:      k.ExtraWaiting,
		KVCacheUsage:      k.KVCacheUsage,
		PrefixCacheBlocks: k.PrefixCacheBlocks,
		BlockSize:         k.BlockSize,
	})
}

// UnmarshalJSON merges the fields present in b into k and leaves the others
// as they are, so that decoding into a copy of the current knobs is a partial
// update. Unknown fields are errors. It does not validate ranges; see
// [Knobs.Validate].
func (k *Knobs) UnmarshalJSON(b []byte) error {
	var p knobsPatch
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return knobsDecodeError(err)
	}
	if dec.More() {
		return errors.New("knobs: unexpected data after the JSON object")
	}
	ttft, err := parseDuration("ttft", p.TTFT, k.TTFT)
	if err != nil {
		return err
	}
	itl, err := parseDuration("itl", p.ITL, k.ITL)
	if err != nil {
		return err
	}
	stall, err := parseDuration("stall", p.Stall, k.Stall)
	if err != nil {
		return err
	}
	prefill, err := parseDuration("prefill_per_token", p.PrefillPerToken, k.PrefillPerToken)
	if err != nil {
		return err
	}
	k.TTFT, k.ITL, k.Stall, k.PrefillPerToken = ttft, itl, stall, prefill
	if p.StallAfter != nil {
		k.StallAfter = *p.StallAfter
	}
	if p.ErrorRate != nil {
		k.ErrorRate = *p.ErrorRate
	}
	if p.Hang != nil {
		k.Hang = *p.Hang
	}
	if p.MaxModelLen != nil {
		k.MaxModelLen = *p.MaxModelLen
	}
	if p.Confidence != nil {
		k.Confidence = *p.Confidence
	}
	if p.Noise != nil {
		k.Noise = *p.Noise
	}
	if p.OutputTokens != nil {
		k.OutputTokens = *p.OutputTokens
	}
	if p.MaxNumSeqs != nil {
		k.MaxNumSeqs = *p.MaxNumSeqs
	}
	if p.ExtraWaiting != nil {
		k.ExtraWaiting = *p.ExtraWaiting
	}
	if p.KVCacheUsage != nil {
		k.KVCacheUsage = *p.KVCacheUsage
	}
	if p.PrefixCacheBlocks != nil {
		k.PrefixCacheBlocks = *p.PrefixCacheBlocks
	}
	if p.BlockSize != nil {
		k.BlockSize = *p.BlockSize
	}
	return nil
}

// knobsDecodeError rewrites encoding/json's messages so that they start
// with the knob's name, as Validate's do.
func knobsDecodeError(err error) error {
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &te) && te.Field != "":
		return fmt.Errorf("%s: expected %s, got JSON %s", te.Field, jsonKind(te.Type), te.Value)
	case errors.As(err, &te):
		return errors.New("knobs: expected a JSON object")
	}
	// DisallowUnknownFields has no typed error; its text is stable:
	// `json: unknown field "name"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return fmt.Errorf("%s: unknown knob", strings.Trim(name, `"`))
	}
	return fmt.Errorf("knobs: invalid JSON: %w", err)
}

// parseDuration reads a knob given as a Go duration string or a number of
// milliseconds; absent or null keeps old.
func parseDuration(name string, raw json.RawMessage, old time.Duration) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return old, nil
	}
	bad := fmt.Errorf("%s: want a Go duration such as \"50ms\" or a number of milliseconds, got %s", name, raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, bad
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	ms, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(ms) || math.Abs(ms) > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, bad
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}
