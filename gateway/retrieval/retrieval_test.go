package retrieval

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// passages serves a retrieval service that answers two passages and
// records the last query.
func passages(t *testing.T, query *string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var q struct {
			Query string `json:"query"`
		}
		json.Unmarshal(b, &q)
		*query = q.Query
		w.Write([]byte(`{"passages":[{"text":"one"},{"text":"two"},{"text":"three"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAugment: the passages go in as one message, a system message first
// or a user message before the last user message, and the query is the
// last user message's text.
func TestAugment(t *testing.T) {
	var query string
	url := passages(t, &query)
	const ctxText = "Use the following context to answer.\n\n[1] one\n\n[2] two\n"
	msg := func(role string) string {
		b, _ := json.Marshal(struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		}{role, ctxText})
		return string(b)
	}
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"the sea"},{"type":"image_url"}]}]}`
	tests := []struct{ inject, want string }{
		{"system", `{"model":"m","messages":[` + msg("system") + `,{"role":"system","content":"be brief"},{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"the sea"},{"type":"image_url"}]}]}`},
		{"user", `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"first"},{"role":"assistant","content":"ok"},` + msg("user") + `,{"role":"user","content":[{"type":"text","text":"the sea"},{"type":"image_url"}]}]}`},
	}
	for _, tt := range tests {
		h := New(config.Retrieval{URL: url, Timeout: 5 * time.Second, TopK: 2, Inject: tt.inject, OnError: "skip"}, http.DefaultClient)
		out, n, err := h.Augment(context.Background(), []byte(body))
		if err != nil || n != 2 || string(out) != tt.want {
			t.Errorf("inject %s: %d passages, %v:\n got %s\nwant %s", tt.inject, n, err, out, tt.want)
		}
		if query != "the sea" {
			t.Errorf("inject %s: query %q, want the last user message's text", tt.inject, query)
		}
	}
	h := New(config.Retrieval{URL: url, Timeout: 5 * time.Second, TopK: 2, Inject: "system", OnError: "fail"}, http.DefaultClient)
	if !h.FailOnError() {
		t.Error("on_error fail: FailOnError is false")
	}
	noUser := `{"messages":[{"role":"system","content":"x"}]}`
	if out, n, err := h.Augment(context.Background(), []byte(noUser)); err != nil || n != 0 || string(out) != noUser {
		t.Errorf("no user message: %s, %d, %v; want the body unchanged", out, n, err)
	}
	if _, _, err := h.Augment(context.Background(), []byte(`{"prompt":"x"}`)); err == nil {
		t.Error("a body without messages was augmented")
	}
}
