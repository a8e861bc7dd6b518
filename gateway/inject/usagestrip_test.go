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
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/jsonscan"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// readUsageStripped reads a usage stripper over src with reads of random
// sizes, down to one byte.
func readUsageStripped(t testing.TB, src io.Reader, r *rand.Rand) []byte {
	return testutil.ReadInPieces(t, NewUsageStripper(io.NopCloser(src)), r)
}

// splitReader returns a[0], then a[1], ..., then EOF: a body cut where
// the test says.
type splitReader struct{ parts [][]byte }

func (s *splitReader) Read(p []byte) (int, error) {
	for len(s.parts) > 0 && len(s.parts[0]) == 0 {
		s.parts = s.parts[1:]
	}
	if len(s.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.parts[0])
	s.parts[0] = s.parts[0][n:]
	return n, nil
}

// usageFeeds strips in fed whole, one byte at a time and in random chunks,
// and requires the outputs to agree.
func usageFeeds(t testing.TB, in []byte, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	return readEveryWay(t, in, r, func(src io.Reader) []byte { return readUsageStripped(t, src, r) })
}

// OpenAI-style chunks: with include_usage every chunk has "usage":null and
// the last one carries the usage (platform.openai.com, stream_options).
const (
	oaiHead  = `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt","system_fingerprint":"fp"`
	oaiDelta = `,"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]`
	oaiUsage = `{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10,"prompt_tokens_details":{"cached_tokens":0}}`
)

