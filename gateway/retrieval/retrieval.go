// Package retrieval is the gateway's retrieval hook: it asks a retrieval
// service for passages on a chat request's last user message and splices
// them into the request as one context message.
package retrieval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/vigil-gw/vigil/config"
)

// A Hook calls the retrieval service of the retrieval hook. It is safe for
// concurrent use.
//
// Protocol: POST {"query": "<last user message>", "top_k": K} to the
// configured URL; the answer is {"passages": [{"text": "..."}, ...]}. The
// passages go into the chat request as one context message.
type Hook struct {
	cfg    config.Retrieval
	client *http.Client
}

// New returns the hook of cfg, calling the service with client.
func New(cfg config.Retrieval, client *http.Client) *Hook {
	return &Hook{cfg: cfg, client: client}
}

// FailOnError reports whether a failed retrieval fails the request
// (retrieval.on_error: fail) rather than letting it go on without context.
func (r *Hook) FailOnError() bool { return r.cfg.OnError == "fail" }

type passage struct {
	Text string `json:"text"`
}

// Augment asks for passages and splices the context message into body. It
// returns the body to send on and the number of passages spliced in: body
// itself when there was nothing to retrieve for or nothing came back.
func (r *Hook) Augment(ctx context.Context, body []byte) ([]byte, int, error) {
	msgs, err := locateMessages(body)
	if err != nil {
		return nil, 0, err
	}
	query := msgs.lastUserText()
	if query == "" {
		return body, 0, nil // nothing to retrieve for
	}
	ps, err := r.call(ctx, query)
	if err != nil || len(ps) == 0 {
		return body, 0, err
	}
	var sb strings.Builder
	sb.WriteString("Use the following context to answer.\n")
	for i, p := range ps {
		fmt.Fprintf(&sb, "\n[%d] %s\n", i+1, p.Text)
	}
	role := "system"
	at, sep := msgs.open, ","
	if len(msgs.elems) == 0 {
		sep = ""
	}
	if r.cfg.Inject == "user" {
		role = "user"
		if i := msgs.lastUser; i > 0 {
			at, sep = msgs.elems[i-1].end, ","
		}
	}
	msg, _ := json.Marshal(struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{role, sb.String()})
	var out []byte
	out = append(out, body[:at]...)
	if at == msgs.open {
		out = append(append(out, msg...), sep...)
	} else {
		out = append(append(out, sep...), msg...)
	}
	out = append(out, body[at:]...)
	return out, len(ps), nil
}

func (r *Hook) call(ctx context.Context, query string) ([]passage, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	q, _ := json.Marshal(map[string]any{"query": query, "top_k": r.cfg.TopK})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.URL, bytes.NewReader(q))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("retrieval service answered %s", resp.Status)
	}
	var res struct {
		Passages []passage `json:"passages"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&res); err != nil {
		return nil, fmt.Errorf("retrieval answer: %w", err)
	}
	if len(res.Passages) > r.cfg.TopK {
		res.Passages = res.Passages[:r.cfg.TopK]
	}
	return res.Passages, nil
}

// messages locates the "messages" array of a chat body: the offset just
// after its '[', each element's byte range, and the index of the last user
// message (-1 if none).
type messages struct {
	open     int
	elems    []span
	texts    []string
	lastUser int
}

type span struct{ start, end int }

var errNoMessages = errors.New("no messages array")

func locateMessages(body []byte) (*messages, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNoMessages
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		if key != "messages" {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil, err
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('[') {
			return nil, errNoMessages
		}
		m := &messages{open: int(dec.InputOffset()), lastUser: -1}
		for dec.More() {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return nil, err
			}
			end := int(dec.InputOffset())
			m.elems = append(m.elems, span{end - len(raw), end})
			var msg struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			}
			json.Unmarshal(raw, &msg)
			m.texts = append(m.texts, contentText(msg.Content))
			if msg.Role == "user" {
				m.lastUser = len(m.elems) - 1
			}
		}
		return m, nil
	}
	return nil, errNoMessages
}

func (m *messages) lastUserText() string {
	if m.lastUser < 0 {
		return ""
	}
	return m.texts[m.lastUser]
}

// contentText is a message's text: a string, or the text parts of an array.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}
