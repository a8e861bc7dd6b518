package inject

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
)

// TestInjectUsage: which requests get stream_options.include_usage
// injected, and the exact bytes sent upstream.
func TestInjectUsage(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name string
		op   exchange.Operation
		body string
		want string // "" when not injected: the body goes up unchanged
	}{
		{"chat stream", exchange.OpChat,
			`{"model":"m",` + msgs + `,"stream":true}`,
			`{"model":"m",` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`},
		{"completions stream", exchange.OpCompletion,
			`{"model":"m","prompt":"x","stream":true}`,
			`{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`},
		{"trailing space and newline", exchange.OpCompletion,
			"{\"prompt\":\"}\",\"stream\":true \n}\n",
			"{\"prompt\":\"}\",\"stream\":true \n,\"stream_options\":{\"include_usage\":true}}\n"},
		{"stream_options null", exchange.OpChat,
			`{` + msgs + `,"stream":true,"stream_options":null}`,
			`{` + msgs + `,"stream":true,"stream_options":null,"stream_options":{"include_usage":true}}`},
		{"include_usage false", exchange.OpChat,
			`{` + msgs + `,"stream_options":{"include_usage":false},"stream":true}`,
			`{` + msgs + `,"stream_options":{"include_usage":false},"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`},
		{"include_usage null, spaces", exchange.OpChat,
			`{` + msgs + `,"stream":true, "stream_options" : { "include_usage" : null } }`,
			`{` + msgs + `,"stream":true, "stream_options" : { "include_usage" : null } ,"stream_options":{ "include_usage" : null ,"include_usage":true}}`},
		{"continuous_usage_stats kept", exchange.OpCompletion,
			`{"prompt":"x","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`,
			`{"prompt":"x","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true},"stream_options":{"include_usage":false,"continuous_usage_stats":true,"include_usage":true}}`},
		{"last duplicate stream_options counts", exchange.OpChat,
			`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`,
			`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false},"stream_options":{"include_usage":false,"include_usage":true}}`},
		{"last duplicate include_usage counts", exchange.OpChat,
			`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"include_usage":false}}`,
			`{` + msgs + `,"stream":true,"stream_options":{"include_usage":true,"include_usage":false},"stream_options":{"include_usage":true,"include_usage":false,"include_usage":true}}`},
		{"escaped key", exchange.OpChat,
			`{` + msgs + `,"stream":true,"stream_options":{"include\u005fusage":false}}`,
			`{` + msgs + `,"stream":true,"stream_options":{"include\u005fusage":false},"stream_options":{"include\u005fusage":false,"include_usage":true}}`},

		// The client asked, or left it to the server: untouched.
		{"include_usage true", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"include_usage absent", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"continuous_usage_stats":true}}`, ""},
		{"stream_options empty", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{}}`, ""},
		{"include_usage false then escaped true", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"include\u005fusage":true}}`, ""},
		{"include_usage in other case", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"Include_Usage":false}}`, ""},
		// Malformed: not ours to fix.
		{"include_usage a string", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":"false"}}`, ""},
		{"include_usage 0", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":{"include_usage":0}}`, ""},
		{"stream_options true", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":true}`, ""},
		{"stream_options array", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":[]}`, ""},
		{"stream_options string", exchange.OpChat, `{` + msgs + `,"stream":true,"stream_options":"{}"}`, ""},
		// Not a stream, or not chat or completions.
		{"not streaming", exchange.OpChat, `{` + msgs + `}`, ""},
		{"stream false", exchange.OpChat, `{` + msgs + `,"stream":false}`, ""},
		{"stream null", exchange.OpCompletion, `{"prompt":"x","stream":null}`, ""},
		{"embeddings", exchange.OpEmbeddings, `{"input":"x","stream":true}`, ""},
		{"tgi generate", exchange.OpGenerate, `{"inputs":"x","stream":true}`, ""},
		{"other", exchange.OpOther, `{"stream":true}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, e := request.Parse(tt.op, []byte(tt.body))
			if e != nil {
				t.Fatalf("request.Parse: %v", e)
			}
			body := []byte(tt.body)
			got, ok := InjectUsage(tt.op, &f, body)
			want := tt.want
			if want == "" {
				want = tt.body
			}
			if diff := cmp.Diff(want, string(got)); diff != "" {
				t.Errorf("upstream body (-want +got):\n%s", diff)
			}
			if ok != (tt.want != "") {
				t.Errorf("injected = %v, want %v", ok, tt.want != "")
			}
			if string(body) != tt.body {
				t.Errorf("the client's body changed: %s", body)
			}
			if !ok {
				return
			}
			checkUsageInjected(t, tt.body, got)
		})
	}
}

// checkUsageInjected: the upstream body is valid JSON that decodes (the
// last duplicate key winning) to the client's members with
// stream_options.include_usage true added.
func checkUsageInjected(t *testing.T, client string, up []byte) {
	t.Helper()
	if !json.Valid(up) {
		t.Fatalf("upstream body is not valid JSON: %s", up)
	}
	var want, got map[string]any
	if err := json.Unmarshal([]byte(client), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(up, &got); err != nil {
		t.Fatal(err)
	}
	so, _ := want["stream_options"].(map[string]any)
	if so == nil {
		so = map[string]any{}
	}
	so["include_usage"] = true
	want["stream_options"] = so
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("upstream body decodes differently from the client's plus include_usage (-want +got):\n%s", diff)
	}
}

func TestAppendMember(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`{}`, `{"k":1}`, true},
		{"{ \n }", "{ \n \"k\":1}", true},
		{`{"a":1}`, `{"a":1,"k":1}`, true},
		{"{\"a\":{}}\t\n", "{\"a\":{},\"k\":1}\t\n", true},
		{`[1]`, `[1]`, false},
		{`{"a":1`, `{"a":1`, false},
		{``, ``, false},
		{" \n", " \n", false},
	}
	for _, tt := range tests {
		got, ok := appendMember([]byte(tt.in), `,"k":1`)
		if string(got) != tt.want || ok != tt.ok {
			t.Errorf("appendMember(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}
