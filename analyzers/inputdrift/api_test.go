package inputdrift

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// apiCases are Responses and Messages bodies for the fast path and
// encoding/json to agree on.
var apiCases = []struct {
	api  API
	body string
}{
	{Responses, `{"model":"m","instructions":"Be brief.","input":"Hello 世界","max_output_tokens":64,"temperature":0.2,"top_p":0.9}`},
	{Responses, `{"model":"m","input":[{"type":"message","role":"developer","content":"x"},{"role":"user","content":[{"type":"input_text","text":"Привет"},{"type":"input_image","image_url":"u"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"42"}],"include":["message.output_text.logprobs"],"top_logprobs":5}`},
	{Responses, `{"input":null,"instructions":null}`},
	{Responses, `{"input":[],"instructions":[{"type":"input_text","text":"s"}]}`},
	{Responses, `{"input":{"x":1},"instructions":7,"max_tokens":5,"messages":[{"role":"user","content":"x"}]}`},
	{Responses, `{"input":[null]}`},
	{Responses, `{"input":["x"]}`},
	{Responses, `{"Input":"x"}`},
	{Responses, `{"input":"x","input":"y"}`},
	{Responses, `{"input":"x","max_output_tokens":"5"}`},
	{Responses, `{"model":"m","stream":true,"input":"` + "```go\\nx\\n```" + `"}`},
	{Messages, `{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"Hello 世界"}],"max_tokens":64,"temperature":0.2,"top_p":0.9}`},
	{Messages, `{"model":"m","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{"type":"base64","data":"xx"}}]},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"q":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"42"}]}]}`},
	{Messages, `{"messages":null,"system":null}`},
	{Messages, `{"messages":"x"}`},
	{Messages, `{"messages":[],"system":""}`},
	{Messages, `{"System":"x","messages":[]}`},
	{Messages, `{"prompt":"x","max_output_tokens":3,"messages":[{"role":"user","content":"y"}]}`},
}

func TestExtractAPIFastAgrees(t *testing.T) {
	decided := 0
	for _, c := range apiCases {
		if checkFast(t, c.api, []byte(c.body)) {
			decided++
		}
	}
	if decided < 10 {
		t.Errorf("the fast path decided %d of %d cases, want the common shapes", decided, len(apiCases))
	}
	// Chat bodies read as the other APIs: the fast path still agrees.
	for _, body := range extractCases {
		checkFast(t, Responses, []byte(body))
		checkFast(t, Messages, []byte(body))
	}
}

// TestExtractAPIEquivalent: the same prompt through the three APIs gives the
// same features.
func TestExtractAPIEquivalent(t *testing.T) {
	sys, user, asst := `You are terse. Use code: `+"```"+`x`+"```", `Summarise: 10:42 UTC, 502 errors — Привет 世界`, `Sure.`
	q := func(s string) string { return `"` + s + `"` }
	cases := []struct {
		name            string
		chat, resp, msg string
	}{{
		name: "strings",
		chat: `{"model":"m","messages":[{"role":"system","content":` + q(sys) + `},{"role":"user","content":` + q(user) + `}],"max_tokens":256,"temperature":0.7,"top_p":0.95}`,
		resp: `{"model":"m","instructions":` + q(sys) + `,"input":` + q(user) + `,"max_output_tokens":256,"temperature":0.7,"top_p":0.95}`,
		msg:  `{"model":"m","system":` + q(sys) + `,"messages":[{"role":"user","content":` + q(user) + `}],"max_tokens":256,"temperature":0.7,"top_p":0.95}`,
	}, {
		name: "parts",
		chat: `{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":` + q(sys) + `}]},{"role":"user","content":[{"type":"text","text":` + q(user) + `},{"type":"image_url","image_url":{"url":"u"}}]},{"role":"assistant","content":` + q(asst) + `},{"role":"user","content":"x"}],"max_tokens":9}`,
		resp: `{"model":"m","instructions":` + q(sys) + `,"input":[{"role":"user","content":[{"type":"input_text","text":` + q(user) + `},{"type":"input_image","image_url":"u"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":` + q(asst) + `}]},{"role":"user","content":"x"}],"max_output_tokens":9}`,
		msg:  `{"model":"m","system":[{"type":"text","text":` + q(sys) + `}],"messages":[{"role":"user","content":[{"type":"text","text":` + q(user) + `},{"type":"image","source":{"type":"url","url":"u"}}]},{"role":"assistant","content":[{"type":"text","text":` + q(asst) + `}]},{"role":"user","content":"x"}],"max_tokens":9}`,
	}}
	for _, c := range cases {
		want, err := Extract([]byte(c.chat))
		if err != nil {
			t.Fatalf("%s: chat: %v", c.name, err)
		}
		if !want.System || !want.Code || want.Vector[FeatMessages] < 2 {
			t.Fatalf("%s: chat features %+v: the case does not exercise system, code and messages", c.name, want)
		}
		for _, b := range []struct {
			api  API
			body string
		}{{Responses, c.resp}, {Messages, c.msg}} {
			for name, extract := range map[string]func(API, []byte) (Features, error){"ExtractAPI": ExtractAPI, "extractJSON": extractJSON} {
				got, err := extract(b.api, []byte(b.body))
				if err != nil {
					t.Fatalf("%s: api %d: %s: %v", c.name, b.api, name, err)
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
					t.Errorf("%s: api %d: %s differs from chat (-chat +api):\n%s", c.name, b.api, name, diff)
				}
			}
			if _, decided, _ := extractFast(b.api, []byte(b.body)); !decided {
				t.Errorf("%s: api %d: the fast path gave up", c.name, b.api)
			}
		}
	}
}

func TestExtractAPINoPrompt(t *testing.T) {
	for _, c := range []struct {
		api  API
		body string
	}{{Responses, `{"model":"m"}`}, {Responses, `{"input":[]}`}, {Messages, `{"messages":[]}`}, {Messages, `{"prompt":"x"}`}} {
		if _, err := ExtractAPI(c.api, []byte(c.body)); err != ErrNoPrompt {
			t.Errorf("api %d %s: err %v, want ErrNoPrompt", c.api, c.body, err)
		}
	}
}

func BenchmarkExtractResponses(b *testing.B) {
	body := []byte(`{"model":"llama-3-8b","instructions":"You are a helpful assistant. Answer briefly and cite sources when you can.","input":[{"role":"user","content":[{"type":"input_text","text":"Summarise the following incident report in three bullet points: at 10:42 UTC the load balancer began returning 502 errors for 4% of requests."}]}],"max_output_tokens":256,"temperature":0.7,"top_p":0.95}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ExtractAPI(Responses, body); err != nil {
			b.Fatal(err)
		}
	}
}
