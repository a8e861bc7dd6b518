package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/sse"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// responseStats is what a call's response body comes to: its timing,
// token usage, content chunks and gaps, the captured body and how it
// ended (its status, or the gateway's own error, is the proxy's:
// answerState). Only this file writes it: the tap as the body passes,
// then ended, which finish (server.go) calls before it hands it to the
// metrics, the access log, the observer and the backend's health.
type responseStats struct {
	firstByte        time.Time
	latency          time.Duration
	events           int
	promptTokens     int
	completionTokens int
	usageReported    bool // the backend reported usage (promptTokens, completionTokens)
	truncated        bool // captured holds only the first analyzers.max_capture_bytes
	// complete: the stream's end marker passed ([DONE], message_stop,
	// response.completed, TGI's details): the client has its whole
	// answer, whatever fails after it.
	complete bool
	// cachedTokens is the part of the prompt the backend reported reading
	// from its prefix cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens); extraPrompt the prompt tokens that
	// promptTokens leaves out (Anthropic's input_tokens counts neither
	// cache reads nor cache writes). int32, next to the bools: they fill
	// the padding that keeps call in its size class.
	cachedTokens, extraPrompt int32
	chunks                    chunkCounter
	// Set by finish: where the token counts came from, the stream's gaps.
	usageSource exchange.UsageSource
	gaps        exchange.Gaps
	captured    []byte
	readErr     error
}

// tokenCounts is responseStats' token counts as a value, for apis.go's
// readers of the Responses and Messages usage: each starts from the
// counts so far (tokens), since an event may report only some of them,
// and records what it made of them with setTokens, which keeps the writes
// of responseStats in this file.
type tokenCounts struct {
	prompt, completion  int   // promptTokens, completionTokens
	cached, extraPrompt int32 // cachedTokens, extraPrompt
	reported            bool  // usageReported
}

func (r *responseStats) tokens() tokenCounts {
	return tokenCounts{r.promptTokens, r.completionTokens, r.cachedTokens, r.extraPrompt, r.usageReported}
}

func (r *responseStats) setTokens(t tokenCounts) {
	r.promptTokens, r.completionTokens = t.prompt, t.completion
	r.cachedTokens, r.extraPrompt = t.cached, t.extraPrompt
	r.usageReported = t.reported
}

// prompt is the whole prompt's token count: what the backend reported as
// its input, plus the cache reads and writes that Anthropic's input_tokens
// leaves out (OpenTelemetry's gen_ai.usage.input_tokens counts them too),
// so that a cache hit does not shrink the usage a tenant is accounted.
func (r *responseStats) prompt() int { return r.promptTokens + int(r.extraPrompt) }

// tap wraps an upstream response body. Each Read passes the bytes through
// unchanged and, on the same goroutine, splits SSE events (handing a copy of
// each to the dispatcher, which never blocks) or keeps a bounded copy of a
// plain body. It records the first byte's time and the token usage for the
// access log. A tap is used by the one goroutine that copies the response.
//
// When an SSE stream breaks (a read error other than the client leaving),
// the tap ends it with an error event and a clean EOF rather than letting
// the proxy abort the connection: a client's SSE parser surfaces an abort
// inconsistently, an error event always (the OpenAI SDKs raise on a data
// object with an "error" key). Plain bodies still abort: a JSON body has
// no place for an error once it has begun, and the abort (a chunked body
// without its last chunk, or one short of its Content-Length) is how HTTP
// tells the client that the body is cut.
type tap struct {
	body       io.ReadCloser
	x          *call
	sse        bool
	shape      eventShape // of the error event that ends a broken stream
	api        bool       // a Responses or Messages body (apis.go)
	count      bool       // count content chunks and time their gaps (chunks.go)
	spanned    bool       // x.span.recording
	broken     bool       // the stream broke: pending, then EOF
	tail       [4]byte    // the last bytes passed through, for the error event's framing
	split      sse.Splitter
	captureMax int
	keepStream int           // bytes of SSE payloads to keep for content capture; 0: none
	at         time.Duration // when the bytes being split arrived, since the request started
	ntail      int           // of tail
	pending    []byte        // the rest of the error event
}

// eventShape is the shape of the error event that ends a broken stream:
// the one the route's clients parse.
type eventShape uint8

const (
	shapeOpenAI    eventShape = iota // data: {"error": {...}}
	shapeTGI                         // data:{"error": "...", "error_type": "..."}
	shapeResponses                   // event: error + data: {"type": "error", "code", "message", "param"}
	shapeAnthropic                   // event: error + data: {"type": "error", "error": {"type", "message"}}
)

