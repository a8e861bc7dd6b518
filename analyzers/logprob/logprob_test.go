package logprob

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/sim"
)

// approx compares summaries to the reference: the package and the reference
// sum the same float64 values, in orders that may differ (the reference
// computes p·log p with math.Log, the package p·logprob), so results agree
// to a few ulps; 1e-12 leaves three orders of magnitude of room.
var approx = cmp.Options{cmpopts.EquateNaNs(), cmpopts.EquateApprox(1e-12, 1e-12)}

func TestFixturesMatchReference(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			raw := loadFixture(t, f)
			got := summarize(t, f, raw, Options{})
			want := refOf(t, f, raw).summary(DefaultLowProb)
			if diff := cmp.Diff(want, got, approx); diff != "" {
				t.Errorf("summary (-reference +got):\n%s", diff)
			}
			// The fixtures must exercise what they are for.
			if got.Tokens < 20 || got.Invalid != 0 || got.ParseErrors != 0 || got.FinishReason == "" || got.MarginTokens != got.Tokens {
				t.Errorf("unexpected fixture summary: %+v", got)
			}
			if f.format.tgi() == (got.ID != "") {
				t.Errorf("ID = %q for format %d", got.ID, f.format)
			}
		})
	}
}

// TestUnlistedChosen runs requests whose noise often moves the chosen
// token out of the listed top-k (k = 1) and pushes listed mass above 1, and
// checks both happened and the summaries agree with the reference there.
func TestUnlistedChosen(t *testing.T) {
	ts := simServer(t, sim.Options{Seed: 3, Knobs: sim.Knobs{Confidence: 0.7, Noise: 0.8, OutputTokens: 64}})
	for _, f := range []fixture{
		{name: "chat", format: OpenAIChat, path: "/v1/chat/completions", body: `{` + chatMsgs + `,"logprobs":true,"top_logprobs":1}`},
		{name: "tgi", format: TGIGenerate, path: "/generate", body: `{"inputs":"x","parameters":{"details":true,"top_n_tokens":1,"max_new_tokens":64}}`},
	} {
		t.Run(f.name, func(t *testing.T) {
			raw := postSim(t, ts, f.path, f.body)
			r := refOf(t, f, raw)
			unlisted, overfull := 0, 0
			for _, p := range r.pos {
				found, sum := false, 0.0
				for _, a := range p.alts {
					found = found || a.key == p.key
					sum += math.Exp(a.lp)
				}
				if !found {
					unlisted++
				}
				if sum+math.Exp(*p.lp) > 1 {
					overfull++
				}
			}
			if unlisted == 0 || overfull == 0 {
				t.Errorf("%d positions with the chosen token unlisted, %d with known mass above 1; want some of each", unlisted, overfull)
			}
			if diff := cmp.Diff(r.summary(DefaultLowProb), summarize(t, f, raw, Options{}), approx); diff != "" {
				t.Errorf("summary (-reference +got):\n%s", diff)
			}
		})
	}
}

func TestStreamMatchesBody(t *testing.T) {
	for _, p := range pairs {
		t.Run(p[0], func(t *testing.T) {
			fs, fb := fixtureNamed(t, p[0]), fixtureNamed(t, p[1])
			stream := summarize(t, fs, loadFixture(t, fs), Options{})
			body := summarize(t, fb, loadFixture(t, fb), Options{})
			// Ids are drawn from the request body, which differs; TGI's
			// /generate details carry no input_length.
			ignore := cmpopts.IgnoreFields(Summary{}, "ID")
			if fs.format.tgi() {
				ignore = cmpopts.IgnoreFields(Summary{}, "PromptTokens")
			}
			// Same tokens, same order, one choice: the sums are identical.
			if diff := cmp.Diff(body, stream, cmpopts.EquateNaNs(), ignore); diff != "" {
				t.Errorf("stream vs body (-body +stream):\n%s", diff)
			}
		})
	}
}

