package inject

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// readStripped reads a stripper over src with reads of random sizes,
// down to one byte.
func readStripped(t testing.TB, src io.Reader, sse bool, r *rand.Rand) []byte {
	return testutil.ReadInPieces(t, NewStripper(io.NopCloser(src), sse), r)
}

// readEveryWay reads in through read whole, one byte at a time and in
// chunks of random sizes drawn from r, and requires the three outputs to
// agree: a stripper must not depend on where reads cut its input.
func readEveryWay(t testing.TB, in []byte, r *rand.Rand, read func(io.Reader) []byte) []byte {
	t.Helper()
	whole := read(bytes.NewReader(in))
	oneByte := read(iotest.OneByteReader(bytes.NewReader(in)))
	chunked := read(testutil.ChunkReader(in, r, 1+r.IntN(40)))
	if !bytes.Equal(whole, oneByte) || !bytes.Equal(whole, chunked) {
		t.Fatalf("input %q: whole %q, one byte at a time %q, chunked %q", in, whole, oneByte, chunked)
	}
	return whole
}

// stripFeeds strips in fed one byte at a time, in random chunks, and whole,
// and requires the three outputs to agree.
func stripFeeds(t testing.TB, in []byte, sse bool, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	return readEveryWay(t, in, r, func(src io.Reader) []byte { return readStripped(t, src, sse, r) })
}

func TestStripJSON(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"chat",
			`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":{"content":[{"token":" a","logprob":-0.1,"bytes":[32,97],"top_logprobs":[{"token":" a","logprob":-0.1,"bytes":[32,97]}]}]},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}`,
			`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3}}`},
		{"completions",
			`{"choices":[{"index":0,"text":" a","logprobs":{"tokens":[" a"],"token_logprobs":[-0.1],"top_logprobs":[{" a":-0.1}],"text_offset":[0]},"finish_reason":"length","prompt_logprobs":null}]}`,
			`{"choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":"length","prompt_logprobs":null}]}`},
		{"several choices, array value",
			`{"choices":[{"logprobs":[1,[2,{"a":"]"}]]},{"logprobs":{}},{"logprobs":null}]}`,
			`{"choices":[{"logprobs":null},{"logprobs":null},{"logprobs":null}]}`},
		{"null stays", `{"choices":[{"logprobs":null,"x":1}]}`, `{"choices":[{"logprobs":null,"x":1}]}`},
		{"scalars stay", `{"choices":[{"logprobs":5},{"logprobs":"{"},{"logprobs":true}]}`, `{"choices":[{"logprobs":5},{"logprobs":"{"},{"logprobs":true}]}`},
		{"elsewhere stays",
			`{"a":{"choices":[{"logprobs":{"x":1}}]},"b":[{"logprobs":{}}],"choices":[{"message":{"logprobs":{}}}],"logprobs":{}}`,
			`{"a":{"choices":[{"logprobs":{"x":1}}]},"b":[{"logprobs":{}}],"choices":[{"message":{"logprobs":{}}}],"logprobs":{}}`},
		{"choices not an array", `{"choices":{"0":{"logprobs":{}}}}`, `{"choices":{"0":{"logprobs":{}}}}`},
		{"root array", `[{"choices":[{"logprobs":{}}]}]`, `[{"choices":[{"logprobs":{}}]}]`},
		{"strings that look like keys",
			`{"x":"\"choices\":[{\"logprobs\":{}}]","choices":[{"text":"\"logprobs\":{","a":"logprobs","logprobs":{"s":"}]\\\"{","t":"\\"}}]}`,
			`{"x":"\"choices\":[{\"logprobs\":{}}]","choices":[{"text":"\"logprobs\":{","a":"logprobs","logprobs":null}]}`},
		{"escaped keys", `{"ch\u006fices":[{"log\u0070robs":{"a":[1,2]},"\u006cogprob\u0073":[]}]}`, `{"ch\u006fices":[{"log\u0070robs":null,"\u006cogprob\u0073":null}]}`},
		{"other keys", `{"choices":[{"logprob":{},"logprobsx":{},"log\"probs":{},"Logprobs":{},"top_logprobs":{},"log\u0070":{}}]}`, `{"choices":[{"logprob":{},"logprobsx":{},"log\"probs":{},"Logprobs":{},"top_logprobs":{},"log\u0070":{}}]}`},
		{"whitespace",
			"{ \"choices\" :\t[ { \"logprobs\" :\n {\"a\": [ 1 ] } , \"x\": 2 } ,\r\n{\"logprobs\"\n:[ ]}] }\n",
			"{ \"choices\" :\t[ { \"logprobs\" :\n null , \"x\": 2 } ,\r\n{\"logprobs\"\n:null}] }\n"},
		{"duplicates", `{"choices":[{"logprobs":{"a":1},"logprobs":null,"logprobs":[]}],"choices":[{"logprobs":{}}]}`, `{"choices":[{"logprobs":null,"logprobs":null,"logprobs":null}],"choices":[{"logprobs":null}]}`},
		{"non-ASCII", `{"choices":[{"text":"é世\u00e9","logprobs":{"t":"é"}}]}`, `{"choices":[{"text":"é世\u00e9","logprobs":null}]}`},
		{"cut off", `{"choices":[{"logprobs":{"a":"b`, `{"choices":[{"logprobs":null`},
		{"empty", ``, ``},
		{"not JSON", "hello } ] \" logprobs", "hello } ] \" logprobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(20) {
				got := stripFeeds(t, []byte(tt.in), false, seed)
				if diff := cmp.Diff(tt.want, string(got)); diff != "" {
					t.Fatalf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestStripSSE(t *testing.T) {
	const lp = `{"content":[{"token":" a","logprob":-0.5,"top_logprobs":[]}]}`
	tests := []struct{ name, in, want string }{
		{"chat stream",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"logprobs\":" + lp + ",\"finish_reason\":null}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n" +
				"data: [DONE]\n\n",
			"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
				"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" a\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1}}\n\n" +
				"data: [DONE]\n\n"},
		{"CRLF, no space, other fields",
			"event: x\r\nid: 7\r\ndata:{\"choices\":[{\"logprobs\":" + lp + "}]}\r\n\r\nretry: 10\rdata: {\"choices\":[{\"logprobs\":[]}]}\r\r",
			"event: x\r\nid: 7\r\ndata:{\"choices\":[{\"logprobs\":null}]}\r\n\r\nretry: 10\rdata: {\"choices\":[{\"logprobs\":null}]}\r\r"},
		{"only data lines",
			": data: {\"choices\":[{\"logprobs\":{}}]}\nDATA: {\"choices\":[{\"logprobs\":{}}]}\ndatum: {\"choices\":[{\"logprobs\":{}}]}\n data: {\"choices\":[{\"logprobs\":{}}]}\n",
			": data: {\"choices\":[{\"logprobs\":{}}]}\nDATA: {\"choices\":[{\"logprobs\":{}}]}\ndatum: {\"choices\":[{\"logprobs\":{}}]}\n data: {\"choices\":[{\"logprobs\":{}}]}\n"},
		{"each line a new document",
			"data: {\"choices\":[{\"logprobs\":{\"a\":\"\n" + "data: {\"choices\":[{\"logprobs\":{}}]}\n",
			"data: {\"choices\":[{\"logprobs\":null\n" + "data: {\"choices\":[{\"logprobs\":null}]}\n"},
		{"stream cut off", "data: {\"choices\":[{\"logprobs\":{\"a\"", "data: {\"choices\":[{\"logprobs\":null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(20) {
				got := stripFeeds(t, []byte(tt.in), true, seed)
				if diff := cmp.Diff(tt.want, string(got)); diff != "" {
					t.Fatalf("(-want +got):\n%s", diff)
				}
			}
		})
	}
}

