package sim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestHang: with Hang on, an inference request and a health check get no
// answer, not even headers, until the client gives up, and are counted
// while they hang; the simulator's own routes still answer, and turning
// Hang off answers the next request normally. The JSON knob round-trips.
func TestHang(t *testing.T) {
	s, ts := newTestServer(t, Knobs{Hang: true})
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`},
		{http.MethodGet, "/health", ""},
	} {
		ctx, cancel := context.WithCancel(t.Context())
		req, err := http.NewRequestWithContext(ctx, r.method, ts.URL+r.path, strings.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		// The request is held: counted as hanging, no answer yet.
		testutil.WaitFor(t, r.path+" counted as hanging", func() bool { return s.Stats().Hanging == 1 })
		select {
		case err := <-done:
			t.Fatalf("%s answered while hanging (err %v)", r.path, err)
		default:
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("%s: the client's cancellation should end it, got %v", r.path, err)
		}
		testutil.WaitFor(t, r.path+" released", func() bool { return s.Stats().Hanging == 0 })
	}

	// The simulator's own routes answer while it hangs.
	resp, err := http.Get(ts.URL + "/sim/knobs")
	if err != nil {
		t.Fatal(err)
	}
	var k Knobs
	err = json.NewDecoder(resp.Body).Decode(&k)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !k.Hang {
		t.Errorf("GET /sim/knobs: hang %t, want true", k.Hang)
	}

	// Off again: the next request is answered.
	resp, err = http.Post(ts.URL+"/sim/knobs", "application/json", strings.NewReader(`{"hang": false}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s.Knobs().Hang {
		t.Fatal(`POST /sim/knobs {"hang": false} left Hang on`)
	}
	resp, err = http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the hang: status %d, want 200", resp.StatusCode)
	}
}
