package sim

import (
	"bytes"
	"hash/fnv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestHashRequestIgnoresLogprobs: bodies that differ only by top-level
// logprobs/top_logprobs members hash alike; anything else tells them apart.
func TestHashRequestIgnoresLogprobs(t *testing.T) {
	sum := func(b string) uint64 {
		h := fnv.New64a()
		hashRequest(h, []byte(b))
		return h.Sum64()
	}
	raw := func(b string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(b))
		return h.Sum64()
	}
	same := []struct{ a, b string }{
		{`{"a":1}`, `{"a":1,"logprobs":true,"top_logprobs":5}`},
		{`{"a":1 }`, `{"a":1 ,"logprobs":true,"top_logprobs":5}`},
		{"{\n  \"a\": [1, {\"logprobs\": 2}]\n}", "{\n  \"a\": [1, {\"logprobs\": 2}]\n,\"logprobs\":true,\"top_logprobs\":5}"},
		{`{"a":1,"logprobs":false}`, `{"a":1,"logprobs":false,"logprobs":true,"top_logprobs":5}`},
		{`{}`, `{"logprobs":true,"top_logprobs":5}`},
		{`{"prompt":"x"}`, `{"prompt":"x","logprobs":3}`},
		{`{"prompt":"x"}`, `{"logprobs":null, "prompt":"x"}`},
		{`{"a":"logprobs"}`, `{"a":"logprobs", "top_logprobs": {"k": "}"}}`},
		{`{"b":"x\"y","c":1}`, `{"b":"x\"y","logprobs":true,"c":1}`},
		{`{"input":"x"}`, `{"input":"x","include":["message.output_text.logprobs"],"top_logprobs":5}`},
		{`{"input":"x","include":null}`, `{"input":"x","include":null,"include":["message.output_text.logprobs"],"top_logprobs":5}`},
	}
	for _, tt := range same {
		if sum(tt.a) != sum(tt.b) {
			t.Errorf("%s and %s hash differently", tt.a, tt.b)
		}
	}
	differ := []struct{ a, b string }{
		{`{"a":1}`, `{"a":2,"logprobs":true}`},
		{`{"a":1}`, `{"a":{"logprobs":true}}`},
		{`{"a":1}`, `{"a":1,"x_logprobs":true}`},
	}
	for _, tt := range differ {
		if sum(tt.a) == sum(tt.b) {
			t.Errorf("%s and %s hash alike", tt.a, tt.b)
		}
	}
	// Bodies without the keys, and malformed ones, hash as they did before logprob injection.
	for _, b := range []string{`{"a":1}`, `{"messages":[]}`, `{"logprobs":`, `["logprobs"]`, `m1`} {
		if sum(b) != raw(b) {
			t.Errorf("%s: hash changed", b)
		}
	}
}

// TestLogprobsChangeNothingElse: the same request with and without logprobs
// gets the same response except for each choice's "logprobs" value, which
// is null without.
func TestLogprobsChangeNothingElse(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	tests := []struct{ name, path, body, with string }{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":6,"n":2}`, `,"logprobs":true,"top_logprobs":5}`},
		{"chat stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi there"}],"max_tokens":6,"stream":true,"stream_options":{"include_usage":true}}`, `,"logprobs":true,"top_logprobs":5}`},
		{"completions", "/v1/completions", `{"prompt":["hi","there"],"max_tokens":6}`, `,"logprobs":5}`},
		{"completions stream", "/v1/completions", `{"prompt":"hi there","max_tokens":6,"stream":true}`, `,"logprobs":0}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, plain := testutil.Post(t, ts.URL+tt.path, tt.body)
			_, _, withLP := testutil.Post(t, ts.URL+tt.path, tt.body[:len(tt.body)-1]+tt.with)
			docs := func(b []byte) [][]byte {
				if !bytes.HasPrefix(b, []byte("data: ")) {
					return [][]byte{b}
				}
				return sseEvents(t, b, "data: ")
			}
			p, w := docs(plain), docs(withLP)
			if len(p) != len(w) {
				t.Fatalf("%d documents without logprobs, %d with", len(p), len(w))
			}
			asked := 0
			for i := range p {
				if string(p[i]) == "[DONE]" {
					continue
				}
				want := decode[map[string]any](t, p[i])
				got := decode[map[string]any](t, w[i])
				choices, _ := got["choices"].([]any)
				for _, c := range choices {
					c := c.(map[string]any)
					if c["logprobs"] != nil {
						asked++
					}
					c["logprobs"] = nil
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("document %d differs beyond logprobs (-without +with):\n%s", i, diff)
				}
			}
			if asked == 0 {
				t.Error("no choice carried logprobs when asked")
			}
			if bytes.Contains(plain, []byte(`"top_logprobs"`)) {
				t.Error("logprobs without asking")
			}
		})
	}
}
