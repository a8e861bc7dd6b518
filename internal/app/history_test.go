package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestSignalsOnRead: /admin/signals reflects traffic whatever
// analyzers.interval is (an hour here, so that no evaluation on the
// interval comes during the test, however slow the machine): it evaluates
// on read.
func TestSignalsOnRead(t *testing.T) {
	cfg := testConfig(simBackend(t, nil))
	cfg.Analyzers.Interval = time.Hour
	_, url, _ := serveApp(t, cfg)
	read := func() (n int64) {
		var s struct {
			Latency struct {
				Metrics map[string]struct{ Count int64 }
			}
		}
		getJSON(t, url+"/admin/signals", &s)
		return s.Latency.Metrics["e2e"].Count
	}
	before := read()
	for range 5 {
		testutil.Post(t, url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}
	// The analyzers take the responses in asynchronously: wait for them.
	testutil.WaitFor(t, fmt.Sprintf("/admin/signals to count 5 responses more than %d", before),
		func() bool { return read() >= before+5 })
}

// TestHistoryEndpoint: GET /admin/history lists the evaluations with the
// backends as the gateway saw them; bad parameters are 400s naming them.
func TestHistoryEndpoint(t *testing.T) {
	cfg := testConfig(simBackend(t, nil))
	cfg.Analyzers.Interval = 200 * time.Millisecond
	_, url, _ := serveApp(t, cfg)
	for range 5 {
		testutil.Post(t, url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	}
	var h struct {
		Resolution string
		Points     []struct {
			T       time.Time
			Latency *struct {
				E2EP95 *float64 `json:"e2e_p95"`
			}
			Backends []struct {
				Name    string
				Healthy bool
				Weight  float64
			}
		}
	}
	// Three evaluations, counted as the history's points, however long a
	// busy machine takes to make them.
	testutil.WaitFor(t, "three evaluations in the history, the last with the latency", func() bool {
		getJSON(t, url+"/admin/history?since=1m", &h)
		n := len(h.Points)
		return n >= 3 && h.Points[n-1].Latency != nil && h.Points[n-1].Latency.E2EP95 != nil
	})
	last := h.Points[len(h.Points)-1]
	if h.Resolution != "200ms" || len(last.Backends) != 1 || last.Backends[0].Name != "a" || !last.Backends[0].Healthy || last.Backends[0].Weight <= 0 {
		t.Errorf("resolution %q, last point's backends %+v", h.Resolution, last.Backends)
	}
	for _, q := range []string{"since=yesterday", "step=-1s", "step=often"} {
		resp, err := http.Get(url + "/admin/history?" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if name := strings.SplitN(q, "=", 2)[0]; resp.StatusCode != 400 || !strings.Contains(string(b), name+":") {
			t.Errorf("?%s: %d %s, want a 400 naming %s", q, resp.StatusCode, b, name)
		}
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}
