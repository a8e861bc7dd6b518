package inject

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/request/requesttest"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// Fuzz targets for the bodies that clients and backends control, as
// rewriting sees them: injection into requests, stripping from answers.
// Each checks properties, not only that nothing panics. test/run runs
// every target for 5 s after the race tests, `test/run -fuzz` for 60 s
// each; one by hand:
//
//	go test -run '^$' -fuzz '^FuzzInjectRequest$' -fuzztime 60s ./gateway/inject/
//
// Inputs that once failed live in testdata/fuzz/<target>/ and run with
// every `go test`.

// FuzzInjectRequest: on a body request.Parse accepts, logprob and usage
// injection (inject.go, usageinject.go) only insert members before the
// final '}', give valid JSON, apply at most once, leave the other fields
// alone, and never take away what the client asked for as the backend
// reads the body (checkInjection). Its inputs are FuzzParseRequest's (in
// package request), which checks the parsing itself.
func FuzzInjectRequest(f *testing.F) {
	requesttest.AddSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, opSel, topK uint8) {
		op := requesttest.Op(opSel)
		rf, aerr := request.Parse(op, body)
		if aerr != nil {
			return
		}
		checkInjection(t, op, body, &rf, int(topK%21))
		checkUsageInjection(t, op, body, &rf)
	})
}

// backendMembers returns the root members of doc, a JSON object, as the
// backend reads them: Python's json module (vLLM) compares keys exactly,
// after decoding their escapes, and the last of duplicate keys wins. (Go's
// encoding/json also matches keys without case into struct fields; a map
// takes them exactly.)
func backendMembers(t *testing.T, doc []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatalf("%q: %v", doc, err)
	}
	return m
}

// isOneOf reports whether the member value v is absent or one of lits.
func isOneOf(v json.RawMessage, lits ...string) bool {
	if v == nil {
		return true
	}
	for _, l := range lits {
		if string(v) == l {
			return true
		}
	}
	return false
}

// checkInserted fails t unless out is body with add (or add without its
// leading comma) inserted before body's final '}', and valid JSON.
func checkInserted(t *testing.T, body, out []byte, add string) {
	t.Helper()
	end := bytes.LastIndexByte(body, '}')
	tail := len(body) - end
	if end < 0 || len(out) < len(body)+len(add)-1 || len(out) > len(body)+len(add) {
		t.Fatalf("%q became %q: not %q inserted", body, out, add)
	}
	ins := out[end : len(out)-tail]
	if !bytes.Equal(out[:end], body[:end]) || !bytes.Equal(out[len(out)-tail:], body[end:]) || (string(ins) != add && string(ins) != add[1:]) {
		t.Fatalf("%q became %q: not %q inserted before the final '}'", body, out, add)
	}
	if !json.Valid(out) {
		t.Fatalf("%q became %q: invalid JSON", body, out)
	}
}

