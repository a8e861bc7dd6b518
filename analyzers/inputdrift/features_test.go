package inputdrift

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
)

func TestExtract(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		body string
		want Features
	}{
		{
			name: "chat with system prompt, escapes and code",
			body: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Fix: \u0060\u0060\u0060go\nx := 1\n` + "```" + `"}],"max_tokens":64,"temperature":0.2}`,
			want: Features{System: true, Code: true, Model: "m"},
		},
		{
			name: "content parts and mixed scripts",
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Привет 世界"},{"type":"image_url","image_url":{"url":"x"}}]}],"top_p":0.9}`,
			want: Features{Model: "m"},
		},
		{name: "legacy prompt", body: `{"model":"m","prompt":"ab 12","max_tokens":5}`, want: Features{Model: "m"}},
		{name: "tgi", body: `{"inputs":"hello","parameters":{"max_new_tokens":20,"temperature":0.5}}`},
		{name: "surrogate pair", body: `{"prompt":"\ud83d\ude00a"}`},
	}
	vectors := [][NumFeatures]float64{
		// chars: "Be brief." 9 + "Fix: ```go\nx := 1\n```" 21 = 30
		{30, 8, 2, 13.0 / 30, 0, 0, 1.0 / 30, 10.0 / 30, 6.0 / 30, 64, 0.2, nan},
		// "Привет 世界": 6 Cyrillic, 1 space, 2 Han
		{9, 3, 1, 0, 2.0 / 9, 6.0 / 9, 0, 0, 1.0 / 9, nan, nan, 0.9},
		{5, 2, 1, 2.0 / 5, 0, 0, 2.0 / 5, 0, 1.0 / 5, 5, nan, nan},
		{5, 2, 1, 1, 0, 0, 0, 0, 0, 20, 0.5, nan},
		{2, 1, 1, 0.5, 0, 0, 0, 0.5, 0, nan, nan, nan}, // the emoji is a symbol
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Extract([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Vector = vectors[i]
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractRejects(t *testing.T) {
	for _, body := range []string{`{`, `{"model":"m"}`, `[]`, `{"messages":"x"}`} {
		if _, err := Extract([]byte(body)); err == nil {
			t.Errorf("Extract(%s): no error", body)
		}
	}
}

func BenchmarkExtract(b *testing.B) {
	body := []byte(`{"model":"llama-3-8b","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly and cite sources when you can."},{"role":"user","content":"Summarise the following incident report in three bullet points: at 10:42 UTC the load balancer began returning 502 errors for 4% of requests; the on-call engineer traced it to a misconfigured health check on two of twelve backends, which flapped between healthy and unhealthy. The fix was rolled out at 11:05."}],"max_tokens":256,"temperature":0.7,"top_p":0.95}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Extract(body); err != nil {
			b.Fatal(err)
		}
	}
}

// extractCases are bodies for the fast path and encoding/json to agree on:
// the shapes clients send and the corners the fast path must leave to
// encoding/json.
var extractCases = []string{
	`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Fix: \u0060\u0060\u0060go\nx := 1\n` + "```" + `"}],"max_tokens":64,"temperature":0.2}`,
	`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Привет 世界"},{"type":"image_url","image_url":{"url":"x"}}]}],"top_p":0.9}`,
	`{"model":"m","prompt":"ab 12","max_tokens":5}`,
	`{"inputs":"hello","parameters":{"max_new_tokens":20,"temperature":0.5,"details":true}}`,
	`{"prompt":"\ud83d\ude00a"}`,
	`{"prompt":["a","b",{"text":"c"},null,1,{"text":["d",{"text":"e"}]}]}`,
	` { "model" : "m" , "messages" : [ { "role" : "developer" , "content" : null } , { "content" : {"x":1} } ] } `,
	`{"model":null,"messages":null,"prompt":"x","max_tokens":null,"parameters":null}`,
	`{"input":[1,2,3]}`, `{"input":"x","inputs":"y","prompt":"z","stream":true,"n":2,"stop":["]","}"]}`,
	`{"Model":"m","prompt":"x"}`, `{"model":"m","model":"n","prompt":"x"}`, `{"mod\u0065l":"m","prompt":"x"}`,
	`{"model":"a\"b","prompt":"x"}`, `{"model":"\ud800","prompt":"x"}`, "{\"model\":\"\xff\",\"prompt\":\"x\"}",
	`{"model":1,"prompt":"x"}`, `{"max_tokens":"5","prompt":"x"}`, `{"max_tokens":1e400,"prompt":"x"}`,
	`{"parameters":3,"inputs":"x"}`, `{"parameters":{"TOP_P":1},"inputs":"x"}`, `{"messages":"x"}`,
	`{"messages":[null]}`, `{"messages":[{"Role":"system","content":"x"}]}`, `{"messages":[{"role":"system","role":"user"}]}`,
	`{"prompt":[{"Text":"x"}]}`, `{"prompt":[{"text":"x","text":"y"}]}`, `{"model":"m"}`, `[]`, `{`, `{"a":1}x`, ``,
	`{"messages":[{"role":"\u0073ystem","content":"x"}]}`, `{"max_tokens":-0.5e2,"top_p":1E-3,"prompt":""}`,
}

// TestExtractFastAgrees: wherever the fast path decides, its answer is
// encoding/json's.
func TestExtractFastAgrees(t *testing.T) {
	decided := 0
	for _, body := range extractCases {
		if checkFast(t, Chat, []byte(body)) {
			decided++
		}
	}
	// The common shapes must not fall back.
	if decided < 10 {
		t.Errorf("the fast path decided %d of %d cases, want the common shapes", decided, len(extractCases))
	}
}

// checkFast compares the fast path with encoding/json on body and reports
// whether the fast path decided.
func checkFast(t *testing.T, api API, body []byte) bool {
	t.Helper()
	f, decided, err := extractFast(api, body)
	if !decided {
		return false
	}
	want, wantErr := extractJSON(api, body)
	if (err == nil) != (wantErr == nil) {
		t.Errorf("%q: fast error %v, encoding/json %v", body, err, wantErr)
		return true
	}
	if diff := cmp.Diff(want, f, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("%q: fast path differs from encoding/json (-json +fast):\n%s", body, diff)
	}
	// Reading the content too changes no feature, and stays bounded.
	var r content.Reader
	var d content.Doc
	ft, errT := ExtractText(api, body, &r, &d, true)
	if (errT == nil) != (err == nil) {
		t.Errorf("%q: ExtractText error %v, ExtractAPI %v", body, errT, err)
	}
	if errT == nil {
		ft.Content = nil
		if diff := cmp.Diff(f, ft, cmpopts.EquateNaNs()); diff != "" {
			t.Errorf("%q: ExtractText's features differ (-api +text):\n%s", body, diff)
		}
	}
	if d.Words > content.MaxWords || len(d.Terms()) > content.K {
		t.Errorf("%q: %d words read, %d terms kept", body, d.Words, len(d.Terms()))
	}
	return true
}

func FuzzExtractFast(f *testing.F) {
	for _, body := range extractCases {
		f.Add(uint8(Chat), []byte(body))
	}
	for _, c := range apiCases {
		f.Add(uint8(c.api), []byte(c.body))
	}
	f.Fuzz(func(t *testing.T, api uint8, body []byte) { checkFast(t, API(api%3), body) })
}

func BenchmarkExtractJSON(b *testing.B) {
	body := []byte(`{"model":"llama-3-8b","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly and cite sources when you can."},{"role":"user","content":"Summarise the following incident report in three bullet points: at 10:42 UTC the load balancer began returning 502 errors for 4% of requests; the on-call engineer traced it to a misconfigured health check on two of twelve backends, which flapped between healthy and unhealthy. The fix was rolled out at 11:05."}],"max_tokens":256,"temperature":0.7,"top_p":0.95}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := extractJSON(Chat, body); err != nil {
			b.Fatal(err)
		}
	}
}