func TestUsageStrip(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"OpenAI stream",
			"data: " + oaiHead + oaiDelta + `,"usage":null}` + "\n\n" +
				"data: " + oaiHead + oaiDelta + `,"usage":null}` + "\n\n" +
				"data: " + oaiHead + `,"choices":[],"usage":` + oaiUsage + "}\n\n" +
				"data: [DONE]\n\n",
			"data: " + oaiHead + oaiDelta + "}\n\n" +
				"data: " + oaiHead + oaiDelta + "}\n\n" +
				"data: [DONE]\n\n"},
		{"vLLM continuous usage",
			`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}}` + "\n\n" +
				`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1}}` + "\n\n" +
				"data: [DONE]\n\n",
			`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}]}` + "\n\n" +
				"data: [DONE]\n\n"},
		{"usage first, middle, last, only",
			"data:{\"usage\":null,\"a\":1}\n\ndata:{\"a\":1,\"usage\":null,\"b\":2}\n\ndata:{\"a\":1,\"usage\":{\"x\":[1,{}]}}\n\ndata:{\"usage\":7}\n\n",
			"data:{\"a\":1}\n\ndata:{\"a\":1,\"b\":2}\n\ndata:{\"a\":1}\n\ndata:{}\n\n"},
		{"whitespace",
			"data: { \"a\" : 1 , \"usage\" : null , \"b\" : 2 }\n\ndata: { \"usage\" : null , \"b\" : 2 }\n\ndata: { \"usage\" : null }\n\n",
			"data: { \"a\" : 1  , \"b\" : 2 }\n\ndata: { \"b\" : 2 }\n\ndata: {  }\n\n"},
		{"Python's separators", `data: {"a": 1, "usage": null, "b": 2}` + "\n" + `data: {"a": 1, "usage": null}` + "\n", `data: {"a": 1, "b": 2}` + "\n" + `data: {"a": 1}` + "\n"},
		{"duplicate usage members", `data: {"usage":null,"a":1,"usage":{},"usage":2}` + "\n", `data: {"a":1}` + "\n"},
		{"nested usage untouched",
			`data: {"choices":[{"usage":null,"delta":{"usage":{}}}],"x":{"usage":1,"choices":[]}}` + "\n\n",
			`data: {"choices":[{"usage":null,"delta":{"usage":{}}}],"x":{"usage":1,"choices":[]}}` + "\n\n"},
		{"usage in strings untouched",
			`data: {"a":"\"usage\":null,","b":"\\","choices":["\"usage\""]}` + "\n\n",
			`data: {"a":"\"usage\":null,","b":"\\","choices":["\"usage\""]}` + "\n\n"},
		{"keys compared raw", `data: {"us\u0061ge":null,"Usage":null,"usage ":null}` + "\n", `data: {"us\u0061ge":null,"Usage":null,"usage ":null}` + "\n"},
		{"usage chunk needs empty choices and an object",
			`data: {"choices":[],"usage":null}` + "\n\n" + `data: {"choices":[0],"usage":{}}` + "\n\n" + `data: {"choices":{},"usage":{}}` + "\n\n" + `data: {"usage":{}}` + "\n\n" +
				`data: {"choices":[ ],"usage":{}}` + "\n\n" + `data: {"usage":{},"choices":[]}` + "\n\n" + `data: {"choices":[],"choices":[1],"usage":{}}` + "\n\n",
			`data: {"choices":[]}` + "\n\n" + `data: {"choices":[0]}` + "\n\n" + `data: {"choices":{}}` + "\n\n" + `data: {}` + "\n\n" +
				`data: {"choices":[],"choices":[1]}` + "\n\n"},
		{"CRLF",
			"data: {\"a\":1,\"usage\":null}\r\n\r\ndata: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: [DONE]\r\n\r\n",
			"data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n"},
		{"CR",
			"data: {\"a\":1,\"usage\":null}\r\rdata: {\"choices\":[],\"usage\":{}}\r\rdata: [DONE]\r\r",
			"data: {\"a\":1}\r\rdata: [DONE]\r\r"},
		{"mixed endings", "data: {\"choices\":[],\"usage\":{}}\r\n\rdata: {\"choices\":[],\"usage\":{}}\r\r\ndata: {\"choices\":[],\"usage\":{}}\n\r\nx\n", "x\n"},
		{"other lines pass",
			": keep-alive {\"usage\":null}\n\nevent: x\nid: 1\nretry: 5\n\nDATA: {\"usage\":null}\n data: {\"usage\":null}\ndata {\"usage\":null}\ndata\ndat\n\n",
			": keep-alive {\"usage\":null}\n\nevent: x\nid: 1\nretry: 5\n\nDATA: {\"usage\":null}\n data: {\"usage\":null}\ndata {\"usage\":null}\ndata\ndat\n\n"},
		{"not JSON or invalid passes",
			"data: [DONE]\n\ndata: {\"usage\":nul}\n\ndata: {\"usage\":null} x\n\ndata: {\"usage\":null,}\n\ndata: [{\"usage\":null}]\n\ndata: \"usage\"\n\ndata: {\"usage\":null\n\ndata: {\"usage\":01}\n\ndata: {\"usage\":\"\x01\"}\n\n",
			"data: [DONE]\n\ndata: {\"usage\":nul}\n\ndata: {\"usage\":null} x\n\ndata: {\"usage\":null,}\n\ndata: [{\"usage\":null}]\n\ndata: \"usage\"\n\ndata: {\"usage\":null\n\ndata: {\"usage\":01}\n\ndata: {\"usage\":\"\x01\"}\n\n"},
		{"only an event's own blank line goes",
			"event: usage\ndata: {\"choices\":[],\"usage\":{}}\n\n\ndata: {\"choices\":[],\"usage\":{}}\ndata: {\"a\":1}\n\ndata: {\"choices\":[],\"usage\":{}}\ndata: {\"choices\":[],\"usage\":{}}\n\n\n",
			"event: usage\n\n\ndata: {\"a\":1}\n\n\n"},
		{"stream cut off in a line", "data: {\"a\":1}\n\ndata: {\"a\":2,\"usage\":null}", "data: {\"a\":1}\n\ndata: {\"a\":2}"},
		{"stream cut off in a document", "data: {\"a\":1,\"usage\":null", "data: {\"a\":1,\"usage\":null"},
		{"stream cut off after CR", "data: {\"choices\":[],\"usage\":{}}\r", ""},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			for seed := range uint64(20) {
				got := usageFeeds(t, in, seed)
				if diff := cmp.Diff(tt.want, string(got)); diff != "" {
					t.Fatalf("(-want +got):\n%s", diff)
				}
			}
			if ref := refUsageStrip(in); string(ref) != tt.want {
				t.Errorf("the reference disagrees: %q", ref)
			}
			// Cut in two at every offset, read with random sizes.
			r := rand.New(rand.NewPCG(uint64(len(in)), 3))
			for i := range len(in) + 1 {
				src := &splitReader{parts: [][]byte{bytes.Clone(in[:i]), bytes.Clone(in[i:])}}
				if got := readUsageStripped(t, src, r); string(got) != tt.want {
					t.Fatalf("cut at %d: got %q", i, got)
				}
			}
		})
	}
}

