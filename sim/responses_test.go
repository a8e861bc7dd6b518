package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// namedEvent is one event of a stream with "event:" lines.
type namedEvent struct {
	name string
	data []byte
}

// namedEvents splits an SSE body whose events carry an "event:" line.
func namedEvents(t *testing.T, body []byte) []namedEvent {
	t.Helper()
	var out []namedEvent
	for _, ev := range bytes.Split(bytes.TrimSuffix(body, []byte("\n\n")), []byte("\n\n")) {
		name, data, ok := bytes.Cut(ev, []byte("\n"))
		n, ok1 := bytes.CutPrefix(name, []byte("event: "))
		d, ok2 := bytes.CutPrefix(data, []byte("data: "))
		if !ok || !ok1 || !ok2 {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, namedEvent{string(n), d})
	}
	return out
}

func fastKnobs() Knobs {
	k := DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	return k
}

type testResponse struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	CreatedAt          int64   `json:"created_at"`
	Model              string  `json:"model"`
	Status             string  `json:"status"`
	PreviousResponseID *string `json:"previous_response_id"`
	Output             []struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Status  string `json:"status"`
		Role    string `json:"role"`
		Content []struct {
			Type        string `json:"type"`
			Text        string `json:"text"`
			Annotations []any  `json:"annotations"`
			Logprobs    []struct {
				Token       string
				Logprob     float64
				TopLogprobs []struct{ Token string } `json:"top_logprobs"`
			} `json:"logprobs"`
		} `json:"content"`
	} `json:"output"`
	Usage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (r testResponse) text() string { return r.Output[0].Content[0].Text }

