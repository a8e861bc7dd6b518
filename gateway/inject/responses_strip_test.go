package inject

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// stripResponsesFeeds strips in as NewResponsesStripper does for a request
// with "top_logprobs": null, fed whole, one byte at a time and in random
// chunks, and requires the three outputs to agree.
func stripResponsesFeeds(t testing.TB, in []byte, sse bool, seed uint64) []byte {
	return stripResponsesFields(t, in, sse, seed, &request.Fields{TopLogprobs: 'n'})
}

// stripResponsesFields is stripResponsesFeeds for a request with fields f.
func stripResponsesFields(t testing.TB, in []byte, sse bool, seed uint64, f *request.Fields) []byte {
	r := rand.New(rand.NewPCG(seed, 5))
	return readEveryWay(t, in, r, func(src io.Reader) []byte {
		return testutil.ReadInPieces(t, NewResponsesStripper(io.NopCloser(src), sse, f), r)
	})
}

// TestStripResponsesSim: the simulator's Responses answer to a request with
// logprobs injected, stripped, is the bytes of its answer to the request
// without them, streaming and plain; an answer without logprobs passes
// unchanged.
func TestStripResponsesSim(t *testing.T) {
	s := sim.New(sim.Options{Model: "m1", Seed: 7, Created: 1, Knobs: sim.DefaultKnobs()})
	in := NewInjector(config.Inject{SampleRatio: 1, TopLogprobs: 5})
	answer := func(body []byte) []byte {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
		}
		return rec.Body.Bytes()
	}
	for i, body := range []string{
		`{"model":"m1","input":"Hello there","max_output_tokens":9,"store":false}`,
		`{"model":"m1","input":"Hello there","max_output_tokens":9,"stream":true,"store":false}`,
		`{"model":"m1","instructions":"Be \"brief\".","input":[{"role":"user","content":"Hi"}],"max_output_tokens":1,"stream":true,"store":false}`,
		`{"model":"m1","input":"x","include":null,"top_logprobs":null,"max_output_tokens":20,"store":false}`,
	} {
		sse := strings.Contains(body, `"stream":true`)
		f, aerr := request.Parse(exchange.OpResponses, []byte(body))
		if aerr != nil || !Eligible(exchange.OpResponses, &f) {
			t.Fatalf("%s: not eligible (%v)", body, aerr)
		}
		plain := answer([]byte(body))
		injected := answer(in.Rewrite(exchange.OpResponses, []byte(body)))
		if bytes.Equal(plain, injected) || !bytes.Contains(injected, []byte(`"logprob":`)) {
			t.Fatalf("%s: injection changed nothing: %s", body, injected)
		}
		if got := stripResponsesFields(t, plain, sse, uint64(i), &f); !bytes.Equal(got, plain) {
			t.Errorf("%s: an answer without logprobs changed (-in +out):\n%s", body, cmp.Diff(string(plain), string(got)))
		}
		if got := stripResponsesFields(t, injected, sse, uint64(i), &f); !bytes.Equal(got, plain) {
			t.Errorf("%s: stripped answer differs (-want +got):\n%s", body, cmp.Diff(string(plain), string(got)))
		}
	}
}

