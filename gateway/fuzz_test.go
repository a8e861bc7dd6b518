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
	"github.com/vigil-gw/vigil/gateway/inject"
	"github.com/vigil-gw/vigil/gateway/upstream"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// Fuzz targets for the bytes that clients and backends control, beside
// the older ones that sit next to their code (FuzzScanResponse,
// FuzzIndexKey, FuzzContentChoices, and package request's and package
// rewrite's). Each checks properties, not only that nothing panics.
// test/run runs every target for 5 s after the race tests, `test/run
// -fuzz` for 60 s each; one by hand:
//
//	go test -run '^$' -fuzz '^FuzzTap$' -fuzztime 60s ./gateway/
//
// Inputs that once failed live in testdata/fuzz/<target>/ and run with
// every `go test`.

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
	x := &call{req: &exchange.Request{Start: time.Now(), Operation: exchange.OpChat, Stream: sse}, backend: &upstream.Backend{Name: "b"}, span: spanState{recording: true}}
	tp := x.newTap(io.NopCloser(src), sse, capMax)
	if tgi {
		tp.shape = shapeTGI
	}
	tp.count, tp.spanned, tp.keepStream = sse, true, keep
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
		x.resp.chunks.release()
		return tapResult{
			out: out, err: err, events: x.resp.events, tokens: x.resp.chunks.tokens,
			prompt: x.resp.promptTokens, completion: x.resp.completionTokens, reported: x.resp.usageReported,
			finish: x.span.finish, id: x.span.respID, model: x.span.respModel,
			captured: x.resp.captured, streamed: x.span.streamed, truncated: x.resp.truncated, readErrBroken: errors.Is(x.resp.readErr, errBroken),
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
// strippers behind it (package rewrite) never grow what they pass
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
				rd = testutil.ChunkReader(in[:k], r, 1+r.IntN(40))
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
			if out := testutil.ReadInPieces(t, inject.NewStripper(io.NopCloser(bytes.NewReader(in)), sse), r); len(out) > len(in)+3*opens {
				t.Fatalf("the logprobs stripper made %d bytes of %d: %q", len(out), len(in), in)
			}
			if sse {
				if out := testutil.ReadInPieces(t, inject.NewUsageStripper(io.NopCloser(bytes.NewReader(in))), r); len(out) > len(in) {
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
		rec := testutil.Serve(h, req)
		calls := sink.take()
		testutil.CheckJSONAnswer(t, "POST /v1/feedback "+strconv.Quote(string(body)), rec, 6*len(body)+256)
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