func TestResponsesPlain(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	body := `{"model":"sim-model","instructions":"Be brief.","input":"What is a gateway?","max_output_tokens":7}`
	code, _, b := testutil.Post(t, ts.URL+"/v1/responses", body)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	r := decode[testResponse](t, b)
	if !strings.HasPrefix(r.ID, "resp_") || r.Object != "response" || r.Status != "completed" || r.Model != "sim-model" || r.CreatedAt != testCreated {
		t.Errorf("head %+v", r)
	}
	if len(r.Output) != 1 || r.Output[0].Type != "message" || r.Output[0].Role != "assistant" || !strings.HasPrefix(r.Output[0].ID, "msg_") ||
		r.Output[0].Status != "completed" || r.Output[0].Content[0].Type != "output_text" || r.Output[0].Content[0].Annotations == nil {
		t.Fatalf("output %s", b)
	}
	// "Be brief." + "What is a gateway?" is 27 characters: 7 tokens.
	if r.Usage.InputTokens != 7 || r.Usage.OutputTokens != 7 || r.Usage.TotalTokens != 14 {
		t.Errorf("usage %+v", r.Usage)
	}
	if r.Output[0].Content[0].Logprobs != nil || !bytes.Contains(b, []byte(`"logprobs":null`)) {
		t.Errorf("logprobs without include: %s", b)
	}
	// The same generation as chat on the same text.
	code, _, cb := testutil.Post(t, ts.URL+"/v1/chat/completions",
		`{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"What is a gateway?"}],"max_tokens":7}`)
	if code != 200 {
		t.Fatalf("chat %d %s", code, cb)
	}
	chat := decode[struct {
		Choices []struct{ Message struct{ Content string } }
	}](t, cb)
	if chat.Choices[0].Message.Content != r.text() {
		t.Errorf("responses %q, chat %q", r.text(), chat.Choices[0].Message.Content)
	}
	// Deterministic for a seed: the same bytes again, and from another
	// server with the same seed.
	_, _, b2 := testutil.Post(t, ts.URL+"/v1/responses", body)
	_, ts2 := newTestServer(t, fastKnobs())
	_, _, b3 := testutil.Post(t, ts2.URL+"/v1/responses", body)
	if !bytes.Equal(b, b2) || !bytes.Equal(b, b3) {
		t.Errorf("not deterministic:\n%s\n%s\n%s", b, b2, b3)
	}
	// Logprobs when included, with top_logprobs alternatives; the text is
	// the same.
	code, _, b = testutil.Post(t, ts.URL+"/v1/responses",
		`{"input":[{"role":"system","content":"Be brief."},{"type":"message","role":"user","content":[{"type":"input_text","text":"What is a gateway?"}]}],"max_output_tokens":7,"include":["message.output_text.logprobs"],"top_logprobs":3}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	lr := decode[testResponse](t, b)
	lps := lr.Output[0].Content[0].Logprobs
	if lr.text() != r.text() || len(lps) != 7 || len(lps[0].TopLogprobs) != 3 || lps[0].Logprob > 0 {
		t.Errorf("with logprobs: %s", b)
	}
}

func TestResponsesStreaming(t *testing.T) {
	k := DefaultKnobs()
	k.TTFT, k.ITL = 20*time.Millisecond, 10*time.Millisecond
	_, ts := newTestServer(t, k)
	body := `{"model":"sim-model","input":"Tell me a story","max_output_tokens":5,"stream":true,"include":["message.output_text.logprobs"],"top_logprobs":2}`
	start := time.Now()
	code, h, b := testutil.Post(t, ts.URL+"/v1/responses", body)
	elapsed := time.Since(start)
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %v %s", code, h, b)
	}
	if elapsed < 60*time.Millisecond {
		t.Errorf("stream of 5 tokens took %v, want at least TTFT + 4·ITL = 60ms", elapsed)
	}
	if bytes.Contains(b, []byte("[DONE]")) {
		t.Error("stream ends with [DONE]")
	}
	evs := namedEvents(t, b)
	want := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for range 5 {
		want = append(want, "response.output_text.delta")
	}
	want = append(want, "response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed")
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d:\n%s", len(evs), len(want), b)
	}
	var deltas strings.Builder
	for i, ev := range evs {
		var v struct {
			Type           string `json:"type"`
			SequenceNumber int    `json:"sequence_number"`
			Delta          string `json:"delta"`
			Text           string `json:"text"`
			Logprobs       []struct {
				Token       string
				TopLogprobs []struct{ Token string } `json:"top_logprobs"`
			} `json:"logprobs"`
		}
		if err := json.Unmarshal(ev.data, &v); err != nil {
			t.Fatal(err)
		}
		if ev.name != want[i] || v.Type != want[i] || v.SequenceNumber != i {
			t.Errorf("event %d: %s %s, want %s with sequence_number %d", i, ev.name, ev.data, want[i], i)
		}
		if v.Type == "response.output_text.delta" {
			deltas.WriteString(v.Delta)
			if len(v.Logprobs) != 1 || v.Logprobs[0].Token != v.Delta || len(v.Logprobs[0].TopLogprobs) != 2 {
				t.Errorf("delta logprobs %s", ev.data)
			}
		}
		if v.Type == "response.output_text.done" && (v.Text != deltas.String() || len(v.Logprobs) != 5) {
			t.Errorf("done %s, deltas %q", ev.data, deltas.String())
		}
	}
	var created, done struct{ Response testResponse }
	json.Unmarshal(evs[0].data, &created)
	json.Unmarshal(evs[len(evs)-1].data, &done)
	if created.Response.Status != "in_progress" || len(created.Response.Output) != 0 {
		t.Errorf("created %s", evs[0].data)
	}
	r := done.Response
	if r.Status != "completed" || r.text() != deltas.String() || r.Usage.OutputTokens != 5 || r.Usage.InputTokens != 4 || r.Usage.TotalTokens != 9 ||
		r.ID != created.Response.ID || len(r.Output[0].Content[0].Logprobs) != 5 {
		t.Errorf("completed %s", evs[len(evs)-1].data)
	}
	// The plain response of the same request is the same response.
	_, _, pb := testutil.Post(t, ts.URL+"/v1/responses", strings.Replace(body, `"stream":true`, `"stream":false`, 1))
	if p := decode[testResponse](t, pb); p.text() != r.text() || p.Usage != r.Usage {
		t.Errorf("plain %s, streamed %+v", pb, r)
	}
	// Deterministic bytes.
	_, _, b2 := testutil.Post(t, ts.URL+"/v1/responses", body)
	if !bytes.Equal(b, b2) {
		t.Error("stream not deterministic")
	}
	// Without logprobs, deltas carry an empty list.
	_, _, b = testutil.Post(t, ts.URL+"/v1/responses", `{"input":"x","stream":true,"max_output_tokens":1}`)
	if !bytes.Contains(b, []byte(`"delta":" the","logprobs":[]`)) && !bytes.Contains(b, []byte(`,"logprobs":[]}`)) {
		t.Errorf("delta without logprobs: %s", b)
	}
}

func TestResponsesStored(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	code, _, b := testutil.Post(t, ts.URL+"/v1/responses",
		`{"instructions":"Be brief.","input":[{"role":"user","content":"Hello"},{"type":"function_call_output","call_id":"c1","output":"42"}],"max_output_tokens":3}`)
	if code != 200 {
		t.Fatalf("%d %s", code, b)
	}
	first := decode[testResponse](t, b)

	code, got := testutil.Get(t, ts.URL+"/v1/responses/"+first.ID)
	if code != 200 || !bytes.Equal(got, b) {
		t.Errorf("GET: %d %s\nwant %s", code, got, b)
	}

	code, got = testutil.Get(t, ts.URL+"/v1/responses/"+first.ID+"/input_items?order=asc")
	var items struct {
		Object  string `json:"object"`
		Data    []map[string]any
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}
	if err := json.Unmarshal(got, &items); code != 200 || err != nil {
		t.Fatalf("input_items: %d %s", code, got)
	}
	if items.Object != "list" || len(items.Data) != 2 || items.HasMore || items.Data[0]["type"] != "message" ||
		items.Data[0]["role"] != "user" || items.Data[1]["type"] != "function_call_output" || items.FirstID != items.Data[0]["id"] ||
		!strings.HasPrefix(items.FirstID, "msg_") {
		t.Errorf("input_items: %s", got)
	}
	if c := items.Data[0]["content"].([]any)[0].(map[string]any); c["type"] != "input_text" || c["text"] != "Hello" {
		t.Errorf("input item content %v", c)
	}
	_, got = testutil.Get(t, ts.URL+"/v1/responses/"+first.ID+"/input_items?limit=1")
	if err := json.Unmarshal(got, &items); err != nil || len(items.Data) != 1 || !items.HasMore || items.Data[0]["type"] != "function_call_output" {
		t.Errorf("input_items desc, limit 1: %s", got)
	}

	// A follow-up continues the conversation: its prompt is its
	// instructions, the previous input and output, then its input.
	code, _, b = testutil.Post(t, ts.URL+"/v1/responses",
		`{"instructions":"Be kind.","input":"And then?","previous_response_id":"`+first.ID+`","max_output_tokens":3}`)
	if code != 200 {
		t.Fatalf("follow-up: %d %s", code, b)
	}
	next := decode[testResponse](t, b)
	prompt := "Be kind." + "Hello" + first.text() + "And then?"
	if want := (len([]rune(prompt)) + 3) / 4; next.Usage.InputTokens != want || next.PreviousResponseID == nil || *next.PreviousResponseID != first.ID {
		t.Errorf("follow-up input tokens %d, want %d: %s", next.Usage.InputTokens, want, b)
	}
	_, _, cb := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":`+string(mustJSON(t, prompt))+`,"max_tokens":3}`)
	if c := decode[struct{ Choices []struct{ Text string } }](t, cb); c.Choices[0].Text != next.text() {
		t.Errorf("follow-up %q, completion of the conversation %q", next.text(), c.Choices[0].Text)
	}

	// Cancel: a stored response is complete, which vLLM refuses to cancel.
	code, _, got = testutil.Post(t, ts.URL+"/v1/responses/"+first.ID+"/cancel", "")
	if code != 400 || !bytes.Contains(got, []byte(`"type":"invalid_request_error"`)) {
		t.Errorf("cancel: %d %s", code, got)
	}

	// Delete, then it is gone.
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/v1/responses/"+first.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var del map[string]any
	json.NewDecoder(resp.Body).Decode(&del)
	resp.Body.Close()
	if resp.StatusCode != 200 || del["id"] != first.ID || del["object"] != "response" || del["deleted"] != true {
		t.Errorf("delete: %d %v", resp.StatusCode, del)
	}
	for _, path := range []string{"", "/input_items"} {
		if code, got := testutil.Get(t, ts.URL+"/v1/responses/"+first.ID+path); code != 404 ||
			!bytes.Contains(got, []byte(`"message":"Response with id '`+first.ID+`' not found."`)) {
			t.Errorf("GET%s after delete: %d %s", path, code, got)
		}
	}
	if code, _, _ := testutil.Post(t, ts.URL+"/v1/responses/"+first.ID+"/cancel", ""); code != 404 {
		t.Errorf("cancel after delete: %d", code)
	}

	// store: false keeps nothing.
	_, _, b = testutil.Post(t, ts.URL+"/v1/responses", `{"input":"Unstored","store":false,"max_output_tokens":1}`)
	if code, _ := testutil.Get(t, ts.URL+"/v1/responses/"+decode[testResponse](t, b).ID); code != 404 {
		t.Errorf("store false: GET %d", code)
	}
}

