package sim

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

type testMessage struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func TestMessagesPlain(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	body := `{"model":"sim-model","max_tokens":5,"system":"Be brief.","messages":[{"role":"user","content":"What is a gateway?"}]}`
	code, _, b := testutil.Post(t, ts.URL+"/v1/messages", body)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	m := decode[testMessage](t, b)
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "sim-model" ||
		len(m.Content) != 1 || m.Content[0].Type != "text" || m.StopReason == nil || *m.StopReason != "max_tokens" ||
		!bytes.Contains(b, []byte(`"stop_sequence":null`)) {
		t.Errorf("message %s", b)
	}
	if m.Usage.InputTokens != 7 || m.Usage.OutputTokens != 5 {
		t.Errorf("usage %+v", m.Usage)
	}
	// The same text as chat generates for the same conversation.
	_, _, cb := testutil.Post(t, ts.URL+"/v1/chat/completions",
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is a gateway?"}],"max_tokens":5}`)
	if c := decode[struct {
		Choices []struct{ Message struct{ Content string } }
	}](t, cb); c.Choices[0].Message.Content != m.Content[0].Text {
		t.Errorf("messages %q, chat %q", m.Content[0].Text, c.Choices[0].Message.Content)
	}
	// Deterministic.
	if _, _, b2 := testutil.Post(t, ts.URL+"/v1/messages", body); !bytes.Equal(b, b2) {
		t.Errorf("not deterministic:\n%s\n%s", b, b2)
	}
	// max_tokens above OutputTokens: the model ends its turn, and system
	// and content as text blocks count alike.
	_, _, b = testutil.Post(t, ts.URL+"/v1/messages",
		`{"model":"sim-model","max_tokens":1024,"system":[{"type":"text","text":"Be brief."}],"messages":[{"role":"user","content":[{"type":"text","text":"What is a gateway?"}]}]}`)
	m = decode[testMessage](t, b)
	if *m.StopReason != "end_turn" || m.Usage.OutputTokens != DefaultKnobs().OutputTokens || m.Usage.InputTokens != 7 {
		t.Errorf("end_turn: %s", b)
	}
}

func TestMessagesStreaming(t *testing.T) {
	k := DefaultKnobs()
	k.TTFT, k.ITL = 20*time.Millisecond, 10*time.Millisecond
	s, ts := newTestServer(t, k)
	body := `{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":"Tell me a story"}],"stream":true}`
	start := time.Now()
	code, h, b := testutil.Post(t, ts.URL+"/v1/messages", body)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", code, b)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("4 tokens in %v, want at least TTFT + 3·ITL = 50ms", d)
	}
	evs := namedEvents(t, b)
	want := []string{"message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta",
		"content_block_delta", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
	if len(evs) != len(want) {
		t.Fatalf("%d events:\n%s", len(evs), b)
	}
	var text strings.Builder
	for i, ev := range evs {
		var v struct {
			Type    string
			Index   int
			Message testMessage
			Delta   struct {
				Type, Text string
				StopReason *string `json:"stop_reason"`
			}
			Usage struct {
				OutputTokens int `json:"output_tokens"`
			}
		}
		if err := json.Unmarshal(ev.data, &v); err != nil {
			t.Fatal(err)
		}
		if ev.name != want[i] || v.Type != want[i] {
			t.Errorf("event %d: %s %s, want %s", i, ev.name, ev.data, want[i])
		}
		switch v.Type {
		case "message_start":
			if v.Message.Usage.InputTokens != 4 || v.Message.Usage.OutputTokens != 0 || v.Message.StopReason != nil || len(v.Message.Content) != 0 {
				t.Errorf("message_start %s", ev.data)
			}
		case "content_block_delta":
			if v.Delta.Type != "text_delta" || v.Delta.Text == "" {
				t.Errorf("delta %s", ev.data)
			}
			text.WriteString(v.Delta.Text)
		case "message_delta":
			if v.Delta.StopReason == nil || *v.Delta.StopReason != "max_tokens" || v.Usage.OutputTokens != 4 ||
				!bytes.Contains(ev.data, []byte(`"stop_sequence":null`)) {
				t.Errorf("message_delta %s", ev.data)
			}
		}
	}
	_, _, pb := testutil.Post(t, ts.URL+"/v1/messages", strings.Replace(body, `,"stream":true`, "", 1))
	if p := decode[testMessage](t, pb); p.Content[0].Text != text.String() {
		t.Errorf("plain %q, streamed %q", p.Content[0].Text, text.String())
	}
	if _, _, b2 := testutil.Post(t, ts.URL+"/v1/messages", body); !bytes.Equal(b, b2) {
		t.Error("stream not deterministic")
	}
	// The metrics count the requests and their tokens.
	_, mb := testutil.Get(t, ts.URL+"/metrics")
	if !bytes.Contains(mb, []byte(`vllm:generation_tokens_total{model_name="sim-model"} 12`)) ||
		!bytes.Contains(mb, []byte(`vllm:request_success_total{finished_reason="length",model_name="sim-model"} 3`)) {
		t.Errorf("metrics:\n%s", mb)
	}
	if st := s.Stats(); st.Requests != 3 || st.Running != 0 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestMessagesErrors(t *testing.T) {
	k := fastKnobs()
	k.MaxModelLen = 100
	_, ts := newTestServer(t, k)
	for _, tc := range []struct {
		body   string
		status int
		typ    string
		msg    string
	}{
		{`{"model":"sim-model","messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "max_tokens: Field required"},
		{`{"max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "model: Field required"},
		{`{"model":"other","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`, 404, "not_found_error", "model: other"},
		{`{"model":"sim-model","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error", "max_tokens: Input should be greater than or equal to 1"},
		{`{"model":"sim-model","max_tokens":3}`, 400, "invalid_request_error", "messages: Field required"},
		{`{"model":"sim-model","max_tokens":3,"messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error", "messages.0.role: Input should be 'user' or 'assistant'"},
		{`{"model":"sim-model","max_tokens":3,"messages":[{"role":"user","content":7}]}`, 400, "invalid_request_error", "messages.0.content: must be a string or an array of content parts"},
		{`{"model":"sim-model","max_tokens":3,"messages":[{"role":"user","content":"` + strings.Repeat("x", 500) + `"}]}`, 400, "invalid_request_error",
			"This model's maximum context length is 100 tokens. However, you requested 128 tokens (125 in the messages, 3 in the completion). Please reduce the length of the messages or completion."},
		{`{"model":`, 400, "invalid_request_error", "unexpected end of JSON input (at byte 9)"},
	} {
		code, _, b := testutil.Post(t, ts.URL+"/v1/messages", tc.body)
		e := decode[anthropicError](t, b)
		if code != tc.status || e.Type != "error" || e.Error.Type != tc.typ || e.Error.Message != tc.msg {
			t.Errorf("%.80s: %d %s, want %d %s %q", tc.body, code, b, tc.status, tc.typ, tc.msg)
		}
	}
	k.ErrorRate = 1
	_, ts = newTestServer(t, k)
	for _, stream := range []string{"false", "true"} {
		code, _, b := testutil.Post(t, ts.URL+"/v1/messages", `{"model":"sim-model","max_tokens":3,"stream":`+stream+`,"messages":[{"role":"user","content":"x"}]}`)
		if e := decode[anthropicError](t, b); code != 500 || e.Error.Type != "api_error" {
			t.Errorf("error rate: %d %s", code, b)
		}
	}
}

func TestMessagesCountTokens(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	code, _, b := testutil.Post(t, ts.URL+"/v1/messages/count_tokens",
		`{"model":"sim-model","system":"Be brief.","messages":[{"role":"user","content":"What is a gateway?"}]}`)
	if code != 200 || string(b) != `{"input_tokens":7}` {
		t.Errorf("%d %s", code, b)
	}
	code, _, b = testutil.Post(t, ts.URL+"/v1/messages/count_tokens", `{"model":"sim-model"}`)
	if code != 400 || decode[anthropicError](t, b).Error.Message != "messages: Field required" {
		t.Errorf("%d %s", code, b)
	}
}
