package app

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestAPIsUsageEndToEnd: Responses and Messages requests, plain and
// streamed, through a whole gateway with its analyzers: /admin/usage
// holds exactly the tokens the backend reported in each answer.
func TestAPIsUsageEndToEnd(t *testing.T) {
	_, gwURL := startApp(t, testConfig(simBackend(t, nil)))
	var prompt, completion int64
	for _, tc := range []struct{ path, body string }{
		{"/v1/responses", `{"model":"m","input":"how are you","max_output_tokens":7}`},
		{"/v1/responses", `{"model":"m","instructions":"be brief","input":[{"role":"user","content":"and now?"}],"max_output_tokens":5,"stream":true}`},
		{"/v1/messages", `{"model":"m","max_tokens":6,"messages":[{"role":"user","content":"hello there"}]}`},
		{"/v1/messages", `{"model":"m","max_tokens":4,"system":"s","messages":[{"role":"user","content":"again"}],"stream":true}`},
	} {
		code, _, body := testutil.Post(t, gwURL+tc.path, tc.body)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.path, code, body)
		}
		in, out := reportedUsage(t, body)
		if in <= 0 || out <= 0 {
			t.Fatalf("%s %s: no usage in the answer: %s", tc.path, tc.body, body)
		}
		prompt, completion = prompt+in, completion+out
	}
	var got struct {
		Hour struct {
			Totals struct {
				Requests         int64 `json:"requests"`
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
				CountedRequests  int64 `json:"counted_requests"`
			} `json:"totals"`
		} `json:"hour"`
	}
	testutil.WaitFor(t, "the four requests in /admin/usage", func() bool {
		code, b := testutil.Get(t, gwURL+"/admin/usage")
		return code == http.StatusOK && json.Unmarshal(b, &got) == nil && got.Hour.Totals.Requests == 4
	})
	if tot := got.Hour.Totals; tot.PromptTokens != prompt || tot.CompletionTokens != completion || tot.CountedRequests != 0 {
		t.Errorf("/admin/usage totals %+v, want %d prompt and %d completion tokens, all reported", tot, prompt, completion)
	}
}

// reportedUsage reads the usage a Responses or Messages answer reports:
// a plain body's usage, or the stream's response.completed (Responses) or
// message_start and message_delta events (Messages).
func reportedUsage(t *testing.T, body []byte) (in, out int64) {
	t.Helper()
	type usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	}
	var doc struct {
		Usage    *usage `json:"usage"`
		Response *struct {
			Usage *usage `json:"usage"`
		} `json:"response"`
		Message *struct {
			Usage *usage `json:"usage"`
		} `json:"message"`
	}
	if !bytes.HasPrefix(body, []byte("event:")) {
		if err := json.Unmarshal(body, &doc); err != nil || doc.Usage == nil {
			t.Fatalf("plain answer without usage: %v %s", err, body)
		}
		return doc.Usage.InputTokens, doc.Usage.OutputTokens
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		doc.Usage, doc.Response, doc.Message = nil, nil, nil
		if err := json.Unmarshal([]byte(data), &doc); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		switch {
		case doc.Response != nil && doc.Response.Usage != nil: // response.completed
			in, out = doc.Response.Usage.InputTokens, doc.Response.Usage.OutputTokens
		case doc.Message != nil && doc.Message.Usage != nil: // message_start
			in = doc.Message.Usage.InputTokens
		case doc.Usage != nil: // message_delta
			out = doc.Usage.OutputTokens
		}
	}
	return in, out
}