// TestUsageStripDoesNotHoldBack: a line is readable as soon as its end
// arrived, before the next bytes are written; lines other than data lines
// as their bytes arrive.
func TestUsageStripDoesNotHoldBack(t *testing.T) {
	pr, pw := io.Pipe()
	s := NewUsageStripper(pr)
	defer s.Close()
	got := reads(s)
	expect := func(step, want string) {
		t.Helper()
		var have string
		for have != want {
			select {
			case part, ok := <-got:
				if !ok {
					t.Fatalf("%s: stream ended", step)
				}
				have += part
			case <-time.After(5 * time.Second):
				t.Fatalf("%s held back; have %q, want %q", step, have, want)
			}
		}
	}
	for i := range 3 {
		pw.Write([]byte(": comm"))
		expect("part of a comment", ": comm")
		pw.Write([]byte("ent\n"))
		expect("rest of a comment", "ent\n")
		pw.Write([]byte(`data: {"choices":[{"text":"a"}],"usage":null}` + "\r"))
		expect("data line", `data: {"choices":[{"text":"a"}]}`+"\r")
		pw.Write([]byte("\n"))
		expect("its LF", "\n")
		pw.Write([]byte("\r\n"))
		expect("blank line", "\r\n")
		if i == 2 {
			pw.Write([]byte(`data: {"choices":[],"usage":{"total_tokens":3}}` + "\n\n" + `data: {"a":1}`))
		}
	}
	pw.CloseWithError(errors.New("backend died"))
	expect("the line cut off", `data: {"a":1}`)
	for range got {
	}
	if _, err := s.Read(make([]byte, 8)); err == nil || err.Error() != "backend died" {
		t.Errorf("error after the stream: %v, want the source's", err)
	}
}

// TestUsageStripLongLine: a data line up to maxUsageLine is held and
// filtered, however it arrives; a longer one passes unmodified, and the
// lines after it are filtered again.
func TestUsageStripLongLine(t *testing.T) {
	line := func(size int) string {
		const head, tail = `data: {"a":"`, `","usage":null}`
		return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	}
	next := `data: {"b":1,"usage":null}` + "\n\n"
	nextWant := `data: {"b":1}` + "\n\n"
	for _, tt := range []struct {
		name   string
		size   int
		strips bool
	}{
		{"one buffer", stripBufSize, true},
		{"at the bound", maxUsageLine, true},
		{"over the bound", maxUsageLine + 1, false},
		{"far over the bound", 3 * maxUsageLine, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := line(tt.size)
			want := l
			if tt.strips {
				want = strings.TrimSuffix(l, `,"usage":null}`) + "}"
			}
			in := []byte(l + "\n\n" + next)
			want += "\n\n" + nextWant
			r := rand.New(rand.NewPCG(1, 1))
			for _, src := range []io.Reader{
				bytes.NewReader(in),
				testutil.ChunkReader(in, r, 5000),
				&splitReader{parts: [][]byte{bytes.Clone(in[:len(l)-3]), bytes.Clone(in[len(l)-3:])}},
			} {
				s := NewUsageStripper(io.NopCloser(src))
				got, err := io.ReadAll(s)
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want {
					t.Fatalf("got %d bytes, want %d; tail %q", len(got), len(want), got[max(0, len(got)-80):])
				}
			}
		})
	}
}

// TestUsageStripAllocs: stripping an event allocates nothing once the
// buffer is taken.
func TestUsageStripAllocs(t *testing.T) {
	for _, c := range usageBenchCases(t) {
		s := NewUsageStripper(io.NopCloser(repeatReader{c.chunk}))
		buf := make([]byte, 32<<10)
		s.Read(buf)
		if a := testing.AllocsPerRun(200, func() { s.Read(buf) }); a != 0 {
			t.Errorf("%s: %v allocations per event", c.name, a)
		}
		s.Close()
	}
}