// reads reads r in a goroutine of its own, sends the bytes of each read
// on the channel it returns, and closes it at the first error: a client
// that takes what a stripper passes as soon as it passes it.
func reads(r io.Reader) <-chan string {
	got := make(chan string)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				got <- string(buf[:n])
			}
			if err != nil {
				close(got)
				return
			}
		}
	}()
	return got
}

// TestStripDoesNotHoldBack: each event is readable as soon as its bytes
// arrived, before the next ones are written.
func TestStripDoesNotHoldBack(t *testing.T) {
	pr, pw := io.Pipe()
	s := NewStripper(pr, true)
	defer s.Close()
	got := reads(s)
	for i := range 3 {
		pw.Write([]byte(`data: {"choices":[{"logprobs":{"a":[1]}}]}` + "\n\n"))
		want := `data: {"choices":[{"logprobs":null}]}` + "\n\n"
		var have string
		for have != want {
			select {
			case part, ok := <-got:
				if !ok {
					t.Fatalf("event %d: stream ended", i)
				}
				have += part
			case <-time.After(5 * time.Second):
				t.Fatalf("event %d held back; have %q", i, have)
			}
		}
	}
	pw.CloseWithError(errors.New("backend died"))
	for range got {
	}
	if _, err := s.Read(make([]byte, 8)); err == nil || err.Error() != "backend died" {
		t.Errorf("error after the stream: %v, want the source's", err)
	}
}

// refHasLogprobs reports, with encoding/json, whether a valid JSON document
// has a root.choices[i].logprobs whose value is an object or an array.
func refHasLogprobs(doc []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(doc))
	members := func(dec *json.Decoder, each func(key string, v json.RawMessage)) {
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return
		}
		for dec.More() {
			k, err := dec.Token()
			var v json.RawMessage
			if err != nil || dec.Decode(&v) != nil {
				return
			}
			each(k.(string), bytes.TrimSpace(v))
		}
	}
	has := false
	members(dec, func(k string, v json.RawMessage) {
		var choices []json.RawMessage
		if k != "choices" || json.Unmarshal(v, &choices) != nil {
			return
		}
		for _, c := range choices {
			members(json.NewDecoder(bytes.NewReader(c)), func(k string, v json.RawMessage) {
				if k == "logprobs" && len(v) > 0 && (v[0] == '{' || v[0] == '[') {
					has = true
				}
			})
		}
	})
	return has
}