// TestSimulatorLive runs requests against a live simulator with other
// seeds and knobs, n > 1 included, and checks the streaming and
// non-streaming responses against each other and against the reference.
func TestSimulatorLive(t *testing.T) {
	opts := sim.Options{Seed: 99, Knobs: sim.Knobs{Confidence: 0.6, Noise: 0.8, OutputTokens: 40}}
	ts := simServer(t, opts)
	msgs := `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Name three colours."}]`
	tests := []struct {
		name         string
		format       Format
		path         string
		args         string // request fields shared by both
		streamExtra  string
		wantChoices  int
		ignorePrompt bool
	}{
		{"chat n=2 top3", OpenAIChat, "/v1/chat/completions", msgs + `,"n":2,"logprobs":true,"top_logprobs":3`,
			`,"stream_options":{"include_usage":true}`, 2, false},
		{"chat top20", OpenAIChat, "/v1/chat/completions", msgs + `,"logprobs":true,"top_logprobs":20,"max_tokens":64`,
			`,"stream_options":{"include_usage":true}`, 1, false},
		{"chat logprobs without top", OpenAIChat, "/v1/chat/completions", msgs + `,"logprobs":true`,
			`,"stream_options":{"include_usage":true}`, 1, false},
		{"completions batch n=2", OpenAICompletion, "/v1/completions", `"prompt":["one","two"],"n":2,"logprobs":5`,
			`,"stream_options":{"include_usage":true}`, 4, false},
		{"completions logprobs 0", OpenAICompletion, "/v1/completions", `"prompt":"zero","logprobs":0`,
			`,"stream_options":{"include_usage":true}`, 1, false},
		{"tgi top2", TGIGenerate, "/generate", `"inputs":"abc","parameters":{"details":true,"top_n_tokens":2}`, "", 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bf := fixture{name: tt.name, format: tt.format, body: "{" + tt.args + "}"}
			body := postSim(t, ts, tt.path, bf.body)
			sf := fixture{name: tt.name, format: tt.format, stream: true, body: `{"stream":true,` + tt.args + tt.streamExtra + "}"}
			path := tt.path
			if tt.format.tgi() {
				sf.format, path = TGIStream, "/generate_stream"
			}
			stream := postSim(t, ts, path, sf.body)

			gotBody := summarize(t, bf, body, Options{})
			gotStream := summarize(t, sf, stream, Options{})
			if diff := cmp.Diff(refOf(t, bf, body).summary(DefaultLowProb), gotBody, approx); diff != "" {
				t.Errorf("body (-reference +got):\n%s", diff)
			}
			if diff := cmp.Diff(refOf(t, sf, stream).summary(DefaultLowProb), gotStream, approx); diff != "" {
				t.Errorf("stream (-reference +got):\n%s", diff)
			}
			ignore := []string{"ID"}
			if tt.ignorePrompt {
				ignore = append(ignore, "PromptTokens")
			}
			// With n > 1 the stream interleaves choices, so sums are
			// taken in another order: compare to 1e-12.
			if diff := cmp.Diff(gotBody, gotStream, approx, cmpopts.IgnoreFields(Summary{}, ignore...)); diff != "" {
				t.Errorf("stream vs body (-body +stream):\n%s", diff)
			}
			if gotBody.Choices != tt.wantChoices || gotBody.Tokens == 0 {
				t.Errorf("Choices = %d, Tokens = %d; want %d choices and some tokens", gotBody.Choices, gotBody.Tokens, tt.wantChoices)
			}
		})
	}
}

// checkCuts cuts the body of f at every step-th length from start and
// checks each cut as TestTruncatedBody says.
func checkCuts(t *testing.T, f fixture, start, step int) {
	t.Helper()
	raw := loadFixture(t, f)
	full := summarize(t, f, raw, Options{})
	var a Accumulator
	prev := 0
	for n := start; n < len(raw); n += step {
		a.Reset(f.format, Options{})
		err := a.AddBody(raw[:n])
		s := a.Summary()
		if n > 0 && (!errors.Is(err, io.ErrUnexpectedEOF) || !errors.Is(err, ErrSyntax) || !s.Truncated || s.ParseErrors != 1) {
			t.Fatalf("cut at %d of %d: err %v, summary %+v; want a truncation", n, len(raw), err, s)
		}
		if s.Tokens < prev || s.Tokens > full.Tokens {
			t.Fatalf("cut at %d: %d tokens after %d, full body %d", n, s.Tokens, prev, full.Tokens)
		}
		prev = s.Tokens
	}
	if prev < full.Tokens-1 {
		t.Errorf("cut at the last byte counts %d tokens of %d", prev, full.Tokens)
	}
}

