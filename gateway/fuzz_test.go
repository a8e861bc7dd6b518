package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Fuzz targets for the bytes that clients and backends control, beside
// the older ones that sit next to their code (FuzzScanResponse,
// FuzzIndexKey, FuzzStrip, FuzzUsageStripper, FuzzContentChoices, and
// package request's). Each checks properties, not only that nothing
// panics. test/run runs every target for 5 s after the race tests,
// `test/run -fuzz` for 60 s each; one by hand:
//
//	go test -run '^$' -fuzz '^FuzzInjectRequest$' -fuzztime 60s ./gateway/
//
// Inputs that once failed live in testdata/fuzz/<target>/ and run with
// every `go test`.

// fuzzOps are the operations whose bodies request.Parse reads (the
// gateway passes other routes' bodies through unread).
var fuzzOps = []exchange.Operation{exchange.OpChat, exchange.OpCompletion, exchange.OpEmbeddings, exchange.OpGenerate}

// FuzzInjectRequest: on a body request.Parse accepts, logprob and usage
// injection (inject.go, usageinject.go) only insert members before the
// final '}', give valid JSON, apply at most once, leave the other fields
// alone, and never take away what the client asked for as the backend
// reads the body (checkInjection). Its inputs are FuzzParseRequest's (in
// package request), which checks the parsing itself.
func FuzzInjectRequest(f *testing.F) {
	for _, doc := range scanCorpus {
		f.Add([]byte(doc), uint8(0), uint8(5))
		// The same members in a body that chat and completions accept,
		// so that injection is tried on them.
		if len(doc) > 2 && doc[0] == '{' {
			f.Add([]byte(`{"messages":[],"prompt":"p",`+doc[1:]), uint8(len(doc)%2), uint8(2)) // chat or completions
		}
	}
	for i, s := range []struct {
		op   uint8 // index in fuzzOps
		body string
	}{
		{0, `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{1, `{"model":"m1","prompt":"x","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`},
		{1, `{"model":"m1","prompt":["a"],"stream":true,"logprobs":null,"stream_options":{"include_usage":null}}`},
		{0, `{"model":"m1","messages":[],"logprobs":false,"top_logprobs":null,"stream":true,"stream_options":null}`},
		{0, ` {"messages":[] } ` + "\n"},
		{2, `{"input":["a","b"],"model":"e"}`},
		{3, `{"inputs":"x","parameters":{"max_new_tokens":2}}`},
	} {
		f.Add([]byte(s.body), s.op, uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, opSel, topK uint8) {
		op := fuzzOps[int(opSel)%len(fuzzOps)]
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
	if !eligible(op, rf) {
		return
	}
	// The gateway strips the logprobs it injected: it must never inject
	// into a request whose client asked for them as the backend reads it,
	// or that client loses the logprobs it asked for.
	client := backendMembers(t, body)
	if op == exchange.OpChat && (!isOneOf(client["logprobs"], "null", "false") || !isOneOf(client["top_logprobs"], "null")) ||
		op == exchange.OpCompletion && !isOneOf(client["logprobs"], "null") {
		t.Fatalf("%s %q is eligible for injection, but the backend reads logprobs %s, top_logprobs %s in it",
			op, body, client["logprobs"], client["top_logprobs"])
	}
	in := newInjector(config.Inject{SampleRatio: 1, TopLogprobs: k})
	add := in.completion
	if op == exchange.OpChat {
		add = in.chat
	}
	out := in.rewrite(op, body)
	checkInserted(t, body, out, add)
	rf2, aerr := request.Parse(op, out)
	if aerr != nil {
		t.Fatalf("%q with logprobs injected (%q) is refused: %v", body, out, aerr)
	}
	if eligible(op, &rf2) {
		t.Fatalf("%q with logprobs injected (%q) is eligible again", body, out)
	}
	rf2.Logprobs, rf2.TopLogprobs = rf.Logprobs, rf.TopLogprobs
	if !reflect.DeepEqual(*rf, rf2) {
		t.Fatalf("injecting logprobs into %q changed other fields:\n%+v\n%+v", body, *rf, rf2)
	}
	upstream := backendMembers(t, out)
	if op == exchange.OpChat && (string(upstream["logprobs"]) != "true" || string(upstream["top_logprobs"]) != strconv.Itoa(k)) ||
		op == exchange.OpCompletion && string(upstream["logprobs"]) != strconv.Itoa(k) {
		t.Fatalf("%q with logprobs injected (%q): the backend reads logprobs %s, top_logprobs %s", body, out, upstream["logprobs"], upstream["top_logprobs"])
	}
}

// checkUsageInjection checks usage injection on an accepted body.
func checkUsageInjection(t *testing.T, op exchange.Operation, body []byte, rf *request.Fields) {
	t.Helper()
	out, ok := injectUsage(op, rf, body)
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
	if again, ok := injectUsage(op, &rf2, out); ok {
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
			rc = newStripper(rc, true)
		}
		rc = newUsageStripper(rc)
		defer rc.Close()
		var out []byte
		buf := make([]byte, 64)
		for range 1 << 20 {
			n, err := rc.Read(buf[:1+r.IntN(len(buf))])
			out = append(out, buf[:n]...)
			if err == io.EOF {
				return out
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
		}
		t.Fatal("the strippers never reached EOF")
		return nil
	}
	whole := read(bytes.NewReader(in))
	oneByte := read(iotest.OneByteReader(bytes.NewReader(in)))
	chunked := read(&chunkReader{src: in, r: r, max: 1 + r.IntN(40)})
	if !bytes.Equal(whole, oneByte) || !bytes.Equal(whole, chunked) {
		t.Fatalf("input %q: whole %q, one byte at a time %q, chunked %q", in, whole, oneByte, chunked)
	}
	return whole
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

// errBroken is the read error of a backend connection that broke.
var errBroken = errors.New("connection reset by fuzzer")

// breakReader is r with its EOF turned into errBroken.
type breakReader struct{ r io.Reader }

func (b breakReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		err = errBroken
	}
	return n, err
}

// tapResult is what a tap passed on and recorded.
type tapResult struct {
	out                      []byte
	err                      error
	events, tokens           int
	prompt, completion       int
	reported                 bool
	finish, id, model        string
	captured, streamed       []byte
	truncated, readErrBroken bool
}

// runTap reads src through a tap as the proxy does, with reads of random
// sizes, and returns what it recorded.
func runTap(t *testing.T, src io.Reader, sse, tgi bool, capMax, keep int, r *rand.Rand) tapResult {
	t.Helper()
	x := &call{req: &exchange.Request{Start: time.Now(), Operation: exchange.OpChat, Stream: sse}, backend: &upstream.Backend{Name: "b"}, spanned: true}
	tp := x.newTap(io.NopCloser(src), sse, capMax)
	tp.tgi, tp.count, tp.spanned, tp.keepStream = tgi, sse, true, keep
	var out []byte
	buf := make([]byte, 64)
	for range 1 << 20 {
		n, err := tp.Read(buf[:1+r.IntN(len(buf))])
		out = append(out, buf[:n]...)
		if err == nil {
			continue
		}
		if err == io.EOF {
			err = nil
		}
		x.chunks.release()
		return tapResult{
			out: out, err: err, events: x.events, tokens: x.chunks.tokens,
			prompt: x.promptTokens, completion: x.completionTokens, reported: x.usageReported,
			finish: x.finish, id: x.respID, model: x.respModel,
			captured: x.captured, streamed: x.streamed, truncated: x.truncated, readErrBroken: errors.Is(x.readErr, errBroken),
		}
	}
	t.Fatal("the tap never ended")
	return tapResult{}
}

// refPayloads returns the payloads of the data lines of an SSE stream as
// the analyzers take them: lines end at '\n' (a '\r' before it is
// dropped), the payload follows "data:" and one space; a last line without
// its end counts only when the stream ended (not when it broke).
func refPayloads(b []byte, ended bool) [][]byte {
	lines := bytes.Split(b, []byte("\n"))
	if last := len(lines) - 1; !ended || len(lines[last]) == 0 {
		lines = lines[:last]
	}
	var out [][]byte
	for _, l := range lines {
		l = bytes.TrimSuffix(l, []byte("\r"))
		if p, ok := bytes.CutPrefix(l, []byte("data:")); ok {
			out = append(out, bytes.TrimPrefix(p, []byte(" ")))
		}
	}
	return out
}

// sseEvents parses an SSE stream as the WHATWG HTML standard says a client
// does and returns the data of each event it dispatches: lines end at
// "\r\n", "\r" or "\n"; a blank line dispatches the event, if it has data.
func sseEvents(b []byte) []string {
	var events []string
	var data []byte
	has := false
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			break // a last line without its end is never processed
		}
		line := b[:i]
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++
		}
		b = b[i+1:]
		switch {
		case len(line) == 0:
			if has {
				events = append(events, strings.TrimSuffix(string(data), "\n"))
			}
			data, has = nil, false
		case line[0] == ':':
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(name) == "data" {
				data = append(append(data, value...), '\n')
				has = true
			}
		}
	}
	return events
}

// FuzzTap: the tap passes every byte through unchanged, whatever the
// backend sends and however the reads cut it; it records the same events,
// token counts, usage, finish reason, id and model however the bytes
// arrive, one event per data line; its copies stay within their bounds.
// A stream that breaks ends, for an SSE client, with the error event as an
// event of its own; a plain body that breaks passes the error on. The
// strippers behind it (strip.go, usagestrip.go) never grow what they pass
// by more than "null" for each container.
func FuzzTap(f *testing.F) {
	plain, stream := recordSim(f) // a chat answer and stream with logprobs and usage
	f.Add(stream.body, uint8(1), uint16(0), uint16(64), uint64(0))
	f.Add(stream.body, uint8(3), uint16(200), uint16(64), uint64(1))
	f.Add(plain.body, uint8(2), uint16(100), uint16(4096), uint64(2))
	for i, s := range []string{
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1}}\r\n\r\ndata: [DONE]\r\n\r\n",
		"data:{\"index\":1,\"token\":{\"id\":5,\"text\":\"a\"},\"details\":{\"generated_tokens\":1,\"finish_reason\":\"length\"}}\n\n",
		"event: x\ndata: a\ndata: b\n: c\n\ndata",
		`{"id":"x","model":"m","choices":[{"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
	} {
		for _, mode := range []uint8{0, 1, 3, 7} { // plain, SSE, SSE broken, TGI broken
			f.Add([]byte(s), mode, uint16(7*i+40), uint16(16), uint64(i))
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, mode uint8, cut, capMax uint16, seed uint64) {
		sse, broken, tgi := mode&1 != 0, mode&2 != 0, mode&4 != 0
		keep := int(mode>>3) * 8
		k := len(in)
		if broken {
			k = int(cut) % (len(in) + 1)
		}
		r := rand.New(rand.NewPCG(seed, 4))
		src := func(kind int) io.Reader {
			var rd io.Reader = bytes.NewReader(in[:k])
			switch kind {
			case 1:
				rd = iotest.OneByteReader(rd)
			case 2:
				rd = &chunkReader{src: in[:k], r: r, max: 1 + r.IntN(40)}
			}
			if broken {
				rd = breakReader{rd}
				if kind == 0 {
					rd = iotest.DataErrReader(rd) // the last bytes come with the error
				}
			}
			return rd
		}
		res := runTap(t, src(0), sse, tgi, int(capMax), keep, r)
		for kind := 1; kind <= 2; kind++ {
			other := runTap(t, src(kind), sse, tgi, int(capMax), keep, r)
			if !reflect.DeepEqual(res, other) {
				t.Fatalf("input %q (sse %v, broken at %d): read whole\n%+v\nread in pieces (%d)\n%+v", in, sse, k, res, kind, other)
			}
		}
		if broken != res.readErrBroken {
			t.Fatalf("input %q: broken %v, read error recorded %v", in, broken, res.readErrBroken)
		}
		switch {
		case !broken:
			if res.err != nil || !bytes.Equal(res.out, in) {
				t.Fatalf("input %q passed as %q, %v", in, res.out, res.err)
			}
		case !sse:
			if res.err != errBroken || !bytes.Equal(res.out, in[:k]) {
				t.Fatalf("plain body %q broken at %d passed as %q, %v; want the bytes, then the error", in, k, res.out, res.err)
			}
		default:
			if res.err != nil || !bytes.HasPrefix(res.out, in[:k]) {
				t.Fatalf("stream %q broken at %d passed as %q, %v", in, k, res.out, res.err)
			}
			checkErrorEvent(t, in[:k], res.out, tgi)
		}
		if sse {
			payloads := refPayloads(in[:k], !broken)
			tokens := 0
			for _, p := range payloads {
				if !bytes.Equal(p, doneMarker) {
					mask, extra := contentChoices(p)
					tokens += bits.OnesCount64(mask) + extra
				}
			}
			if res.events != len(payloads) || res.tokens != tokens {
				t.Fatalf("stream %q (broken %v at %d): %d events, %d tokens; want %d, %d", in, broken, k, res.events, res.tokens, len(payloads), tokens)
			}
			if len(res.streamed) > keep {
				t.Fatalf("kept %d bytes of the stream, bound %d", len(res.streamed), keep)
			}
		} else {
			want := in[:min(k, int(capMax))]
			if !bytes.Equal(res.captured, want) || res.truncated != (k > int(capMax)) {
				t.Fatalf("body %q (%d bytes, bound %d): captured %q, truncated %v", in[:k], k, capMax, res.captured, res.truncated)
			}
		}
		if !broken { // FuzzStrip and FuzzUsageStripper cut the input every way
			opens := bytes.Count(in, []byte("{")) + bytes.Count(in, []byte("["))
			if out := readStripped(t, bytes.NewReader(in), sse, r); len(out) > len(in)+3*opens {
				t.Fatalf("the logprobs stripper made %d bytes of %d: %q", len(out), len(in), in)
			}
			if sse {
				if out := readUsageStripped(t, bytes.NewReader(in), r); len(out) > len(in) {
					t.Fatalf("the usage stripper made %d bytes of %d: %q", len(out), len(in), in)
				}
			}
		}
	})
}

// checkErrorEvent fails t unless out, the stream sent broken after sent
// and ended by the tap, dispatches the tap's error event as its last event
// in an SSE client, on its own.
func checkErrorEvent(t *testing.T, sent, out []byte, tgi bool) {
	t.Helper()
	const msg = "the stream from backend b broke before it ended"
	want := `{"error":{"message":"` + msg + `","type":"upstream_error","code":"upstream_stream_broken"}}`
	if tgi {
		want = `{"error":"` + msg + `","error_type":"upstream_error"}`
	}
	if !json.Valid([]byte(want)) {
		t.Fatalf("bad want %s", want)
	}
	events := sseEvents(out)
	if len(events) == 0 || events[len(events)-1] != want || !bytes.HasSuffix(out, []byte("\n\n")) {
		t.Fatalf("stream %q broken there reached the client as %q: events %q, want the last one %s", sent, out, events, want)
	}
}

// feedbackRecorder is a FeedbackSink that records its calls: an id of odd
// length is unknown.
type feedbackRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *feedbackRecorder) Feedback(_ context.Context, id string, correct bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, id+"="+strconv.FormatBool(correct))
	if len(id)%2 == 1 {
		return ErrUnknownResponse
	}
	return nil
}

func (r *feedbackRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

// fuzzServer is a gateway's handler (not run: the admin and feedback
// routes need no background work) with admin token "s3cret" and opts.
func fuzzServer(f *testing.F, opts Options) http.Handler {
	cfg := config.Default()
	cfg.Backends = []config.Backend{backend("a", "http://127.0.0.1:9")}
	cfg.Health.Interval = 0
	cfg.Admin.Token = "s3cret"
	if err := cfg.ValidateServe(); err != nil {
		f.Fatal(err)
	}
	opts.Config, opts.Log = cfg, slog.New(slog.DiscardHandler)
	s, err := New(opts)
	if err != nil {
		f.Fatal(err)
	}
	return s.Handler()
}

// serve runs one request through h and returns the response.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// checkJSONAnswer fails t unless rec's body is JSON of at most limit bytes,
// and an error body has OpenAI's shape.
func checkJSONAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder, limit int) {
	t.Helper()
	b := rec.Body.Bytes()
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") || !json.Valid(b) || len(b) > limit {
		t.Fatalf("%s: %d %q (%s), want JSON of at most %d bytes", what, rec.Code, b, rec.Header().Get("Content-Type"), limit)
	}
	if rec.Code >= 400 {
		var eb struct {
			Error struct{ Message, Type, Code string }
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" || eb.Error.Code == "" {
			t.Fatalf("%s: %d %q, not an OpenAI error body", what, rec.Code, b)
		}
	}
}

// FuzzFeedbackBody: POST /v1/feedback hands the sink exactly the id and
// label of a body {"id": non-empty string, "correct": boolean}, once, and
// answers 200 (404 for an id the sink does not know); anything else is a
// 400 that reaches no sink, a body over 64 KiB a 413, whether its length
// is announced or not. Every answer is JSON, bounded by the body's size.
func FuzzFeedbackBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"chatcmpl-1a","correct":true}`, `{"id":"x","correct":false}`, `{"id":"","correct":true}`, `{"id":"x"}`,
		`{"id":7,"correct":true}`, `{"id":"x","correct":"yes"}`, `{"ID":"ab","Correct":false,"extra":[1]}`, `[]`, `null`, ``,
		`{"id":"\u0000\ud800","correct":true}`, "{\"id\":\"\xff\xfe\",\"correct\":true}", `{"id":"a","correct":true}{}`,
	} {
		f.Add([]byte(s), uint8(0))
	}
	sink := &feedbackRecorder{}
	h := fuzzServer(f, Options{Feedback: sink})
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		if mode&2 != 0 && len(body) > 0 { // over the limit
			body = bytes.Repeat(body, (64<<10)/len(body)+1)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/feedback", bytes.NewReader(body))
		if mode&1 != 0 {
			req.ContentLength = -1 // chunked: the limit is the reader's
		}
		rec := serve(h, req)
		calls := sink.take()
		checkJSONAnswer(t, "POST /v1/feedback "+strconv.Quote(string(body)), rec, 6*len(body)+256)
		var ref struct {
			ID      string `json:"id"`
			Correct *bool  `json:"correct"`
		}
		switch {
		case len(body) > 64<<10:
			if rec.Code != http.StatusRequestEntityTooLarge || len(calls) != 0 {
				t.Fatalf("%d-byte body: %d, sink got %q", len(body), rec.Code, calls)
			}
		case json.Unmarshal(body, &ref) == nil && ref.ID != "" && ref.Correct != nil:
			want := []string{ref.ID + "=" + strconv.FormatBool(*ref.Correct)}
			if !reflect.DeepEqual(calls, want) {
				t.Fatalf("body %q: sink got %q, want %q", body, calls, want)
			}
			if len(ref.ID)%2 == 1 {
				var eb struct{ Error struct{ Message string } }
				_ = json.Unmarshal(rec.Body.Bytes(), &eb)
				if rec.Code != http.StatusNotFound || eb.Error.Message != "no response with id "+ref.ID+" is known" {
					t.Fatalf("body %q with an unknown id: %d %q", body, rec.Code, rec.Body.Bytes())
				}
			} else if rec.Code != http.StatusOK || rec.Body.String() != `{"recorded":true}` {
				t.Fatalf("body %q: %d %q", body, rec.Code, rec.Body.Bytes())
			}
		default:
			if rec.Code != http.StatusBadRequest || len(calls) != 0 {
				t.Fatalf("body %q: %d, sink got %q; want 400 and no call", body, rec.Code, calls)
			}
		}
	})
}