// newTap wraps body in the call's tap (a second response in one call gets
// a tap of its own).
func (x *call) newTap(body io.ReadCloser, isSSE bool, captureMax int) *tap {
	t := &x.tap
	if x.tapped {
		t = new(tap)
	}
	x.tapped = true
	*t = tap{body: body, x: x, sse: isSSE, captureMax: captureMax}
	return t
}

func (t *tap) Read(p []byte) (int, error) {
	if t.broken {
		n := copy(p, t.pending)
		t.pending = t.pending[n:]
		if len(t.pending) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	c := t.x.retry.ctl
	if c != nil && c.idleFor > 0 {
		c.reads.Add(1) // odd: waiting on the backend (cancel.go: sweepIdle)
	}
	n, err := t.body.Read(p)
	if c != nil && c.idleFor > 0 {
		c.reads.Add(1)
	}
	if n > 0 {
		x := t.x
		now := time.Now()
		x.client.extendWrite(now)
		t.at = now.Sub(x.req.Start)
		if x.resp.firstByte.IsZero() {
			x.resp.firstByte = now
			if x.span.infer != nil {
				x.span.infer.AddEvent(firstTokenEvent)
			}
		}
		if t.sse {
			t.split.Write(p[:n], t.data)
			t.track(p[:n])
		} else {
			t.capture(p[:n])
		}
	}
	if err != nil {
		if err == io.EOF {
			if t.sse {
				t.split.Flush(t.data)
			}
			return n, err
		}
		if t.x.resp.complete {
			// Past the end marker: the client has its whole answer, and
			// what fails now (the client left as soon as it read the
			// marker, before the backend ended its body) is no fault of
			// the answer's.
			return n, io.EOF
		}
		if t.x.resp.readErr == nil {
			t.x.resp.readErr = err
		}
		if t.sse && !errors.Is(err, context.Canceled) {
			t.broken, t.pending = true, t.errorEvent()
			if n > 0 {
				return n, nil
			}
			return t.Read(p)
		}
	}
	return n, err
}

// track keeps the last bytes of the stream.
func (t *tap) track(b []byte) {
	if len(b) >= len(t.tail) {
		t.ntail = copy(t.tail[:], b[len(b)-len(t.tail):])
		return
	}
	var buf [2 * len(t.tail)]byte
	all := append(append(buf[:0], t.tail[:t.ntail]...), b...)
	t.ntail = copy(t.tail[:], all[max(0, len(all)-len(t.tail)):])
}

// errorEvent returns the event that ends a broken stream, framed so that it
// is an event of its own: after a complete event it follows directly; after
// a complete line of an unfinished event, a blank line first ends that
// event as the backend sent it; in the middle of a line, the line and its
// event are ended first (a client sees that event as malformed, then the
// error).
func (t *tap) errorEvent() []byte {
	tail := string(t.tail[:t.ntail])
	hasSuffix := strings.HasSuffix
	var b []byte
	switch {
	case t.ntail == 0 || hasSuffix(tail, "\n\n") || hasSuffix(tail, "\r\n\r\n") || hasSuffix(tail, "\r\r"):
	case hasSuffix(tail, "\n") || hasSuffix(tail, "\n\r"):
		// After a line ending, one more is the blank line. After "\n\r" the
		// event has ended already; the '\n' only completes a CRLF.
		b = append(b, '\n')
	default:
		// In a line, or after a lone '\r' that ends one: a single '\n' would
		// only make that '\r' a CRLF.
		b = append(b, "\n\n"...)
	}
	text, code := "the stream from backend "+t.x.backend.Name+" broke before it ended", "upstream_stream_broken"
	if c := t.x.retry.ctl; c != nil && c.idled.Load() {
		text, code = "the stream from backend "+t.x.backend.Name+" sent nothing for "+c.idleFor.String(), "upstream_stream_idle"
	}
	msg, _ := json.Marshal(text)
	switch t.shape {
	case shapeTGI:
		// TGI's own error events: {"error": "...", "error_type": "..."}.
		b = append(b, `data:{"error":`...)
		b = append(b, msg...)
		b = append(b, `,"error_type":"upstream_error"}`...)
	case shapeResponses:
		// The Responses API's error event, which its SDKs raise.
		b = append(b, "event: error\n"+`data: {"type":"error","code":"`+code+`","message":`...)
		b = append(b, msg...)
		b = append(b, `,"param":null}`...)
	case shapeAnthropic:
		typ := "api_error"
		if code == "upstream_stream_idle" {
			typ = "timeout_error"
		}
		b = append(b, "event: error\n"+`data: {"type":"error","error":{"type":"`+typ+`","message":`...)
		b = append(b, msg...)
		b = append(b, `}}`...)
	default:
		b = append(b, `data: {"error":{"message":`...)
		b = append(b, msg...)
		b = append(b, `,"type":"upstream_error","code":"`+code+`"}}`...)
	}
	return append(b, "\n\n"...)
}

func (t *tap) Close() error { return t.body.Close() }

func (t *tap) capture(b []byte) {
	x := t.x
	room := t.captureMax - len(x.resp.captured)
	if room <= 0 {
		if len(b) > 0 {
			x.resp.truncated = true
		}
		return
	}
	if len(b) > room {
		b = b[:room]
		x.resp.truncated = true
	}
	x.resp.captured = append(x.resp.captured, b...)
	if x.findOwner {
		x.ownerFromCapture()
	}
}

var doneMarker = []byte("[DONE]")

// firstTokenEvent marks, on the inference span, when the first byte of the
// response body arrived.
const firstTokenEvent = "gen_ai.first_token"

func (t *tap) data(payload []byte) {
	x := t.x
	x.resp.events++
	if bytes.Equal(payload, doneMarker) {
		x.resp.complete = true
		return
	}
	if t.api {
		content, end := x.apiEvent(payload)
		if content {
			x.resp.chunks.add(1, 0, t.at) // as choice 0: these APIs stream one output
		}
		x.resp.complete = x.resp.complete || end
		t.keep(payload)
		return
	}
	if x.resp.events == 1 && t.spanned {
		x.meta(payload) // id and model: one small scan per stream
	}
	if t.count {
		if mask, extra := contentChoices(payload); mask != 0 || extra != 0 {
			x.resp.chunks.add(mask, extra, t.at)
		}
	}
	if t.spanned {
		x.span.found("", "", finishReason(payload))
	}
	if hasObject(payload, `"usage"`) || hasObject(payload, `"details"`) {
		x.usage(payload)
	}
	t.keep(payload)
}

// keep hands an event's payload to the observer, and to content capture.
func (t *tap) keep(payload []byte) {
	x := t.x
	x.span.keep(payload, t.keepStream)
	if x.disp != nil {
		x.disp.chunk(x.req, &x.pending, payload)
	}
}

// hasObject reports whether key occurs in b followed by a JSON object (not
// null), a cheap test that spares parsing every chunk for usage.
func hasObject(b []byte, key string) bool {
	for {
		i := jsonscan.IndexKey(b, key)
		if i < 0 {
			return false
		}
		b = b[i+len(key):]
		j := 0
		for j < len(b) && (b[j] == ' ' || b[j] == ':' || b[j] == '\t') {
			j++
		}
		if j < len(b) && b[j] == '{' {
			return true
		}
	}
}

// finishReason returns a chunk's "finish_reason" string value without
// parsing the chunk; "" when it has none (or null).
func finishReason(b []byte) string {
	const key = `"finish_reason":`
	i := jsonscan.IndexKey(b, key)
	if i < 0 {
		return ""
	}
	b = bytes.TrimLeft(b[i+len(key):], " ")
	if len(b) == 0 || b[0] != '"' {
		return ""
	}
	end := bytes.IndexByte(b[1:], '"')
	if end < 0 || end > 64 {
		return ""
	}
	return string(b[1 : 1+end])
}

// meta records the response id and model of an OpenAI-style document.
func (x *call) meta(doc []byte) {
	var u responseFields
	if !scanResponse(doc, false, &u) {
		var m struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		}
		if json.Unmarshal(doc, &m) != nil {
			return
		}
		u = responseFields{id: m.ID, model: m.Model}
	}
	x.span.found(u.id, u.model, "")
}