// TestTruncatedBody cuts each non-streaming fixture at every length: every
// strict prefix of a JSON object is incomplete, never malformed, so the
// error must wrap io.ErrUnexpectedEOF; tokens read before the cut count,
// and a longer cut never counts fewer.
func TestTruncatedBody(t *testing.T) {
	for _, f := range fixtures {
		if f.stream {
			continue
		}
		t.Run(f.name, func(t *testing.T) {
			// Every cut costs a pass over the prefix: under the race
			// detector (or -short) try every 17th length, which still lands
			// in every kind of token of these bodies.
			step := 1
			if raceEnabled || testing.Short() {
				step = 17
			}
			checkCuts(t, f, 0, step)
		})
	}
}

// --- hand-written edge cases ---------------------------------------------

// L writes log(p) as a JSON number that parses back to math.Log(p) exactly.
func L(p float64) string { return fmt.Sprint(math.Log(p)) }

// H is the entropy of a known set whose probabilities are ps, with the
// residual bucket.
func H(ps ...float64) float64 {
	h, sum := 0.0, 0.0
	for _, p := range ps {
		h -= p * math.Log(p)
		sum += p
	}
	if r := 1 - sum; r > 0 {
		h -= r * math.Log(r)
	}
	return h
}

// ct is a chat top_logprobs entry; ce a chat logprobs.content entry.
func ct(tok, lp string) string {
	return `{"token":"` + tok + `","logprob":` + lp + `,"bytes":[97]}`
}

func ce(tok, lp string, tops ...string) string {
	return `{"token":"` + tok + `","logprob":` + lp + `,"bytes":[97],"top_logprobs":[` + strings.Join(tops, ",") + `]}`
}

// chunk is a vLLM chat.completion.chunk for choice 0 holding entries.
func chunk(entries ...string) string {
	return chunkN(0, entries...)
}

func chunkN(index int, entries ...string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":%d,"delta":{"content":"x"},"logprobs":{"content":[%s]},"finish_reason":null}]}`,
		index, strings.Join(entries, ","))
}

// legacy is a text_completion body with the given logprobs object.
func legacyBody(logprobs string) string {
	return `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","logprobs":` + logprobs +
		`,"finish_reason":"length","stop_reason":null,"prompt_logprobs":null}],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2}}`
}

// tgiEvent is a TGI stream event.
func tgiEvent(id int, lp string, special bool, top, details string) string {
	ev := fmt.Sprintf(`{"index":%d,"token":{"id":%d,"text":"t","logprob":%s,"special":%t}`, id, id, lp, special)
	if top != "" {
		ev += `,"top_tokens":[` + top + `]`
	}
	if details == "" {
		details = "null"
	}
	return ev + `,"generated_text":null,"details":` + details + `}`
}

func tt(id int, lp string) string {
	return fmt.Sprintf(`{"id":%d,"text":"t","logprob":%s,"special":false}`, id, lp)
}

// one returns the summary fields of a single counted token of probability
// p with entropy h and, when margin >= 0, that margin.
func one(p, h, margin float64, topK int) Summary {
	s := Summary{Tokens: 1, SumLogprob: math.Log(p), MeanLogprob: math.Log(p), Perplexity: 1 / p,
		MeanEntropy: h, MeanMargin: math.NaN(), TopK: topK, OutputTokens: 1, Choices: 1}
	if margin >= 0 {
		s.MeanMargin, s.MarginTokens = margin, 1
	}
	if p < DefaultLowProb {
		s.LowShare = 1
	}
	return s
}

// none is the summary of a response without counted tokens.
func none(s Summary) Summary {
	nan := math.NaN()
	s.MeanLogprob, s.Perplexity, s.MeanEntropy, s.MeanMargin, s.LowShare = nan, nan, nan, nan, nan
	return s
}

func with(s Summary, edit func(*Summary)) Summary {
	edit(&s)
	return s
}

func chatIDs(s Summary) Summary {
	s.ID, s.Model = "chatcmpl-1", "m"
	return s
}