func TestStripResponsesJSON(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"delta", `{"type":"response.output_text.delta","delta":"a","logprobs":[{"token":"a","logprob":-1,"top_logprobs":[]}]}`,
			`{"type":"response.output_text.delta","delta":"a","logprobs":[]}`},
		{"part", `{"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}`,
			`{"part":{"type":"output_text","text":"","annotations":[],"logprobs":null}}`},
		{"item", `{"item":{"content":[{"logprobs":[{"a":"]"}]},{"logprobs":null}]}}`,
			`{"item":{"content":[{"logprobs":null},{"logprobs":null}]}}`},
		{"response", `{"response":{"output":[{"content":[{"logprobs":[1]}]}],"top_logprobs":5,"x":{"top_logprobs":5}}}`,
			`{"response":{"output":[{"content":[{"logprobs":null}]}],"top_logprobs":null,"x":{"top_logprobs":5}}}`},
		{"plain body", `{"output":[{"content":[{"logprobs":[1]}]},{"type":"reasoning"}],"top_logprobs" : -5e1 ,"n":1}`,
			`{"output":[{"content":[{"logprobs":null}]},{"type":"reasoning"}],"top_logprobs" : null ,"n":1}`},
		{"escaped keys", `{"top_l\u006fgprobs":5,"\u006fut\u0070ut":[{"content":[{"logprobs":{}}]}]}`,
			`{"top_l\u006fgprobs":null,"\u006fut\u0070ut":[{"content":[{"logprobs":null}]}]}`},
		{"scalars and strings stay", `{"logprobs":null,"part":{"logprobs":5},"top_logprobs":"5"}`,
			`{"logprobs":null,"part":{"logprobs":5},"top_logprobs":"5"}`},
		{"top_logprobs at its end", `{"top_logprobs":5}`, `{"top_logprobs":null}`},
		{"elsewhere stays", `{"choices":[{"logprobs":{}}],"a":{"logprobs":[1]},"output":{"content":[{"logprobs":[]}]},"logprobsx":[1]}`,
			`{"choices":[{"logprobs":{}}],"a":{"logprobs":[1]},"output":{"content":[{"logprobs":[]}]},"logprobsx":[1]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stripResponsesFeeds(t, []byte(tt.in), false, 1); string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			sse := "event: x\r\ndata: " + tt.in + "\r\n\r\n"
			if got := stripResponsesFeeds(t, []byte(sse), true, 2); string(got) != "event: x\r\ndata: "+tt.want+"\r\n\r\n" {
				t.Errorf("SSE: got %q", got)
			}
		})
	}
	// A request without top_logprobs has vLLM's default echoed.
	if got := stripResponsesFields(t, []byte(`{"top_logprobs":5}`), false, 5, &request.Fields{}); string(got) != `{"top_logprobs":0}` {
		t.Errorf("echo without top_logprobs: got %s", got)
	}
	// The chat stripper leaves Responses paths alone, and the other way round.
	chat := `{"choices":[{"logprobs":{}}]}`
	if got := stripResponsesFeeds(t, []byte(chat), false, 3); string(got) != chat {
		t.Errorf("Responses stripper changed %s: %s", chat, got)
	}
	resp := `{"output":[{"content":[{"logprobs":[]}]}],"top_logprobs":5}`
	if got := stripFeeds(t, []byte(resp), false, 4); string(got) != resp {
		t.Errorf("chat stripper changed %s: %s", resp, got)
	}
}

// refStripResponses applies responsesPaths to v, a decoded document.
func refStripResponses(v any) any {
	root, ok := v.(map[string]any)
	if !ok {
		return v
	}
	container := func(x any) bool {
		switch x.(type) {
		case map[string]any, []any:
			return true
		}
		return false
	}
	part := func(x any) {
		if m, ok := x.(map[string]any); ok && container(m["logprobs"]) {
			m["logprobs"] = nil
		}
	}
	item := func(x any) {
		if m, ok := x.(map[string]any); ok {
			if c, ok := m["content"].([]any); ok {
				for _, p := range c {
					part(p)
				}
			}
		}
	}
	output := func(x any) {
		if o, ok := x.([]any); ok {
			for _, it := range o {
				item(it)
			}
		}
	}
	top := func(m map[string]any) {
		if x, ok := m["top_logprobs"]; ok {
			if _, s := x.(string); !s {
				m["top_logprobs"] = nil
			}
		}
	}
	if container(root["logprobs"]) {
		root["logprobs"] = []any{}
	}
	part(root["part"])
	item(root["item"])
	if r, ok := root["response"].(map[string]any); ok {
		output(r["output"])
		top(r)
	}
	output(root["output"])
	top(root)
	return root
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

// FuzzStripResponses: a Responses stripper agrees however its input is cut,
// keeps valid JSON valid, and changes it as refStripResponses does; each
// SSE data line is stripped as a document of its own.
func FuzzStripResponses(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.output_text.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" a","logprobs":[{"token":" a","logprob":-0.5,"top_logprobs":[{"token":" a","logprob":-0.5}]}]}`,
		`{"type":"response.content_part.done","part":{"type":"output_text","text":"a","annotations":[],"logprobs":[{"token":"a","logprob":-1,"bytes":[97],"top_logprobs":[]}]}}`,
		`{"type":"response.completed","response":{"id":"resp_1","output":[{"type":"message","content":[{"type":"output_text","text":"\"}]","logprobs":[]}]}],"top_logprobs":5,"usage":{}}}`,
		`{"id":"resp_1","object":"response","output":[{"content":[{"logprobs":[{"a":"]}"}]}]}],"top_logprobs":true}`,
		`{"top_l\u006fgprobs":-1.5e3,"item":{"content":[{"logprobs":{}}]}}`,
		"event: response.output_text.delta\ndata: {\"logprobs\":[1]}\r\n\r\ndata: {\"top_logprobs\":5",
		`{"output":[{"content":[{"logprobs":[`,
	} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		out := stripResponsesFeeds(t, in, false, seed)
		if json.Valid(in) {
			if !json.Valid(out) {
				t.Fatalf("output %q of %q is invalid", out, in)
			}
			want, got := refStripResponses(decodeAny(t, in)), decodeAny(t, out)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("input %q: output %q differs from the reference (-want +got):\n%s", in, out, diff)
			}
		}
		want := perDataLine(in, func(payload []byte) []byte { return stripResponsesFeeds(t, payload, false, seed) })
		if got := stripResponsesFeeds(t, in, true, seed); !bytes.Equal(got, want) {
			t.Fatalf("SSE input %q:\n got %q\nwant %q", in, got, want)
		}
	})
}