// usageBody holds the token counts of OpenAI (usage) and TGI (details)
// bodies as encoding/json decodes them, the reference that the fast path
// (scanResponse) follows and falls back on.
type usageBody struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Details *struct {
		GeneratedTokens int    `json:"generated_tokens"`
		FinishReason    string `json:"finish_reason"`
	} `json:"details"`
	// Non-streaming OpenAI bodies: for the inference span.
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// responseFields are the members of a response body (or SSE event) that
// the gateway reads: usageBody without its pointers.
type responseFields struct {
	usage                          bool // "usage" is an object
	promptTokens, completionTokens int
	cachedTokens                   int  // usage.prompt_tokens_details.cached_tokens
	details                        bool // "details" is an object
	generatedTokens                int
	detailsFinish                  string
	id, model                      string
	firstFinish                    string // choices[0].finish_reason
}

func (u *usageBody) fields() responseFields {
	f := responseFields{id: u.ID, model: u.Model}
	if u.Usage != nil {
		f.usage, f.promptTokens, f.completionTokens = true, u.Usage.PromptTokens, u.Usage.CompletionTokens
		if d := u.Usage.PromptTokensDetails; d != nil {
			f.cachedTokens = d.CachedTokens
		}
	}
	if u.Details != nil {
		f.details, f.generatedTokens, f.detailsFinish = true, u.Details.GeneratedTokens, u.Details.FinishReason
	}
	if len(u.Choices) > 0 {
		f.firstFinish = u.Choices[0].FinishReason
	}
	return f
}

