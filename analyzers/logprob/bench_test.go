package logprob

import (
	"testing"
)

// middleEvent returns an event from the middle of a recorded stream: a
// token chunk with its alternatives, as in steady state.
func middleEvent(b *testing.B, name string) (Format, []byte) {
	f := fixtureNamed(b, name)
	evs := events(loadFixture(b, f))
	return f.format, evs[len(evs)/2]
}

func benchEvent(b *testing.B, name string) {
	format, ev := middleEvent(b, name)
	var a Accumulator
	a.Reset(format, Options{})
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		if err := a.AddEvent(ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChatStreamEvent is the per-chunk cost of a vLLM chat stream with
// top_logprobs=5: one token, five alternatives.
func BenchmarkChatStreamEvent(b *testing.B) { benchEvent(b, "chat_stream_top5.sse") }

// BenchmarkCompletionStreamEvent is a legacy completions chunk, logprobs=3.
func BenchmarkCompletionStreamEvent(b *testing.B) { benchEvent(b, "completions_stream_lp3.sse") }

// BenchmarkTGIStreamEvent is a TGI /generate_stream event, top_n_tokens=5.
func BenchmarkTGIStreamEvent(b *testing.B) { benchEvent(b, "tgi_stream_top5.sse") }

// BenchmarkChatBody is a whole 256-token chat.completion body with
// top_logprobs=5, read by a reused Accumulator (the id is new per response,
// so one allocation per body is expected).
func BenchmarkChatBody(b *testing.B) {
	ts := simServer(b, simOptions)
	body := postSim(b, ts, "/v1/chat/completions",
		`{"model":"sim-model",`+chatMsgs+`,"logprobs":true,"top_logprobs":5,"max_tokens":256}`)
	var a Accumulator
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		a.Reset(OpenAIChat, Options{})
		if err := a.AddBody(body); err != nil {
			b.Fatal(err)
		}
	}
	if s := a.Summary(); s.Tokens != 256 {
		b.Fatalf("%d tokens, want 256", s.Tokens)
	}
}
