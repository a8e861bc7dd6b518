package analyzers

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/sse"
)

// apiRequests are the same prompt in the three request formats.
var apiRequests = map[exchange.Operation]string{
	exchange.OpChat:      `{"model":"sim-model","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"How does the gateway know the model is getting worse?"}],"max_tokens":32,"temperature":0.7,"logprobs":true,"top_logprobs":5,"stream":true}`,
	exchange.OpResponses: `{"model":"sim-model","instructions":"Be brief.","input":"How does the gateway know the model is getting worse?","max_output_tokens":32,"temperature":0.7,"include":["message.output_text.logprobs"],"top_logprobs":5,"stream":true}`,
	exchange.OpMessages:  `{"model":"sim-model","system":"Be brief.","messages":[{"role":"user","content":"How does the gateway know the model is getting worse?"}],"max_tokens":32,"temperature":0.7,"stream":true}`,
}

// apiStreams are recorded streams of the three APIs; the chat and
// Responses ones carry the same tokens and logprobs.
var apiStreams = map[exchange.Operation]string{
	exchange.OpChat:      "logprob/testdata/chat_stream_top5.sse",
	exchange.OpResponses: "logprob/testdata/responses_stream_top5.sse",
	exchange.OpMessages:  "testdata/messages_stream.sse",
}

// TestAPIsFeatures: the pipeline reads each operation's prompt in its own
// format, to the same features.
func TestAPIsFeatures(t *testing.T) {
	want, err := inputdrift.ExtractAPI(apiOf(exchange.OpChat), []byte(apiRequests[exchange.OpChat]))
	if err != nil {
		t.Fatal(err)
	}
	if want.Vector[inputdrift.FeatMessages] != 2 || !want.System {
		t.Fatalf("chat features %+v", want)
	}
	for op, body := range apiRequests {
		got, err := inputdrift.ExtractAPI(apiOf(op), []byte(body))
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		if d := cmp.Diff(want, got, cmpopts.EquateNaNs()); d != "" {
			t.Errorf("%s features differ from chat's (-chat +%s):\n%s", op, op, d)
		}
	}
}

// streamThrough runs one recorded stream of op through a fresh pipeline,
// one byte at a time as the gateway's tap splits it, and evaluates.
func streamThrough(t *testing.T, op exchange.Operation) (*Pipeline, *Signals) {
	t.Helper()
	raw, err := os.ReadFile(apiStreams[op])
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 29, 10, 0, 30, 0, time.UTC)
	p, err := New(Options{Config: config.Default().Analyzers, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	r := &exchange.Request{Route: "/v1/" + string(op), Operation: op, Model: "sim-model", Backend: "a", Stream: true,
		Tenant: "team-a", Start: now.Add(-2 * time.Second), Body: []byte(apiRequests[op])}
	p.OnPrompt(r.Start, r.Operation, r.Body)
	p.OnRequest(r)
	var sp sse.Splitter
	for i := range raw {
		sp.Write(raw[i:i+1], func(ev []byte) { p.OnEvent(r, ev) })
	}
	sp.Flush(func(ev []byte) { p.OnEvent(r, ev) })
	p.OnResponse(r, &exchange.Response{Status: 200, Latency: 2 * time.Second, TTFT: 300 * time.Millisecond,
		PromptTokens: 14, CompletionTokens: 32, UsageSource: exchange.UsageReported, Events: 40})
	if n := testutil.ToFloat64(p.m.parseErrors); n != 0 {
		t.Errorf("%s: %v parse errors", op, n)
	}
	if n := testutil.ToFloat64(p.m.featureErrors); n != 0 {
		t.Errorf("%s: %v feature errors", op, n)
	}
	return p, p.Evaluate()
}

// TestAPIsThroughPipeline: a Responses stream counts in the confidence and
// output signals as the chat stream with the same tokens does; a Messages
// stream, which has no logprobs, counts in neither, and the signals say
// why; all three count in the drift and latency windows and in the usage.
func TestAPIsThroughPipeline(t *testing.T) {
	pc, chat := streamThrough(t, exchange.OpChat)
	pr, resp := streamThrough(t, exchange.OpResponses)
	pm, msgs := streamThrough(t, exchange.OpMessages)

	if chat.Confidence.Responses != 1 || math.IsNaN(float64(chat.Confidence.MeanLogprob)) {
		t.Fatalf("chat confidence %+v, want the response counted", chat.Confidence.Decay)
	}
	// As /admin/signals shows them (stats.Num's NaN is null).
	js := func(v any) string {
		b, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if d := cmp.Diff(js(chat), js(resp)); d != "" {
		t.Errorf("Responses signals differ from chat's (-chat +responses):\n%s", d)
	}
	if msgs.Confidence.Responses != 0 || !math.IsNaN(float64(msgs.Output.Current)) {
		t.Errorf("Messages counted in confidence %+v or output %+v", msgs.Confidence.Decay, *msgs.Output)
	}
	note := map[string]string{"messages": "no logprobs in the Messages API"}
	if d := cmp.Diff(note, msgs.Confidence.Sources); d != "" || cmp.Diff(note, msgs.Output.Sources) != "" {
		t.Errorf("Messages sources: confidence %v, output %v", msgs.Confidence.Sources, msgs.Output.Sources)
	}
	if chat.Confidence.Sources != nil || chat.Output.Sources != nil {
		t.Error("chat signals carry sources")
	}
	if msgs.Latency.Responses != 1 || msgs.Drift.Current != 1 {
		t.Errorf("Messages: latency responses %d, drift requests %d, want 1 and 1", msgs.Latency.Responses, msgs.Drift.Current)
	}
	if d := cmp.Diff(js(chat.Drift), js(msgs.Drift)); d != "" {
		t.Errorf("Messages drift differs from chat's (-chat +messages):\n%s", d)
	}
	b, err := pm.SignalsJSON(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Confidence, Output struct {
			Sources map[string]string `json:"sources"`
		}
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Confidence.Sources["messages"] == "" || doc.Output.Sources["messages"] == "" {
		t.Errorf("/admin/signals %s: no sources note (%v)", b, err)
	}
	for op, p := range map[exchange.Operation]*Pipeline{exchange.OpChat: pc, exchange.OpResponses: pr, exchange.OpMessages: pm} {
		u, err := p.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Hour.Totals; got.Requests != 1 || got.PromptTokens != 14 || got.CompletionTokens != 32 {
			t.Errorf("%s: usage %+v", op, got)
		}
	}
}