var (
	responseKeys = []string{"usage", "details", "id", "model", "choices"}
	metaKeys     = []string{"id", "model"}
	usageKeys    = []string{"prompt_tokens", "completion_tokens", "prompt_tokens_details"}
	promptKeys   = []string{"cached_tokens"}
	detailsKeys  = []string{"generated_tokens", "finish_reason"}
	choiceKeys   = []string{"finish_reason"}
)

// maxScanDepth is the nesting scanResponse follows; deeper documents go
// to encoding/json (whose own limit is 10000).
const maxScanDepth = 64

// scanResponse reads the members of doc that json.Unmarshal would decode
// into usageBody (all, or with full false only "id" and "model", as meta
// decodes them), without reflection: it runs on stream events, where the
// allocations of a decode per event would show in the gateway's overhead.
// It reports false for any document it cannot read exactly as
// encoding/json would (invalid JSON, a type error, a key that matches a
// field only under case folding or after unescaping, a string
// encoding/json would decode, deep nesting), and for a repeated member it
// reads (encoding/json merges repeated objects and arrays into what it
// decoded before): the caller decodes those with encoding/json.
func scanResponse(doc []byte, full bool, u *responseFields) bool {
	return scanResponseStrings(doc, full, true, u)
}

// scanResponseStrings is scanResponse, with the string members (id,
// model, finish reasons) checked but not kept unless strs.
func scanResponseStrings(doc []byte, full, strs bool, u *responseFields) bool {
	s := jsonscan.New(doc, jsonscan.Options{MaxDepth: maxScanDepth})
	if s.Peek() != '{' || !s.Enter('{') {
		return false
	}
	var seen uint8 // the members read, each at most once
	for n := 0; s.Member(&n); {
		switch key := s.Key(); {
		case string(key) == "id":
			scanString(&s, &u.id, strs)
		case string(key) == "model":
			scanString(&s, &u.model, strs)
		case !full:
			if _, sure := jsonscan.Field(key, metaKeys); !sure {
				return false
			}
			s.Skip()
		case string(key) == "usage":
			if seen&1 != 0 {
				return false
			}
			seen |= 1
			if u.usage = objectOrNull(&s); u.usage {
				for m := 0; known(&s, &m, usageKeys); {
					switch string(s.Key()) {
					case "prompt_tokens":
						scanInt(&s, &u.promptTokens)
					case "completion_tokens":
						scanInt(&s, &u.completionTokens)
					default: // prompt_tokens_details
						if seen&8 != 0 {
							return false // null after an object clears it
						}
						seen |= 8
						if objectOrNull(&s) {
							for k := 0; known(&s, &k, promptKeys); {
								scanInt(&s, &u.cachedTokens)
							}
						}
					}
				}
			}
		case string(key) == "details":
			if seen&2 != 0 {
				return false
			}
			seen |= 2
			if u.details = objectOrNull(&s); u.details {
				for m := 0; known(&s, &m, detailsKeys); {
					if string(s.Key()) == "generated_tokens" {
						scanInt(&s, &u.generatedTokens)
					} else {
						scanString(&s, &u.detailsFinish, strs)
					}
				}
			}
		case string(key) == "choices":
			if seen&4 != 0 {
				return false
			}
			seen |= 4
			switch s.Peek() {
			case 'n':
				s.Literal("null")
			case '[':
				s.Enter('[')
				for i := 0; s.Element(&i); {
					var finish string
					if objectOrNull(&s) {
						for m := 0; known(&s, &m, choiceKeys); {
							scanString(&s, &finish, strs)
						}
					}
					if i == 1 {
						u.firstFinish = finish
					}
				}
			default:
				return false // a type error
			}
		default:
			if _, sure := jsonscan.Field(key, responseKeys); !sure {
				return false
			}
			s.Skip()
		}
	}
	return s.End()
}

// objectOrNull reads the start of an object, or null: it reports whether
// an object starts. Anything else is a type error and ends the fast path.
func objectOrNull(s *jsonscan.Scanner) bool {
	switch s.Peek() {
	case 'n':
		s.Literal("null")
		return false
	case '{':
		return s.Enter('{')
	}
	return s.Fail("not an object")
}

