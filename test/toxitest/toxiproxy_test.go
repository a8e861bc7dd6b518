package toxitest_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestToxics: a proxy in front of an HTTP server passes requests through;
// a latency toxic delays them, a blackhole makes them time out, and
// removing each brings the proxy back to normal.
func TestToxics(t *testing.T) {
	tp := toxitest.Start(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	px := tp.Proxy(t, "web", srv.Listener.Addr().String())

	get := func(timeout time.Duration) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+px.Addr()+"/", nil)
		// A new connection each time, so that no toxic-free connection of
		// an earlier request is reused.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			return time.Since(start), err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "ok" {
			t.Errorf("body %q through the proxy", b)
		}
		return time.Since(start), err
	}

	if _, err := get(5 * time.Second); err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	px.AddToxic(t, toxitest.Latency("slow", 300*time.Millisecond))
	if d, err := get(5 * time.Second); err != nil || d < 300*time.Millisecond {
		t.Errorf("with 300 ms latency: %v after %v", err, d)
	}
	px.RemoveToxic(t, "slow")

	px.AddToxic(t, toxitest.Blackhole("hole", "downstream"))
	if d, err := get(500 * time.Millisecond); err == nil {
		t.Errorf("a blackholed proxy answered after %v", d)
	}
	if err := px.UpdateToxic("hole", 0, nil); err != nil { // toxicity 0: no connection
		t.Fatal(err)
	}
	if _, err := get(5 * time.Second); err != nil {
		t.Errorf("with the blackhole's toxicity at 0: %v", err)
	}
	px.RemoveToxic(t, "hole")
	if _, err := get(5 * time.Second); err != nil {
		t.Errorf("after removing the toxics: %v", err)
	}
}
