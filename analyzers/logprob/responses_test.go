package logprob

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// responsesFixtures are Responses API recordings written from the chat
// fixtures' tokens (same text, logprobs, alternatives, usage and finish)
// in the shapes a vLLM-compatible server answers: a plain body, and a
// stream of typed events in which the tokens come with the deltas and are
// repeated by output_text.done, content_part.done, output_item.done and
// response.completed. They are not recorded from the simulator, which does
// not serve /v1/responses, so -update leaves them alone.
var responsesFixtures = []struct {
	fixture
	chat string // the chat fixture with the same tokens
}{
	{fixture{name: "responses_stream_top5.sse", format: OpenAIResponses, stream: true}, "chat_stream_top5.sse"},
	{fixture{name: "responses_top5.json", format: OpenAIResponses}, "chat_top5.json"},
}

// TestResponsesMatchChat: the same tokens read from a Responses recording
// and from chat's give the same summary, each token counted once.
func TestResponsesMatchChat(t *testing.T) {
	for _, rf := range responsesFixtures {
		t.Run(rf.name, func(t *testing.T) {
			cf := fixtureNamed(t, rf.chat)
			want := summarize(t, cf, loadFixture(t, cf), Options{})
			got := summarize(t, rf.fixture, loadFixture(t, rf.fixture), Options{})
			if want.Tokens == 0 {
				t.Fatal("the chat fixture has no tokens")
			}
			if !strings.HasPrefix(got.ID, "resp_") {
				t.Errorf("ID %q, want the response's", got.ID)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateNaNs(), cmpopts.IgnoreFields(Summary{}, "ID")); diff != "" {
				t.Errorf("Responses vs chat (-chat +responses):\n%s", diff)
			}
		})
	}
}

// TestResponsesTruncatedBody is TestTruncatedBody for the Responses body.
func TestResponsesTruncatedBody(t *testing.T) {
	// Every 5th length (17th under the race detector) lands in every kind
	// of token; the chat test covers every length of the shared walkers.
	step := 5
	if raceEnabled || testing.Short() {
		step = 17
	}
	checkCuts(t, responsesFixtures[1].fixture, 1, step)
}

func TestResponsesEdgeCases(t *testing.T) {
	e1 := ce("a", L(0.8), ct("a", L(0.8)), ct("b", L(0.1)))
	delta := func(lps string) string {
		return `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"a","logprobs":[` + lps + `]}`
	}
	cases := []struct {
		name    string
		events  []string
		body    string
		tokens  int
		finish  string
		id      string
		outToks int
		prompt  int
	}{
		{name: "delta", events: []string{delta(e1)}, tokens: 1, outToks: 1},
		{name: "type after logprobs", events: []string{`{"logprobs":[` + e1 + `],"delta":"a","type":"response.output_text.delta"}`}, tokens: 1, outToks: 1},
		{name: "logprobs of other events skipped", events: []string{
			`{"type":"response.output_text.done","text":"a","logprobs":[` + e1 + `]}`,
			`{"logprobs":[` + e1 + `],"type":"response.output_text.done"}`,
			`{"type":"response.content_part.done","part":{"type":"output_text","text":"a","logprobs":[` + e1 + `]}}`,
			`{"type":"response.output_item.done","item":{"type":"message","content":[{"type":"output_text","logprobs":[` + e1 + `]}]}}`,
			`{"type":"error","code":"x","message":"y"}`,
		}},
		{name: "completed gives id, usage and finish, not tokens", events: []string{
			`{"type":"response.created","response":{"id":"resp_1","model":"m","status":"in_progress","output":[]}}`,
			delta(e1), delta(e1),
			`{"type":"response.completed","response":{"id":"resp_1","model":"m","status":"completed","output":[{"type":"message","content":[{"type":"output_text","logprobs":[` + e1 + `,` + e1 + `]}]}],"usage":{"input_tokens":7,"output_tokens":2}}}`,
		}, tokens: 2, finish: "stop", id: "resp_1", outToks: 2, prompt: 7},
		{name: "incomplete", events: []string{
			`{"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"}}}`,
		}, finish: "length"},
		{name: "incomplete other reason", body: `{"status":"incomplete","incomplete_details":{"reason":"content_filter"},"output":[]}`, finish: "content_filter"},
		{name: "body", body: `{"id":"resp_2","object":"response","status":"completed","output":[{"type":"reasoning","summary":[]},{"type":"function_call","arguments":"{}"},{"type":"message","content":[{"type":"refusal","refusal":"no"},{"type":"output_text","text":"aa","logprobs":[` + e1 + `,` + e1 + `]}]}],"usage":{"input_tokens":3,"output_tokens":5}}`,
			tokens: 2, finish: "stop", id: "resp_2", outToks: 5, prompt: 3},
		{name: "body without logprobs", body: `{"id":"resp_3","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"aa"}]}],"usage":{"input_tokens":3,"output_tokens":5}}`,
			finish: "stop", id: "resp_3", outToks: 5, prompt: 3},
		{name: "odd values", body: `{"output":[1,null,{"content":[2,{"logprobs":null}]},{"content":{}}],"usage":[],"incomplete_details":"x","status":4}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a Accumulator
			a.Reset(OpenAIResponses, Options{})
			for _, ev := range c.events {
				if err := a.AddEvent([]byte(ev)); err != nil {
					t.Fatalf("AddEvent(%s): %v", ev, err)
				}
			}
			if c.body != "" {
				if err := a.AddBody([]byte(c.body)); err != nil {
					t.Fatalf("AddBody: %v", err)
				}
			}
			s := a.Summary()
			if s.Tokens != c.tokens || s.FinishReason != c.finish || s.ID != c.id || s.OutputTokens != c.outToks || s.PromptTokens != c.prompt {
				t.Errorf("summary %+v; want tokens %d, finish %q, id %q, output %d, prompt %d", s, c.tokens, c.finish, c.id, c.outToks, c.prompt)
			}
			if c.tokens == 1 {
				if s.TopK != 2 || s.MarginTokens != 1 || s.Choices != 1 {
					t.Errorf("summary %+v, want one position with two alternatives", s)
				}
			}
		})
	}
}

// TestResponsesNoAllocsPerToken: a delta event allocates nothing, as a chat
// chunk does.
func TestResponsesNoAllocsPerToken(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation allocates")
	}
	f := responsesFixtures[0].fixture
	evs := events(loadFixture(t, f))
	ev := evs[len(evs)/2]
	if !strings.Contains(string(ev), `"response.output_text.delta"`) {
		t.Fatalf("middle event %s is not a delta", ev)
	}
	var a Accumulator
	a.Reset(f.format, Options{})
	if n := testing.AllocsPerRun(200, func() { a.AddEvent(ev) }); n != 0 {
		t.Errorf("%v allocations per event", n)
	}
}

// BenchmarkResponsesStreamEvent is the per-delta cost of a Responses stream
// with top_logprobs=5.
func BenchmarkResponsesStreamEvent(b *testing.B) {
	f := responsesFixtures[0].fixture
	evs := events(loadFixture(b, f))
	ev := evs[len(evs)/2]
	var a Accumulator
	a.Reset(f.format, Options{})
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		if err := a.AddEvent(ev); err != nil {
			b.Fatal(err)
		}
	}
}
