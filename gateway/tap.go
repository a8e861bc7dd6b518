package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/vigil-gw/vigil/analyzers/sse"
)

// tap wraps an upstream response body. Each Read passes the bytes through
// unchanged and, on the same goroutine, splits SSE events (handing a copy of
// each to the dispatcher, which never blocks) or keeps a bounded copy of a
// plain body. It records the first byte's time and the token usage for the
// access log. A tap is used by the one goroutine that copies the response.
type tap struct {
	body       io.ReadCloser
	x          *exchange
	sse        bool
	split      sse.Splitter
	captureMax int
	onData     func([]byte)
}

func newTap(body io.ReadCloser, x *exchange, isSSE bool, captureMax int) *tap {
	t := &tap{body: body, x: x, sse: isSSE, captureMax: captureMax}
	t.onData = t.data
	return t
}

func (t *tap) Read(p []byte) (int, error) {
	n, err := t.body.Read(p)
	if n > 0 {
		x := t.x
		if x.firstByte.IsZero() {
			x.firstByte = time.Now()
		}
		if t.sse {
			t.split.Write(p[:n], t.onData)
		} else {
			t.capture(p[:n])
		}
	}
	if err != nil {
		if err == io.EOF {
			if t.sse {
				t.split.Flush(t.onData)
			}
		} else if t.x.readErr == nil {
			t.x.readErr = err
		}
	}
	return n, err
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

func (t *tap) data(payload []byte) {
	x := t.x
	x.events++
	if bytes.Equal(payload, doneMarker) {
		return
	}
	if hasObject(payload, `"usage"`) || hasObject(payload, `"details"`) {
		x.usage(payload)
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

// usageBody holds the token counts of OpenAI (usage) and TGI (details) bodies.
type usageBody struct {
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Details *struct {
		GeneratedTokens int `json:"generated_tokens"`
	} `json:"details"`
}

// usage records the token counts found in a JSON document, if any.
func (x *exchange) usage(doc []byte) {
	var u usageBody
	if json.Unmarshal(doc, &u) != nil {
		return
	}
	x.setUsage(u)
}

func (x *exchange) setUsage(u usageBody) {
	switch {
	case u.Usage != nil:
		x.promptTokens, x.completionTokens = u.Usage.PromptTokens, u.Usage.CompletionTokens
	case u.Details != nil:
		x.completionTokens = u.Details.GeneratedTokens
	}
}

// usageFromCapture records the usage of a captured non-streaming body. A
// capture cut at max_capture_bytes is not parsed: OpenAI servers write usage
// last, so it would be missing anyway.
func (x *exchange) usageFromCapture() {
	if len(x.captured) > 0 && x.captured[0] == '{' && !x.truncated {
		x.usage(x.captured)
	}
}