// refNulled decodes a valid JSON document and nulls each
// root.choices[i].logprobs that is an object or an array.
func refNulled(t *testing.T, doc []byte) any {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	if m, ok := v.(map[string]any); ok {
		if cs, ok := m["choices"].([]any); ok {
			for _, c := range cs {
				if c, ok := c.(map[string]any); ok {
					switch c["logprobs"].(type) {
					case map[string]any, []any:
						c["logprobs"] = nil
					}
				}
			}
		}
	}
	return v
}

// FuzzStrip: the stripper never panics and agrees with itself however the
// input is cut. On valid JSON it agrees with encoding/json: identity when
// no choices[].logprobs holds an object or array, else valid JSON equal to
// the input with those values nulled. In SSE mode it is the JSON mode
// applied to each data line.
func FuzzStrip(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"logprobs":{"content":[{"token":"a","logprob":-1,"top_logprobs":[]}]},"finish_reason":null}]}`,
		`{"choices":[{"logprobs":[1,{"a":"]}"}]},{"logprobs":null}],"usage":{}}`,
		`{"ch\u006fices":[{"log\u0070robs":{"x":"\"\\"}}]}`,
		`{"choices":[{"text":"\"logprobs\":{","logprobs":"{"}]}`,
		"data: {\"choices\":[{\"logprobs\":{}}]}\r\n\r\ndata: [DONE]\n\n",
		`{"choices":[{"logprobs":{"a":`,
		`[{"choices":[{"logprobs":{}}]}]`,
	} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		out := stripFeeds(t, in, false, seed)
		switch {
		case json.Valid(in) && !refHasLogprobs(in):
			if !bytes.Equal(out, in) {
				t.Fatalf("valid input without logprobs values changed:\n in %q\nout %q", in, out)
			}
		case json.Valid(in):
			if !json.Valid(out) || refHasLogprobs(out) {
				t.Fatalf("output %q of %q is invalid or still has logprobs", out, in)
			}
			if diff := cmp.Diff(refNulled(t, in), refNulled(t, out)); diff != "" {
				t.Fatalf("input %q: output %q differs beyond logprobs:\n%s", in, out, diff)
			}
		case !bytes.Contains(in, []byte("logprobs")) && !bytes.Contains(in, []byte(`\`)):
			if !bytes.Equal(out, in) {
				t.Fatalf("input without a logprobs key changed:\n in %q\nout %q", in, out)
			}
		}

		want := perDataLine(in, func(payload []byte) []byte { return stripFeeds(t, payload, false, seed) })
		if got := stripFeeds(t, in, true, seed); !bytes.Equal(got, want) {
			t.Fatalf("SSE input %q:\n got %q\nwant %q", in, got, want)
		}
	})
}

// repeatReader returns chunk on every Read, forever.
type repeatReader struct{ chunk []byte }

func (r repeatReader) Read(p []byte) (int, error) { return copy(p, r.chunk), nil }

// BenchmarkStripSSEChunk strips one SSE event per op, as the simulator
// streams them with top_logprobs=5 (chat) and logprobs=5 (completions),
// through Read as the proxy calls it.
//
//	go test -run '^$' -bench StripSSEChunk -benchmem ./gateway/inject/
func BenchmarkStripSSEChunk(b *testing.B) {
	s := sim.New(sim.Options{Model: "m1", Seed: 1, Created: 1, Knobs: sim.DefaultKnobs()})
	for _, c := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", `{"model":"m1","max_tokens":4,"stream":true,"logprobs":true,"top_logprobs":5,"messages":[{"role":"user","content":"hi"}]}`},
		{"completions", "/v1/completions", `{"model":"m1","max_tokens":4,"stream":true,"logprobs":5,"prompt":"hi"}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
			events := strings.SplitAfter(rec.Body.String(), "\n\n")
			chunk := []byte(events[2]) // a token's event, with its logprobs
			if !bytes.Contains(chunk, []byte(`"top_logprobs"`)) {
				b.Fatalf("not a logprobs event: %q", chunk)
			}
			st := NewStripper(io.NopCloser(repeatReader{chunk}), true)
			defer st.Close()
			buf := make([]byte, 32<<10)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			for b.Loop() {
				if n, err := st.Read(buf); err != nil || n == 0 || n >= len(chunk) {
					b.Fatalf("read %d, %v", n, err)
				}
			}
		})
	}
}

// perDataLine is what a stripper should make of the SSE text in: each
// data line's payload as strip makes it alone, every other byte as it is.
func perDataLine(in []byte, strip func(payload []byte) []byte) []byte {
	var out []byte
	for rest := in; len(rest) > 0; {
		line := rest[:lineEnd(rest)]
		if payload, ok := bytes.CutPrefix(line, []byte(dataField)); ok {
			out = append(append(out, dataField...), strip(payload)...)
		} else {
			out = append(out, line...)
		}
		rest = rest[len(line):]
		if len(rest) > 0 {
			out = append(out, rest[0])
			rest = rest[1:]
		}
	}
	return out
}
