package sim

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"
)

// testCreated pins "created" so that responses are byte-identical.
const testCreated = 1700000000

func newTestServer(t *testing.T, k Knobs) (*Server, *httptest.Server) {
	t.Helper()
	s := New(Options{Model: "sim-model", Seed: 42, Created: testCreated, Knobs: k})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return s, ts
}

func newServerFor(t *testing.T, s *Server) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// sseEvents splits an SSE body into the payloads of its events.
func sseEvents(t *testing.T, body []byte, prefix string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, ev := range bytes.Split(bytes.TrimSuffix(body, []byte("\n\n")), []byte("\n\n")) {
		payload, ok := bytes.CutPrefix(ev, []byte(prefix))
		if !ok {
			t.Fatalf("event %q lacks prefix %q", ev, prefix)
		}
		out = append(out, payload)
	}
	return out
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}
