package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

func TestModelsUnion(t *testing.T) {
	_, a := startSim(t, "alpha", nil)
	_, b := startSim(t, "beta", nil)
	_, c := startSim(t, "alpha", nil) // duplicate of a's model
	gw := startGateway(t, []config.Backend{backend("a", a), backend("b", b), backend("c", c)}, nil)
	code, body := testutil.Get(t, gw.URL+"/v1/models")
	if code != 200 {
		t.Fatalf("status %d: %s", code, body)
	}
	var l struct {
		Object string
		Data   []struct{ ID string }
	}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range l.Data {
		ids = append(ids, m.ID)
	}
	if diff := cmp.Diff([]string{"alpha", "beta"}, ids); l.Object != "list" || diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
}

func TestPassThroughRoutes(t *testing.T) {
	_, tgi := startSim(t, "m1", nil)
	seen := make(chan string, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.URL.RequestURI()
		w.WriteHeader(http.StatusTeapot)
	}))
	defer other.Close()
	gw := startGateway(t, []config.Backend{backend("o", other.URL), tgiBackend("t", tgi)}, nil)

	// /info goes to the TGI backend only.
	code, body := testutil.Get(t, gw.URL+"/info")
	_, want := testutil.Get(t, tgi+"/info")
	if code != 200 || string(body) != string(want) {
		t.Errorf("/info: %d %s, want %s", code, body, want)
	}
	// Any other /v1 route passes through with its query, whatever its
	// method, to the OpenAI-compatible backend.
	resp, err := http.Get(gw.URL + "/v1/files/abc?limit=2")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || resp.Header.Get("X-Vigil-Backend") != "o" {
		t.Fatalf("/v1/files: %d from %q", resp.StatusCode, resp.Header.Get("X-Vigil-Backend"))
	}
	if got := <-seen; got != "GET /v1/files/abc?limit=2" {
		t.Errorf("upstream saw %q", got)
	}
	// So does a path outside /v1, to a backend of any kind: the
	// simulator's own 404 passes through, or "o"'s answer.
	for range 10 {
		resp, err := http.Get(gw.URL + "/nope")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch b := resp.Header.Get("X-Vigil-Backend"); {
		case b == "o" && resp.StatusCode == http.StatusTeapot:
			<-seen
		case b == "t" && resp.StatusCode == http.StatusNotFound:
		default:
			t.Fatalf("/nope: %d from %q", resp.StatusCode, b)
		}
	}
}

// TestAdminRoutes runs the gateway with the real analyzers behind its
// admin routes, as the binary wires them.
func TestAdminRoutes(t *testing.T) {
	_, a := startSim(t, "m1", nil)
	p, err := analyzers.New(analyzers.Options{Config: config.Default().Analyzers, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	gw := startGateway(t, []config.Backend{backend("a", a, "m1")}, func(c *config.Config) { c.Admin.Token = "s3cret" },
		func(o *Options) {
			o.Observer, o.Signals, o.Alerts, o.Notifications, o.Baseline, o.Feedback = p, p, p, p, p, p
		})
	post(t, gw.URL+"/v1/embeddings", `{"model":"m1","input":"x"}`)
	waitFor(t, "the prompt to reach the drift window", func() bool { return p.Evaluate().Window.Requests == 1 })

	for _, path := range []string{"/admin/backends", "/admin/signals", "/admin/alerts", "/admin/notifications", "/admin/prefix_cache"} {
		if code, _ := testutil.Get(t, gw.URL+path); code != 401 {
			t.Errorf("%s without token: %d, want 401", path, code)
		}
		if code, _ := testutil.Get(t, gw.URL+path, "Authorization", "Bearer wrong"); code != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, code)
		}
	}
	auth := []string{"Authorization", "Bearer s3cret"}
	code, body := testutil.Get(t, gw.URL+"/admin/backends", auth...)
	var backends []map[string]any
	if code != 200 || json.Unmarshal(body, &backends) != nil || len(backends) != 1 {
		t.Fatalf("/admin/backends: %d %s", code, body)
	}
	for _, k := range []string{"name", "url", "healthy", "weight", "inflight", "load"} {
		if _, ok := backends[0][k]; !ok {
			t.Errorf("/admin/backends lacks %q: %s", k, body)
		}
	}
	code, body = testutil.Get(t, gw.URL+"/admin/signals", auth...)
	var sig struct {
		Window struct{ Requests int }
		Drift  struct{ State string }
	}
	if code != 200 || json.Unmarshal(body, &sig) != nil || sig.Window.Requests != 1 || sig.Drift.State != "unknown" {
		t.Errorf("/admin/signals: %d %s", code, body)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(body, &all); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"window", "evaluated", "drift", "confidence", "latency", "output", "precision"} {
		if _, ok := all[k]; !ok {
			t.Errorf("/admin/signals lacks %q: %s", k, body)
		}
	}
	// No backend has a reference: precision is disabled and says so.
	if got := string(all["precision"]); got != `{"state":"unknown"}` {
		t.Errorf("/admin/signals precision = %s, want {\"state\":\"unknown\"}", got)
	}
	for _, path := range []string{"/admin/alerts", "/admin/notifications"} {
		if code, body := testutil.Get(t, gw.URL+path, auth...); code != 200 || strings.TrimSpace(string(body)) != "[]" {
			t.Errorf("%s: %d %s", path, code, body)
		}
	}
	if code, _ := testutil.Get(t, gw.URL+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := testutil.Get(t, gw.URL+"/dashboard"); code != 200 || !strings.Contains(string(body), "<title>Vigil</title>") {
		t.Errorf("/dashboard: %d", code)
	}
	code, body = testutil.Get(t, gw.URL+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, m := range []string{"vigil_requests_total", "gen_ai_server_request_duration_seconds", "vigil_backend_healthy", "vigil_observer_dropped_events_total", "go_goroutines"} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if code, _, body := post(t, gw.URL+"/v1/feedback", `{"id":"x"}`); code != 400 {
		t.Errorf("/v1/feedback without correct: %d %s", code, body)
	}
}

func TestModelLabelsBounded(t *testing.T) {
	var l modelLabels
	for i := range 200 {
		l.label(strings.Repeat("m", i+1))
	}
	if got := l.label("brand-new"); got != "other" {
		t.Errorf("label after %d models = %q, want other", maxModelLabels, got)
	}
	if got := l.label("m"); got != "m" {
		t.Errorf("an admitted model lost its label: %q", got)
	}
}