// checkInjection checks logprob injection on an accepted body.
func checkInjection(t *testing.T, op exchange.Operation, body []byte, rf *request.Fields, k int) {
	t.Helper()
	if !Eligible(op, rf) {
		return
	}
	// The gateway strips the logprobs it injected: it must never inject
	// into a request whose client asked for them as the backend reads it,
	// or that client loses the logprobs it asked for.
	client := backendMembers(t, body)
	if op == exchange.OpChat && (!isOneOf(client["logprobs"], "null", "false") || !isOneOf(client["top_logprobs"], "null")) ||
		op == exchange.OpCompletion && !isOneOf(client["logprobs"], "null") ||
		op == exchange.OpResponses && (!isOneOf(client["include"], "null") || !isOneOf(client["top_logprobs"], "null") || string(client["background"]) == "true" || string(client["store"]) != "false") {
		t.Fatalf("%s %q is eligible for injection, but the backend reads logprobs %s, top_logprobs %s in it",
			op, body, client["logprobs"], client["top_logprobs"])
	}
	in := NewInjector(config.Inject{SampleRatio: 1, TopLogprobs: k})
	add := in.completion
	switch op {
	case exchange.OpChat:
		add = in.chat
	case exchange.OpResponses:
		add = in.responses
	}
	out := in.Rewrite(op, body)
	checkInserted(t, body, out, add)
	rf2, aerr := request.Parse(op, out)
	if aerr != nil {
		t.Fatalf("%q with logprobs injected (%q) is refused: %v", body, out, aerr)
	}
	if Eligible(op, &rf2) {
		t.Fatalf("%q with logprobs injected (%q) is eligible again", body, out)
	}
	rf2.Logprobs, rf2.TopLogprobs, rf2.Include = rf.Logprobs, rf.TopLogprobs, rf.Include
	if !reflect.DeepEqual(*rf, rf2) {
		t.Fatalf("injecting logprobs into %q changed other fields:\n%+v\n%+v", body, *rf, rf2)
	}
	upstream := backendMembers(t, out)
	if op == exchange.OpChat && (string(upstream["logprobs"]) != "true" || string(upstream["top_logprobs"]) != strconv.Itoa(k)) ||
		op == exchange.OpCompletion && string(upstream["logprobs"]) != strconv.Itoa(k) ||
		op == exchange.OpResponses && (string(upstream["include"]) != `["`+responsesInclude+`"]` || string(upstream["top_logprobs"]) != strconv.Itoa(k)) {
		t.Fatalf("%q with logprobs injected (%q): the backend reads logprobs %s, top_logprobs %s", body, out, upstream["logprobs"], upstream["top_logprobs"])
	}
}

// checkUsageInjection checks usage injection on an accepted body.
func checkUsageInjection(t *testing.T, op exchange.Operation, body []byte, rf *request.Fields) {
	t.Helper()
	out, ok := InjectUsage(op, rf, body)
	if !ok {
		if !bytes.Equal(out, body) {
			t.Fatalf("injectUsage declined %q but changed it to %q", body, out)
		}
		return
	}
	// The usage stripper takes out every usage the backend sends: the
	// client must have left usage off, as the backend reads its body; and
	// the backend must read a stream, or it refuses stream_options (vLLM:
	// "Stream options can only be defined when `stream=True`").
	client := backendMembers(t, body)
	if string(client["stream"]) != "true" {
		t.Fatalf("usage injected into %q, which the backend reads as stream %s", body, client["stream"])
	}
	so := client["stream_options"]
	var opts map[string]json.RawMessage
	if !isOneOf(so, "null") {
		if json.Unmarshal(so, &opts) != nil || !isOneOf(opts["include_usage"], "false", "null") || opts["include_usage"] == nil {
			t.Fatalf("usage injected into %q, whose stream_options the backend reads as %s", body, so)
		}
	}
	add := usageMember
	if rf.StreamOptions != nil && string(rf.StreamOptions) != "null" {
		o, _ := appendMember(rf.StreamOptions, `,"include_usage":true`)
		add = `,"stream_options":` + string(o)
	}
	checkInserted(t, body, out, add)
	rf2, aerr := request.Parse(op, out)
	if aerr != nil {
		t.Fatalf("%q with usage injected (%q) is refused: %v", body, out, aerr)
	}
	if again, ok := InjectUsage(op, &rf2, out); ok {
		t.Fatalf("%q with usage injected (%q) gets it again: %q", body, out, again)
	}
	rf2.StreamOptions = rf.StreamOptions
	if !reflect.DeepEqual(*rf, rf2) {
		t.Fatalf("injecting usage into %q changed other fields:\n%+v\n%+v", body, *rf, rf2)
	}
	var upOpts map[string]json.RawMessage
	if err := json.Unmarshal(backendMembers(t, out)["stream_options"], &upOpts); err != nil || string(upOpts["include_usage"]) != "true" {
		t.Fatalf("%q with usage injected (%q): the backend reads stream_options %v", body, out, upOpts)
	}
	delete(upOpts, "include_usage")
	delete(opts, "include_usage")
	if len(opts) == 0 {
		opts = nil
	}
	if len(upOpts) == 0 {
		upOpts = nil
	}
	if !reflect.DeepEqual(opts, upOpts) {
		t.Fatalf("%q with usage injected (%q): the client's other stream options changed", body, out)
	}
}