// refUsageStrip is what the usage stripper does, built on whole lines and
// encoding/json: each line with its ending ("\r\n", "\r" or "\n"); a
// "data:" line's document filtered by refStripDoc; a dropped line taking
// the blank line after it when it was the first of its event.
func refUsageStrip(in []byte) []byte {
	var out []byte
	eventStart, dropped := true, false
	for rest := in; len(rest) > 0; {
		i := bytes.IndexAny(rest, "\r\n")
		if i < 0 {
			i = len(rest)
		}
		line, end := rest[:i], rest[i:i]
		if i < len(rest) {
			end = rest[i : i+1]
			if rest[i] == '\r' && i+1 < len(rest) && rest[i+1] == '\n' {
				end = rest[i : i+2]
			}
		}
		rest = rest[len(line)+len(end):]
		switch doc, ok := bytes.CutPrefix(line, []byte("data:")); {
		case len(line) == 0:
			if !dropped {
				out = append(out, end...)
			}
			eventStart, dropped = true, false
		case ok:
			doc, drop := refStripDoc(doc)
			if drop {
				dropped = dropped || eventStart
				continue
			}
			out = append(append(append(out, "data:"...), doc...), end...)
			eventStart, dropped = false, false
		default:
			out = append(append(out, line...), end...)
			eventStart, dropped = false, false
		}
	}
	return out
}

// refMember is a root member of a JSON object: offsets of its key, its
// value, and the comma before it (-1 for the first).
type refMember struct{ comma, key, keyEnd, val, valEnd int }

// refMembers lists the root members of doc, valid JSON, with
// encoding/json's decoder; nil when the root is not an object.
func refMembers(doc []byte) []refMember {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	ms := []refMember{}
	for dec.More() {
		m := refMember{comma: -1}
		j := int(dec.InputOffset())
		for jsonscan.IsSpace(doc[j]) {
			j++
		}
		if doc[j] == ',' {
			m.comma = j
			for j++; jsonscan.IsSpace(doc[j]); j++ {
			}
		}
		m.key = j
		if _, err := dec.Token(); err != nil {
			panic(err)
		}
		m.keyEnd = int(dec.InputOffset())
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			panic(err)
		}
		m.valEnd = int(dec.InputOffset())
		m.val = m.valEnd - len(v)
		ms = append(ms, m)
	}
	return ms
}

// refStripDoc filters one data line's document: unchanged unless it is a
// valid JSON object; dropped when its last "choices" is [] and its last
// "usage" an object; else without its root "usage" members, each cut with
// the comma before it (the first member: with the comma and space after
// it).
func refStripDoc(doc []byte) ([]byte, bool) {
	if !json.Valid(doc) {
		return doc, false
	}
	doc = bytes.Clone(doc)
	for first := true; ; first = false {
		ms := refMembers(doc)
		var usage []refMember
		choicesEmpty, usageObject := false, false
		for _, m := range ms {
			switch string(doc[m.key:m.keyEnd]) {
			case `"usage"`:
				usage = append(usage, m)
				usageObject = doc[m.val] == '{'
			case `"choices"`:
				var v []json.RawMessage
				choicesEmpty = doc[m.val] == '[' && json.Unmarshal(doc[m.val:m.valEnd], &v) == nil && len(v) == 0
			}
		}
		if len(usage) == 0 {
			return doc, false
		}
		if first && choicesEmpty && usageObject {
			return nil, true
		}
		u := usage[0]
		from, to := u.comma, u.valEnd
		if u.comma < 0 {
			from = u.key
			if len(ms) > 1 {
				to = ms[1].key
			}
		}
		doc = append(doc[:from], doc[to:]...)
	}
}

