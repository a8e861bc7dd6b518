package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/analyzers/sse"
)

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
// object with an "error" key). Plain bodies still abort (issue 7).
type tap struct {
	body       io.ReadCloser
	x          *call
	sse        bool
	tgi        bool // error events in TGI's shape
	split      sse.Splitter
	captureMax int
	keepStream int           // bytes of SSE payloads to keep for content capture; 0: none
	count      bool          // count content chunks and time their gaps (chunks.go)
	at         time.Duration // when the bytes being split arrived, since the request started
	onData     func([]byte)

	tail    [4]byte // the last bytes passed through, for the error event's framing
	ntail   int
	broken  bool   // the stream broke: pending, then EOF
	pending []byte // the rest of the error event
}

func newTap(body io.ReadCloser, x *call, isSSE bool, captureMax int) *tap {
	t := &tap{body: body, x: x, sse: isSSE, captureMax: captureMax}
	t.onData = t.data
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
	n, err := t.body.Read(p)
	if n > 0 {
		x := t.x
		now := time.Now()
		t.at = now.Sub(x.req.Start)
		if x.firstByte.IsZero() {
			x.firstByte = now
			if x.infer != nil {
				x.infer.AddEvent(firstTokenEvent)
			}
		}
		if t.sse {
			t.split.Write(p[:n], t.onData)
			t.track(p[:n])
		} else {
			t.capture(p[:n])
		}
	}
	if err != nil {
		if err == io.EOF {
			if t.sse {
				t.split.Flush(t.onData)
			}
			return n, err
		}
		if t.x.readErr == nil {
			t.x.readErr = err
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
	case hasSuffix(tail, "\n") || hasSuffix(tail, "\r"):
		b = append(b, '\n')
	default:
		b = append(b, "\n\n"...)
	}
	msg, _ := json.Marshal("the stream from backend " + t.x.backend.Name + " broke before it ended")
	if t.tgi {
		// TGI's own error events: {"error": "...", "error_type": "..."}.
		b = append(b, `data:{"error":`...)
		b = append(b, msg...)
		b = append(b, `,"error_type":"upstream_error"}`...)
	} else {
		b = append(b, `data: {"error":{"message":`...)
		b = append(b, msg...)
		b = append(b, `,"type":"upstream_error","code":"upstream_stream_broken"}}`...)
	}
	return append(b, "\n\n"...)
}

func (t *tap) Close() error { return t.body.Close() }

func (t *tap) capture(b []byte) {
	x := t.x
	room := t.captureMax - len(x.captured)
	if room <= 0 {
		if len(b) > 0 {
			x.truncated = true
		}
		return
	}
	if len(b) > room {
		b = b[:room]
		x.truncated = true
	}
	x.captured = append(x.captured, b...)
}

var doneMarker = []byte("[DONE]")

// firstTokenEvent marks, on the inference span, when the first byte of the
// response body arrived.
const firstTokenEvent = "gen_ai.first_token"

func (t *tap) data(payload []byte) {
	x := t.x
	x.events++
	if bytes.Equal(payload, doneMarker) {
		return
	}
	if x.events == 1 {
		x.meta(payload) // id and model: one small decode per stream
	}
	if t.count {
		if mask, extra := contentChoices(payload); mask != 0 || extra != 0 {
			x.chunks.add(mask, extra, t.at)
		}
	}
	if r := finishReason(payload); r != "" {
		x.finish = r
	}
	if hasObject(payload, `"usage"`) || hasObject(payload, `"details"`) {
		x.usage(payload)
	}
	if t.keepStream > 0 && len(x.streamed) < t.keepStream {
		x.streamed = append(x.streamed, payload[:min(len(payload), t.keepStream-len(x.streamed))]...)
	}
	if x.disp != nil {
		x.disp.chunk(x.req, payload)
	}
}

// hasObject reports whether key occurs in b followed by a JSON object (not
// null), a cheap test that spares parsing every chunk for usage.
func hasObject(b []byte, key string) bool {
	for {
		i := bytes.Index(b, []byte(key))
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
	i := bytes.Index(b, []byte(key))
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
	var m struct {
		ID    string `json:"id"`
		Model string `json:"model"`
	}
	if json.Unmarshal(doc, &m) == nil {
		x.respID, x.respModel = m.ID, m.Model
	}
}

// usageBody holds the token counts of OpenAI (usage) and TGI (details) bodies.
type usageBody struct {
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
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

// usage records the token counts found in a JSON document, if any.
func (x *call) usage(doc []byte) {
	var u usageBody
	if json.Unmarshal(doc, &u) != nil {
		return
	}
	x.setUsage(u)
}

func (x *call) setUsage(u usageBody) {
	if u.ID != "" {
		x.respID = u.ID
	}
	if u.Model != "" {
		x.respModel = u.Model
	}
	if len(u.Choices) > 0 && u.Choices[0].FinishReason != "" {
		x.finish = u.Choices[0].FinishReason
	}
	if u.Details != nil && u.Details.FinishReason != "" {
		x.finish = u.Details.FinishReason
	}
	switch {
	case u.Usage != nil:
		x.promptTokens, x.completionTokens = u.Usage.PromptTokens, u.Usage.CompletionTokens
		x.usageReported = true
	case u.Details != nil:
		x.completionTokens = u.Details.GeneratedTokens
		x.usageReported = true
	}
}

// usageFromCapture records the usage of a captured non-streaming body. A
// capture cut at max_capture_bytes is not parsed: OpenAI servers write usage
// last, so it would be missing anyway.
func (x *call) usageFromCapture() {
	if len(x.captured) > 0 && x.captured[0] == '{' && !x.truncated {
		x.usage(x.captured)
	}
}