// jsonTrim trims JSON white space.
func jsonTrim(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }

// lineEnds are the SSE line endings, by a fuzzed index.
var lineEnds = []string{"\n", "\r\n", "\r"}

// fuzzChoice is one choice of a chat or completions answer or stream chunk
// with text, an extra member key:text (before or after "logprobs") and
// logprobs lp.
func fuzzChoice(i int, chat, stream bool, text, key, lp string, keyFirst bool) string {
	content := `"text":` + text
	switch {
	case chat && stream:
		content = `"delta":{"content":` + text + `}`
	case chat:
		content = `"message":{"role":"assistant","content":` + text + `}`
	}
	extra := "," + key + ":" + text
	c := `{"index":` + strconv.Itoa(i) + "," + content
	if keyFirst {
		c += extra
	}
	c += `,"logprobs":` + lp
	if !keyFirst {
		c += extra
	}
	return c + `,"finish_reason":null}`
}

// FuzzStripInjectedLogprobs: the answer a backend gives with logprobs
// injected, stripped, is byte for byte the answer it gives without them
// (logprobs null), however the bytes arrive, as one JSON body or as an
// SSE stream with any line ending; and the answer without them passes
// unchanged. The logprobs value, the text and an extra member's key come
// from the fuzzer.
func FuzzStripInjectedLogprobs(f *testing.F) {
	f.Add("Hi", "text_offset", []byte(`{"content":[{"token":"Hi","logprob":-0.1,"bytes":[72,105],"top_logprobs":[]}]}`), uint8(0), uint64(0))
	f.Add(`"}]{\`, "log\u0070robs", []byte(`[1,{"a":"]}"}]`), uint8(0x1f), uint64(1))
	f.Add("é\u2028<\x00", "logprobs", []byte(` {} `), uint8(0xff), uint64(2))
	f.Add("data: x\n\n", "choices", []byte(`{"tokens":[" a"],"token_logprobs":[-0.1],"top_logprobs":[{" a":-0.1}],"text_offset":[0]}`), uint8(0x48), uint64(3))
	f.Fuzz(func(t *testing.T, text, key string, lp []byte, shape uint8, seed uint64) {
		textJSON, _ := json.Marshal(text)
		keyJSON, _ := json.Marshal(key)
		if lp = jsonTrim(lp); !json.Valid(lp) || lp[0] != '{' && lp[0] != '[' {
			lp = []byte(`{"content":[{"token":` + string(textJSON) + `,"logprob":-0.5,"bytes":[],"top_logprobs":[]}]}`)
		}
		n := 1 + int(shape%3)
		chat, sse, keyFirst := shape&4 != 0, shape&8 != 0, shape&16 != 0
		nl := lineEnds[int(shape>>5)%len(lineEnds)]
		build := func(lp string) []byte {
			var b strings.Builder
			if !sse {
				b.WriteString(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m1","choices":[`)
				for i := range n {
					if i > 0 {
						b.WriteByte(',')
					}
					b.WriteString(fuzzChoice(i, chat, false, string(textJSON), string(keyJSON), lp, keyFirst))
				}
				b.WriteString(`],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
				return []byte(b.String())
			}
			b.WriteString(": ping" + nl + nl)
			for i := range 2 * n {
				b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[`)
				b.WriteString(fuzzChoice(i%n, chat, true, string(textJSON), string(keyJSON), lp, keyFirst))
				b.WriteString("]}" + nl + nl)
			}
			b.WriteString("data: [DONE]" + nl + nl)
			return []byte(b.String())
		}
		plain, injected := build("null"), build(string(lp))
		if got := stripFeeds(t, plain, sse, seed); !bytes.Equal(got, plain) {
			t.Fatalf("an answer without logprobs changed:\n in %q\nout %q", plain, got)
		}
		if got := stripFeeds(t, injected, sse, seed); !bytes.Equal(got, plain) {
			t.Fatalf("injected answer %q stripped:\n got %q\nwant %q", injected, got, plain)
		}
	})
}