// FuzzUsageStripper: the usage stripper never panics, agrees with itself
// however the input is cut, agrees with refUsageStrip, and passes through
// unchanged a body without a "usage" key. Its scanner agrees with
// json.Valid.
func FuzzUsageStripper(f *testing.F) {
	for _, s := range []string{
		"data: " + oaiHead + oaiDelta + `,"usage":null}` + "\n\n" + "data: " + oaiHead + `,"choices":[],"usage":` + oaiUsage + "}\n\ndata: [DONE]\n\n",
		"data:{\"usage\":null,\"a\":[1,{\"usage\":2}]}\r\n\r\ndata:{ \"a\" : -1.5e+3 , \"usage\" : {\"b\":\"\\u00e9\\\"\"} }\r\r",
		"event: x\ndata: {\"choices\":[],\"usage\":{}}\n\n\ndata: {\"choices\":[ ],\"usage\":{}}\ndata: {\"a\":true}\n\n",
		": c\ndata: [DONE]\ndata: {\"usage\":nul}\ndata: {\"usage\":null",
		`{"choices":[{"index":0,"text":"x","logprobs":{"tokens":["x"],"token_logprobs":[-0.1]}}],"usage":{"prompt_tokens":1}}`,
		`{"a":[[[{"b":false}]],0.5e-1,"\ud83d\ude00"],"usage":null}`,
	} {
		f.Add([]byte(s), uint64(0))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		// As given, and as the document of a data line.
		for _, body := range [][]byte{in, append(append([]byte("data: "), in...), "\n\n"...)} {
			got := usageFeeds(t, body, seed)
			if want := refUsageStrip(body); !bytes.Equal(got, want) {
				t.Fatalf("input %q:\n got %q\nwant %q", body, got, want)
			}
			if !bytes.Contains(body, []byte(`"usage"`)) && !bytes.Equal(got, body) {
				t.Fatalf("input without a usage key changed:\n in %q\nout %q", body, got)
			}
		}
		// The stripper scans exactly the JSON objects json.Valid accepts.
		_, ok := scanRoot(in)
		want := json.Valid(in) && in[jsonscan.SkipSpace(in, 0)] == '{'
		if ok != want {
			t.Fatalf("%q: scanRoot says a valid object %v, json.Valid %v", in, ok, want)
		}
	})
}

type usageBenchCase struct {
	name  string
	chunk []byte // what one Read of the source returns
}

// usageBenchCases are SSE events as the stripper meets them: the
// simulator's (vLLM's) with continuous usage, without and with logprobs;
// OpenAI's with "usage":null; the final usage chunk (dropped, so [DONE]
// follows it to give Read something to return); a chunk without usage.
func usageBenchCases(tb testing.TB) []usageBenchCase {
	s := sim.New(sim.Options{Model: "m1", Seed: 1, Created: 1, Knobs: sim.DefaultKnobs()})
	events := func(path, body string) []string {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		return strings.SplitAfter(rec.Body.String(), "\n\n")
	}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	cont := events("/v1/chat/completions", `{"model":"m1","max_tokens":4,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},`+msgs+`}`)
	contLP := events("/v1/chat/completions", `{"model":"m1","max_tokens":4,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"logprobs":true,"top_logprobs":5,`+msgs+`}`)
	plain := events("/v1/chat/completions", `{"model":"m1","max_tokens":4,"stream":true,`+msgs+`}`)
	last := len(cont) - 3 // before "data: [DONE]\n\n" and ""
	cases := []usageBenchCase{
		{"continuous usage", []byte(cont[2])},
		{"continuous usage, logprobs", []byte(contLP[2])},
		{"OpenAI usage null", []byte(strings.Replace(plain[2], "}\n\n", `,"usage":null}`+"\n\n", 1))},
		{"usage chunk", []byte(cont[last] + cont[last+1])},
		{"no usage", []byte(plain[2])},
	}
	for _, c := range cases[:3] {
		if !bytes.Contains(c.chunk, []byte(`"usage":`)) || bytes.Contains(c.chunk, []byte(`"choices":[]`)) {
			tb.Fatalf("%s: not a token event with usage: %q", c.name, c.chunk)
		}
	}
	if !bytes.Contains(cases[3].chunk, []byte(`"choices":[],"usage":{`)) {
		tb.Fatalf("not the usage chunk: %q", cases[3].chunk)
	}
	return cases
}

// BenchmarkUsageStrip filters one SSE event per op, through Read as the
// proxy calls it.
//
//	go test -run '^$' -bench UsageStrip -benchmem ./gateway/inject/
func BenchmarkUsageStrip(b *testing.B) {
	for _, c := range usageBenchCases(b) {
		b.Run(c.name, func(b *testing.B) {
			s := NewUsageStripper(io.NopCloser(repeatReader{c.chunk}))
			defer s.Close()
			buf := make([]byte, 32<<10)
			b.SetBytes(int64(len(c.chunk)))
			b.ReportAllocs()
			for b.Loop() {
				if n, err := s.Read(buf); err != nil || n == 0 || n >= len(c.chunk) && c.name != "no usage" {
					b.Fatalf("read %d, %v", n, err)
				}
			}
		})
	}
}