func TestEdgeCases(t *testing.T) {
	twoTokens := func(s Summary) Summary { // chat chunk of the same token twice
		s.Tokens, s.SumLogprob, s.OutputTokens, s.MarginTokens = 2, 2*s.SumLogprob, 2, 2*s.MarginTokens
		return s
	}
	tests := []struct {
		name     string
		format   Format
		events   []string // fed to AddEvent; body is used when nil
		body     string
		opts     Options
		want     Summary
		wantErrs int
	}{
		{name: "chosen listed", events: []string{chunk(ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25))))},
			want: chatIDs(one(.5, H(.5, .25), .25, 2))},
		{name: "chosen unlisted is added to the known set", events: []string{chunk(ce("c", L(.1), ct("a", L(.6)), ct("b", L(.3))))},
			want: chatIDs(one(.1, H(.6, .3, .1), .3, 2))},
		{name: "top_logprobs before token", events: []string{chunk(`{"top_logprobs":[` + ct("a", L(.5)) + `,` + ct("b", L(.25)) + `],"bytes":null,"logprob":` + L(.5) + `,"token":"a"}`)},
			want: chatIDs(one(.5, H(.5, .25), .25, 2))},
		{name: "no top_logprobs key", events: []string{chunk(`{"token":"a","logprob":` + L(.8) + `}`)},
			want: chatIDs(one(.8, H(.8), -1, 0))},
		{name: "top_logprobs null", events: []string{chunk(`{"token":"a","logprob":` + L(.8) + `,"top_logprobs":null}`)},
			want: chatIDs(one(.8, H(.8), -1, 0))},
		{name: "null chosen logprob", events: []string{chunk(ce("a", "null", ct("a", L(.5))))},
			want: chatIDs(none(Summary{Invalid: 1, OutputTokens: 1, Choices: 1}))},
		{name: "placeholders", events: []string{chunk(ce("a", "-9999.0"), ce("b", "-12000"), ce("c", "-9999"))},
			want: chatIDs(none(Summary{Invalid: 3, OutputTokens: 3, Choices: 1}))},
		{name: "NaN and infinities", events: []string{chunk(ce("a", "NaN"), ce("b", "Infinity"), ce("c", "-Infinity"), ce("d", "1e999"), ce("e", `"x"`))},
			want: chatIDs(none(Summary{Invalid: 5, OutputTokens: 5, Choices: 1}))},
		{name: "unusable alternatives left out", events: []string{chunk(ce("a", L(.5), ct("a", L(.5)), ct("b", "NaN"), ct("c", "-9999.0"), ct("d", "-Infinity"), ct("e", "null")))},
			want: chatIDs(one(.5, H(.5), -1, 1))},
		{name: "listed mass above one drops the residual", events: []string{chunk(ce("a", "0", ct("a", "0"), ct("b", "-0.1")))},
			want: chatIDs(with(one(1, math.Exp(-0.1)*0.1, 1-math.Exp(-0.1), 2), func(s *Summary) { s.SumLogprob, s.MeanLogprob = 0, 0 }))},
		{name: "same chunk twice", events: []string{chunk(ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25)))), chunk(ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25))))},
			want: chatIDs(twoTokens(one(.5, H(.5, .25), .25, 2)))},
		{name: "usage-only chunk and [DONE]",
			events: []string{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}}`, "[DONE]", " [DONE] ", ""},
			want:   chatIDs(none(Summary{OutputTokens: 3, PromptTokens: 7}))},
		{name: "finish reason, last seen wins",
			events: []string{`{"choices":[{"index":0,"finish_reason":null}]}`, `{"choices":[{"index":0,"finish_reason":"length"}]}`, `{"choices":[{"index":0,"finish_reason":null}]}`},
			want:   none(Summary{FinishReason: "length", Choices: 1})},
		{name: "choices null or missing", events: []string{`{"id":"x","choices":null}`, `{"id":"x","usage":null}`},
			want: none(Summary{ID: "x"})},
		{name: "fields of unexpected types are ignored", events: []string{`{"id":5,"model":{"a":[1]},"choices":[{"logprobs":5},{"logprobs":{"content":{}}},{"logprobs":{"content":[7,"x",null]}},7],"usage":[]}`},
			want: none(Summary{Choices: 1})},
		{name: "escaped strings are decoded", events: []string{`{"id":"a\"b\\c\/","model":"caf\u00e9 \ud83d\ude00 \ud800","choices":[{"index":0,"finish_reason":"st\u006fp"}]}`},
			want: none(Summary{ID: `a"b\c/`, Model: "café 😀 \uFFFD", FinishReason: "stop", Choices: 1})},
		{name: "choices are pooled", events: []string{chunkN(0, ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25)))), chunkN(1, ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25))))},
			want: chatIDs(with(twoTokens(one(.5, H(.5, .25), .25, 2)), func(s *Summary) { s.Choices = 2 }))},
		{name: "MaxTopK caps the alternatives read", opts: Options{MaxTopK: 2},
			events: []string{chunk(ce("c", L(.1), ct("a", L(.5)), ct("b", L(.2)), ct("c", L(.1)), ct("d", L(.05))))},
			want:   chatIDs(one(.1, H(.5, .2, .1), .3, 2))},
		{name: "LowProb option", opts: Options{LowProb: 0.9}, events: []string{chunk(ce("a", L(.8)))},
			want: chatIDs(with(one(.8, H(.8), -1, 0), func(s *Summary) { s.LowShare = 1 }))},
		{name: "malformed payloads count and the summary survives", wantErrs: 4,
			events: []string{chunk(ce("a", L(.8))), `{"choices":[}`, `"hello"`, `{"id":"chatcmpl-1"} {"id":"y"}`, `{"choices":[{"logprobs":{"content":[` + ce("a", L(.8)) + `,{"token":`, chunk(ce("a", L(.8)))},
			want: chatIDs(with(twoTokens(one(.8, H(.8), -1, 0)), func(s *Summary) {
				s.Tokens, s.SumLogprob, s.OutputTokens = 3, 3*math.Log(.8), 3
				s.ParseErrors, s.Truncated = 4, true
			}))},
		{name: "deep nesting is an error, not a stack overflow", wantErrs: 1,
			events: []string{`{"x":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`},
			want:   none(Summary{ParseErrors: 1})},
		{name: "whole chat body", body: `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ab","tool_calls":[]},"logprobs":{"content":[` +
			ce("a", L(.5), ct("a", L(.5)), ct("b", L(.25))) + `,` + ce("c", L(.1), ct("a", L(.6)), ct("b", L(.3))) + `],"refusal":null},"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":7,"completion_tokens":2},"prompt_logprobs":[null,{"1":{"logprob":-1.5,"rank":2,"decoded_token":"x"}}]}`,
			want: Summary{Tokens: 2, SumLogprob: math.Log(.05), MeanLogprob: math.Log(.05) / 2, Perplexity: math.Exp(-math.Log(.05) / 2),
				MeanEntropy: (H(.5, .25) + H(.6, .3, .1)) / 2, MeanMargin: .275, MarginTokens: 2, LowShare: .5, TopK: 2,
				OutputTokens: 2, PromptTokens: 5, FinishReason: "stop", ID: "chatcmpl-9", Model: "m", Choices: 1}},

		// Legacy completions.
		{name: "legacy vLLM order, echo's null first logprob", format: OpenAICompletion,
			body: legacyBody(`{"text_offset":[0,1],"token_logprobs":[null,` + L(.5) + `],"tokens":["x","a"],"top_logprobs":[null,{"a":` + L(.5) + `,"b":` + L(.25) + `}]}`),
			want: with(one(.5, H(.5, .25), .25, 2), func(s *Summary) {
				s.Invalid, s.OutputTokens, s.PromptTokens, s.FinishReason, s.ID, s.Model = 1, 2, 4, "length", "cmpl-1", "m"
			})},
		{name: "legacy OpenAI order", format: OpenAICompletion,
			body: legacyBody(`{"tokens":["x","a"],"token_logprobs":[null,` + L(.5) + `],"top_logprobs":[null,{"a":` + L(.5) + `,"b":` + L(.25) + `}],"text_offset":[0,1]}`),
			want: with(one(.5, H(.5, .25), .25, 2), func(s *Summary) {
				s.Invalid, s.OutputTokens, s.PromptTokens, s.FinishReason, s.ID, s.Model = 1, 2, 4, "length", "cmpl-1", "m"
			})},
		{name: "legacy top_logprobs first", format: OpenAICompletion,
			body: legacyBody(`{"top_logprobs":[null,{"a":` + L(.5) + `,"b":` + L(.25) + `}],"tokens":["x","a"],"token_logprobs":[null,` + L(.5) + `]}`),
			want: with(one(.5, H(.5, .25), .25, 2), func(s *Summary) {
				s.Invalid, s.OutputTokens, s.PromptTokens, s.FinishReason, s.ID, s.Model = 1, 2, 4, "length", "cmpl-1", "m"
			})},
		{name: "legacy without tokens matches the chosen token by logprob", format: OpenAICompletion,
			events: []string{`{"choices":[{"index":0,"logprobs":{"token_logprobs":[` + L(.25) + `],"top_logprobs":[{"a":` + L(.5) + `,"b":` + L(.25) + `}]}}]}`},
			want:   one(.25, H(.5, .25), .25, 2)},
		{name: "legacy chosen unlisted, vLLM appends it", format: OpenAICompletion,
			events: []string{`{"choices":[{"index":0,"logprobs":{"tokens":["c"],"token_logprobs":[` + L(.1) + `],"top_logprobs":[{"a":` + L(.6) + `,"b":` + L(.3) + `,"c":` + L(.1) + `}]}}]}`},
			want:   one(.1, H(.6, .3, .1), .3, 3)},
		{name: "legacy non-finite logprobs", format: OpenAICompletion,
			events: []string{`{"choices":[{"index":0,"logprobs":{"tokens":["a","b","c","d"],"token_logprobs":[NaN,Infinity,-9999.0,` + L(.5) + `],"top_logprobs":null}}]}`},
			want:   with(one(.5, H(.5), -1, 0), func(s *Summary) { s.Invalid, s.OutputTokens = 3, 4 })},
		{name: "legacy arrays of unequal length", format: OpenAICompletion,
			events: []string{`{"choices":[{"index":0,"logprobs":{"tokens":["a"],"token_logprobs":[` + L(.5) + `,` + L(.5) + `],"top_logprobs":[{"a":` + L(.5) + `,"b":` + L(.25) + `},{"z":-1},{"y":-2}]}}]}`},
			want: Summary{Tokens: 2, SumLogprob: 2 * math.Log(.5), MeanLogprob: math.Log(.5), Perplexity: 2,
				// The second position has no token text: matched by logprob.
				MeanEntropy: (H(.5, .25) + H(math.Exp(-1), .5)) / 2, MeanMargin: (.25 + .5 - math.Exp(-1)) / 2, MarginTokens: 2, TopK: 2, OutputTokens: 2, Choices: 1}},
		{name: "legacy MaxTopK reads k+1 dict entries", format: OpenAICompletion, opts: Options{MaxTopK: 1},
			events: []string{`{"choices":[{"index":0,"logprobs":{"tokens":["c"],"token_logprobs":[` + L(.1) + `],"top_logprobs":[{"a":` + L(.6) + `,"c":` + L(.1) + `,"b":` + L(.3) + `}]}}]}`},
			want:   one(.1, H(.6, .1), .5, 2)},

		// TGI.
		{name: "TGI stream with a special EOS token", format: TGIStream,
			events: []string{
				tgiEvent(1, L(.5), false, tt(1, L(.5))+","+tt(2, L(.25)), ""),
				tgiEvent(2, "-0.01", true, tt(2, "-0.01"), `{"finish_reason":"eos_token","generated_tokens":2,"seed":null,"input_length":6}`),
			},
			want: with(one(.5, H(.5, .25), .25, 2), func(s *Summary) {
				s.Special, s.OutputTokens, s.PromptTokens, s.FinishReason = 1, 2, 6, "eos_token"
			})},
		{name: "TGI null logprob, top_tokens before token", format: TGIStream,
			events: []string{`{"index":1,"top_tokens":[` + tt(1, L(.5)) + `],"token":{"id":1,"text":"t","logprob":null,"special":false},"generated_text":null,"details":null}`,
				`{"top_tokens":[` + tt(3, L(.5)) + `,` + tt(1, L(.25)) + `],"token":{"special":false,"logprob":` + L(.25) + `,"text":"t","id":1}}`},
			want: with(one(.25, H(.5, .25), .25, 2), func(s *Summary) { s.Invalid, s.OutputTokens = 1, 2 })},
		{name: "TGI generate, array body, older prompt_tokens", format: TGIGenerate,
			body: `[{"generated_text":"ab","details":{"finish_reason":"length","prompt_tokens":3,"generated_tokens":2,"seed":null,"prefill":[{"id":1,"text":"x","logprob":null}],"tokens":[` +
				tt(1, L(.5)) + `,` + tt(3, L(.1)) + `],"top_tokens":[[` + tt(1, L(.5)) + `,` + tt(2, L(.25)) + `],[` + tt(1, L(.6)) + `,` + tt(2, L(.3)) + `]]}}]`,
			want: Summary{Tokens: 2, SumLogprob: math.Log(.05), MeanLogprob: math.Log(.05) / 2, Perplexity: math.Exp(-math.Log(.05) / 2),
				MeanEntropy: (H(.5, .25) + H(.6, .3, .1)) / 2, MeanMargin: .275, MarginTokens: 2, LowShare: .5, TopK: 2,
				OutputTokens: 2, PromptTokens: 3, FinishReason: "length", Choices: 1}},
		{name: "TGI generate without top_tokens", format: TGIGenerate,
			body: `{"generated_text":"a","details":{"finish_reason":"stop_sequence","generated_tokens":1,"seed":1,"prefill":[],"tokens":[` + tt(1, L(.8)) + `]}}`,
			want: with(one(.8, H(.8), -1, 0), func(s *Summary) { s.FinishReason = "stop_sequence" })},
		{name: "TGI generate without details", format: TGIGenerate, body: `{"generated_text":"a"}`,
			want: none(Summary{Choices: 1})},
		{name: "TGI error event", format: TGIStream, events: []string{`{"error":"Request failed during generation","error_type":"generation"}`},
			want: none(Summary{Choices: 1})},
		{name: "unknown keys and literals are skipped", format: TGIStream,
			events: []string{`{"a":true,"b":false,"c":null,"d":-1.5e-3,"e":{"f":[{}, [], "\u00e9\n"]},"index":1,"token":{"id":1,"logprob":` + L(.8) + `,"special":false,"x":[1,2]}}`},
			want:   one(.8, H(.8), -1, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var a Accumulator
			a.Reset(tc.format, tc.opts)
			errs := 0
			if tc.events == nil {
				if err := a.AddBody([]byte(tc.body)); err != nil {
					errs++
				}
			}
			for _, e := range tc.events {
				if err := a.AddEvent([]byte(e)); err != nil {
					if !errors.Is(err, ErrSyntax) {
						t.Errorf("error %v does not wrap ErrSyntax", err)
					}
					errs++
				}
			}
			if errs != tc.wantErrs {
				t.Errorf("%d errors, want %d", errs, tc.wantErrs)
			}
			if diff := cmp.Diff(tc.want, a.Summary(), approx); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}

func TestZeroValueAndReset(t *testing.T) {
	var a Accumulator // zero value: OpenAIChat, default options
	if err := a.AddEvent([]byte(chunk(ce("a", L(.4))))); err != nil {
		t.Fatal(err)
	}
	if s := a.Summary(); s.Tokens != 1 || s.LowShare != 1 || s.Model != "m" {
		t.Errorf("zero value: %+v", s)
	}
	a.Reset(TGIStream, Options{})
	if diff := cmp.Diff(none(Summary{}), a.Summary(), approx); diff != "" {
		t.Errorf("after Reset (-want +got):\n%s", diff)
	}
	a.Reset(Format(9), Options{})
	if err := a.AddEvent([]byte(`{}`)); !errors.Is(err, ErrFormat) {
		t.Errorf("unknown format: err %v, want ErrFormat", err)
	}
}

func TestOptionsNormalized(t *testing.T) {
	tests := []struct {
		in, want Options
	}{
		{Options{}, Options{LowProb: DefaultLowProb, MaxTopK: DefaultMaxTopK}},
		{Options{LowProb: math.NaN(), MaxTopK: -3}, Options{LowProb: DefaultLowProb, MaxTopK: DefaultMaxTopK}},
		{Options{LowProb: 1.5, MaxTopK: 1000}, Options{LowProb: DefaultLowProb, MaxTopK: MaxTopKLimit}},
		{Options{LowProb: 1, MaxTopK: 5}, Options{LowProb: 1, MaxTopK: 5}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.in), func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.in.normalized()); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// TestNoAllocsPerToken pins the steady-state contract: once a response's id
// and model are stored, a chunk or event allocates nothing.
func TestNoAllocsPerToken(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	for _, name := range []string{"chat_stream_top5.sse", "completions_stream_lp3.sse", "tgi_stream_top5.sse"} {
		f := fixtureNamed(t, name)
		evs := events(loadFixture(t, f))
		ev := evs[len(evs)/2]
		var a Accumulator
		a.Reset(f.format, Options{})
		if n := testing.AllocsPerRun(200, func() { a.AddEvent(ev) }); n != 0 {
			t.Errorf("%s: %v allocations per event", name, n)
		}
	}
	f := fixtureNamed(t, "chat_top5.json")
	body := loadFixture(t, f)
	var a Accumulator
	a.Reset(f.format, Options{})
	a.AddBody(body)
	if n := testing.AllocsPerRun(20, func() { a.Reset(f.format, Options{}); a.AddBody(body) }); n > 1 {
		// The id is new for each response: one string.
		t.Errorf("chat body: %v allocations, want at most 1", n)
	}
}