// chainFeeds reads in through the strippers as the gateway chains them
// for a stream with usage (and, with lp, logprobs) injected: whole, one
// byte at a time and in random chunks, which must agree.
func chainFeeds(t *testing.T, in []byte, lp bool, seed uint64) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	read := func(src io.Reader) []byte {
		var rc io.ReadCloser = io.NopCloser(src)
		if lp {
			rc = NewStripper(rc, true)
		}
		return testutil.ReadInPieces(t, NewUsageStripper(rc), r)
	}
	return readEveryWay(t, in, r, read)
}

// FuzzStripInjectedUsage: a stream a backend sends with usage injected
// (OpenAI: "usage":null in every chunk; vLLM's continuous_usage_stats: a
// usage object in every chunk; both: a final chunk with "choices":[] and
// the usage), stripped, is byte for byte the stream it sends without, with
// logprobs injected too or not (both strippers chained as the gateway
// chains them), for any position of the usage member among the chunk's
// members, any line ending, and however the bytes arrive.
func FuzzStripInjectedUsage(f *testing.F) {
	f.Add("Hi", "system_fingerprint", []byte(oaiUsage), uint8(4), uint8(0), uint64(0))
	f.Add(`"usage":{}`, "x", []byte(`{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}`), uint8(0), uint8(0x0f), uint64(1))
	f.Add("\r\n\r\n", "Usage", []byte(`{ "a" : [ ] }`), uint8(9), uint8(0x16), uint64(2))
	f.Add("", "choices", []byte(`{}`), uint8(5), uint8(0x27), uint64(3))
	f.Fuzz(func(t *testing.T, text, key string, usage []byte, pos, shape uint8, seed uint64) {
		textJSON, _ := json.Marshal(text)
		keyJSON, _ := json.Marshal(key)
		if string(keyJSON) == usageKey {
			return // a member "usage" the backend sends anyway: the client loses it (documented)
		}
		if usage = jsonTrim(usage); !json.Valid(usage) || usage[0] != '{' {
			usage = []byte(oaiUsage)
		}
		continuous, withLogprobs, chat := shape&1 != 0, shape&2 != 0, shape&4 != 0
		nl := lineEnds[int(shape>>3)%len(lineEnds)]
		lp := `{"content":[{"token":` + string(textJSON) + `,"logprob":-0.5}]}`
		chunk := func(injected bool) string {
			lpv := "null"
			if injected && withLogprobs {
				lpv = lp
			}
			members := []string{`"id":"chatcmpl-1"`, `"object":"chat.completion.chunk"`, `"created":1`, `"model":"m1"`,
				`"choices":[` + fuzzChoice(0, chat, true, string(textJSON), string(keyJSON), lpv, shape&32 != 0) + `]`,
				string(keyJSON) + ":" + string(textJSON)}
			if injected {
				u := `"usage":null`
				if continuous {
					u = `"usage":` + string(usage)
				}
				p := int(pos) % (len(members) + 1)
				members = append(members[:p], append([]string{u}, members[p:]...)...)
			}
			return "{" + strings.Join(members, ",") + "}"
		}
		stream := func(injected bool) []byte {
			var b strings.Builder
			for range 3 {
				b.WriteString("data: " + chunk(injected) + nl + nl)
			}
			if shape&64 != 0 {
				b.WriteString(": keep-alive" + nl + nl)
			}
			if injected {
				b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[],"usage":` + string(usage) + "}" + nl + nl)
			}
			b.WriteString("data: [DONE]" + nl + nl)
			return []byte(b.String())
		}
		plain, injected := stream(false), stream(true)
		if got := chainFeeds(t, plain, withLogprobs, seed); !bytes.Equal(got, plain) {
			t.Fatalf("a stream without usage changed:\n in %q\nout %q", plain, got)
		}
		if got := chainFeeds(t, injected, withLogprobs, seed); !bytes.Equal(got, plain) {
			t.Fatalf("injected stream %q stripped:\n got %q\nwant %q", injected, got, plain)
		}
	})
}
