// Package alertmanagertest runs a real Prometheus Alertmanager for
// end-to-end tests and reads its alerts back through the v2 API.
//
// The binary is found at $VIGIL_ALERTMANAGER_BIN, which ./test/run sets
// after building Alertmanager v0.35.0 into a cache (see
// ../../../shared/environment.md for why a plain go install fails).
// Without the variable, Start skips the test.
//
//	am := alertmanagertest.Start(t)
//	// POST alerts to am.URL() + "/api/v2/alerts"
//	alerts := am.Alerts(t)
package alertmanagertest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
)

// EnvBin names the environment variable that holds the binary's path.
const EnvBin = "VIGIL_ALERTMANAGER_BIN"

// Alertmanager is a running Alertmanager owned by one test. Its methods
// are safe for concurrent use.
type Alertmanager struct {
	url string
}

// config routes every alert to a receiver without integrations: the
// alerts are kept and served by the API, and sent nowhere.
const config = `route:
  receiver: "null"
  group_wait: 1s
receivers:
  - name: "null"
`

// startAttempts bounds retries when another process takes the port between
// choosing it and Alertmanager binding it.
const startAttempts = 3

// Start runs Alertmanager on a free port of 127.0.0.1, clustering off,
// storage in a temporary directory, and waits until it is ready; it stops
// at the end of the test. It skips the test when $VIGIL_ALERTMANAGER_BIN
// is unset and fails it when the file is missing.
func Start(t testing.TB) *Alertmanager {
	t.Helper()
	bin := proctest.Binary(t, EnvBin, "Alertmanager")
	return proctest.Start(t, startAttempts, func() (*Alertmanager, error) { return start(t, bin) })
}

func start(t testing.TB, bin string) (*Alertmanager, error) {
	ports, err := proctest.FreePorts(1)
	if err != nil {
		return nil, err
	}
	addr := ports[0]
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	a := &Alertmanager{url: "http://" + addr}
	err = proctest.Run(t, proctest.Service{
		Name: "alertmanager",
		Path: bin,
		Args: []string{
			"--config.file=" + cfg,
			"--storage.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + addr,
			"--cluster.listen-address=", // no gossip port: a single instance
			"--log.level=warn",
		},
		Ready: func() bool { return proctest.HTTPOK(a.url + "/-/ready") },
		// Alertmanager sometimes takes seconds to stop after it has
		// received alerts; its state is a temporary directory, so a
		// short grace is enough.
		StopGrace: time.Second,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Alertmanager) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

// URL returns the base URL of the API, e.g. http://127.0.0.1:41234.
func (a *Alertmanager) URL() string { return a.url }

// Alerts returns GET /api/v2/alerts (active, silenced, inhibited and
// unprocessed alerts, as the API's defaults), decoded.
func (a *Alertmanager) Alerts(t testing.TB) []map[string]any {
	t.Helper()
	code, b, err := a.get("/api/v2/alerts")
	if err != nil || code != http.StatusOK {
		t.Fatalf("alertmanagertest: GET /api/v2/alerts: %d %v: %.200s", code, err, b)
	}
	var out []map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("alertmanagertest: GET /api/v2/alerts: %v", err)
	}
	return out
}