// TestResponsesUnknownPrevious: a previous_response_id this instance did not
// make is vLLM's 404, so a gateway must route follow-ups to the instance
// that made the response.
func TestResponsesUnknownPrevious(t *testing.T) {
	s, ts := newTestServer(t, fastKnobs())
	code, _, b := testutil.Post(t, ts.URL+"/v1/responses", `{"input":"Hi","previous_response_id":"resp_elsewhere"}`)
	want := `{"error":{"message":"Response with id 'resp_elsewhere' not found.","type":"invalid_request_error","param":"previous_response_id","code":404}}`
	if code != 404 || string(b) != want {
		t.Errorf("%d %s\nwant %s", code, b, want)
	}
	if st := s.Stats(); st.Requests != 1 || st.Errors != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestResponsesErrors(t *testing.T) {
	k := fastKnobs()
	_, ts := newTestServer(t, k)
	for _, tc := range []struct{ body, msg string }{
		{`{"model":"other","input":"x"}`, "The model `other` does not exist."},
		{`{"max_output_tokens":2}`, "input: field required"},
		{`{"input":"x","max_output_tokens":0}`, "max_output_tokens must be at least 1, got 0."},
		{`{"input":"x","top_logprobs":21}`, "top_logprobs must be in [0, 20], got 21."},
		{`{"input":[{"content":"x"}]}`, "input[0].role: field required"},
		{`{"input":7}`, "input: must be a string or an array of input items"},
	} {
		code, _, b := testutil.Post(t, ts.URL+"/v1/responses", tc.body)
		e := decode[vllmError](t, b)
		if code/100 != 4 || e.Error.Message != tc.msg {
			t.Errorf("%s: %d %s, want %q", tc.body, code, b, tc.msg)
		}
	}
	k.ErrorRate = 1
	s, ts := newTestServer(t, k)
	code, _, b := testutil.Post(t, ts.URL+"/v1/responses", `{"input":"x"}`)
	if code != 500 || decode[vllmError](t, b).Error.Type != "InternalServerError" {
		t.Errorf("error rate: %d %s", code, b)
	}
	if st := s.Stats(); st.Errors != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestResponsesStore: the store keeps the most recently used responses.
func TestResponsesStore(t *testing.T) {
	st := newResponseStore(2)
	for _, id := range []string{"a", "b"} {
		st.put(&storedResponse{resp: responseObject{ID: id}})
	}
	st.get("a")
	st.put(&storedResponse{resp: responseObject{ID: "c"}})
	if _, ok := st.get("b"); ok {
		t.Error("b, least recently used, kept")
	}
	for _, id := range []string{"a", "c"} {
		if _, ok := st.get(id); !ok {
			t.Errorf("%s evicted", id)
		}
	}
}

func TestDetokenize(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	_, _, b := testutil.Post(t, ts.URL+"/tokenize", `{"prompt":"héllo"}`)
	tok := decode[tokenizeResponse](t, b)
	code, _, b := testutil.Post(t, ts.URL+"/detokenize", `{"model":"sim-model","tokens":`+string(mustJSON(t, append(tok.Tokens, 0, 1)))+`}`)
	if code != 200 || string(b) != `{"prompt":"héllo the of"}` {
		t.Errorf("%d %s", code, b)
	}
	if code, _, b := testutil.Post(t, ts.URL+"/detokenize", `{"tokens":[-1]}`); code != 400 {
		t.Errorf("negative id: %d %s", code, b)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNewAPIsStall: the stall knob delays the Responses and Messages
// streams as it does chat's.
func TestNewAPIsStall(t *testing.T) {
	k := fastKnobs()
	k.Stall, k.StallAfter = 80*time.Millisecond, 1
	_, ts := newTestServer(t, k)
	for path, body := range map[string]string{
		"/v1/responses": `{"input":"x","max_output_tokens":3,"stream":true}`,
		"/v1/messages":  `{"model":"sim-model","max_tokens":3,"messages":[{"role":"user","content":"x"}],"stream":true}`,
	} {
		start := time.Now()
		if code, _, b := testutil.Post(t, ts.URL+path, body); code != 200 {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		if d := time.Since(start); d < 80*time.Millisecond {
			t.Errorf("%s: stream took %v, want the 80ms stall", path, d)
		}
	}
}

// TestResponsesEchoTopLogprobs: the response echoes top_logprobs as vLLM
// does: the client's value, null for null, the default 0 when absent.
func TestResponsesEchoTopLogprobs(t *testing.T) {
	_, ts := newTestServer(t, fastKnobs())
	for _, tt := range []struct{ member, want string }{
		{"", `"top_logprobs":0,`},
		{`,"top_logprobs":null`, `"top_logprobs":null,`},
		{`,"top_logprobs":2`, `"top_logprobs":2,`},
	} {
		code, _, b := testutil.Post(t, ts.URL+"/v1/responses", `{"model":"sim-model","input":"hi","max_output_tokens":2`+tt.member+`}`)
		if code != 200 || !bytes.Contains(b, []byte(tt.want)) {
			t.Errorf("%q: %d %s, want %s", tt.member, code, b, tt.want)
		}
	}
}