// known moves to the next member of the object being read whose key is
// one of keys, skipping the others; *n counts the members passed. A key
// that may match one of keys only as encoding/json matches them (case
// folded, or escaped) ends the fast path.
func known(s *jsonscan.Scanner, n *int, keys []string) bool {
	for s.Member(n) {
		i, sure := jsonscan.Field(s.Key(), keys)
		if i >= 0 {
			return true
		}
		if !sure {
			return s.Fail("key folds to a field")
		}
		s.Skip()
	}
	return false
}

// scanInt reads a number or null for an int member: null leaves *v
// alone, as encoding/json does. A fraction, an exponent or a number
// beyond int64 is encoding/json's type error and ends the fast path.
func scanInt(s *jsonscan.Scanner, v *int) {
	if s.Null() {
		return
	}
	raw, _, ok := s.Number()
	if !ok {
		return
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		s.Fail("not an int")
		return
	}
	*v = int(n)
}

// scanString reads a string or null for a string member, into *v when
// keep: null leaves *v alone, as encoding/json does. A string that
// encoding/json would decode (escapes, invalid UTF-8) ends the fast path.
func scanString(s *jsonscan.Scanner, v *string, keep bool) {
	if raw, ok := s.VerbatimStr(); ok && keep {
		*v = string(raw)
	}
}

// usage records the token counts found in a JSON document, if any, and
// the id, model and finish reason when x.span.recording.
func (x *call) usage(doc []byte) {
	var u responseFields
	if !scanResponseStrings(doc, true, x.span.recording, &u) {
		var b usageBody
		if json.Unmarshal(doc, &b) != nil {
			return
		}
		u = b.fields()
	}
	x.setUsage(&u)
}

func (x *call) setUsage(u *responseFields) {
	finish := u.firstFinish
	if u.details && u.detailsFinish != "" {
		finish = u.detailsFinish
	}
	x.span.found(u.id, u.model, finish)
	switch {
	case u.usage:
		x.resp.promptTokens, x.resp.completionTokens = u.promptTokens, u.completionTokens
		x.resp.cachedTokens, x.resp.extraPrompt = clampTokens(u.cachedTokens), 0
		x.resp.usageReported = true
	case u.details:
		x.resp.completionTokens = u.generatedTokens
		x.resp.usageReported = true
		// TGI sends its details with a stream's last event alone: the
		// end of the answer, as [DONE] is in OpenAI's.
		x.resp.complete = true
	}
}

// clampTokens fits a reported token count into responseStats' int32
// fields: negative counts are 0, the rest saturate (no prompt is 2³¹
// tokens long).
func clampTokens(n int) int32 {
	return int32(min(max(n, 0), math.MaxInt32))
}

// ended settles what the response came to once the request is over (now):
// its latency, the usage of a body read whole, where the token counts come
// from and the stream's gaps. finish calls it before it takes the outcome.
func (x *call) ended(now time.Time) {
	x.resp.latency = now.Sub(x.req.Start)
	x.bodyUsage()
	x.settleUsage()
}

// settleUsage decides where the token counts come from: the backend's
// usage when it reported any, else the content chunks counted in a
// stream (prompt tokens unknown), else none. It also summarizes the
// stream's gaps and releases their buffer.
func (x *call) settleUsage() {
	switch {
	case x.resp.usageReported:
		x.resp.usageSource = exchange.UsageReported
	case x.resp.chunks.tokens > 0:
		x.resp.completionTokens = x.resp.chunks.tokens
		x.resp.usageSource = exchange.UsageCounted
	default:
		x.resp.usageSource = exchange.UsageNone
	}
	g := &x.resp.gaps
	g.Count, g.P50, g.P95, g.Max = x.resp.chunks.summary()
}

// bodyUsage reads the usage of an answer the tap kept whole (not a stream
// whose events carried it).
func (x *call) bodyUsage() {
	if x.answer.apiErr != nil || (x.req.Stream && x.resp.events > 0) {
		return
	}
	if x.req.Operation == exchange.OpResponses || x.req.Operation == exchange.OpMessages {
		x.apiUsageFromCapture()
	} else {
		x.usageFromCapture()
	}
}

// usageFromCapture records the usage of a captured non-streaming body. A
// capture cut at max_capture_bytes is not parsed: OpenAI servers write usage
// last, so it would be missing anyway.
func (x *call) usageFromCapture() {
	if len(x.resp.captured) > 0 && x.resp.captured[0] == '{' && !x.resp.truncated {
		x.usage(x.resp.captured)
	}
}
