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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
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
	out *logBuffer
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	a := &Alertmanager{url: "http://" + addr, out: &logBuffer{max: 64 << 10}}
	cmd := exec.Command(bin,
		"--config.file="+cfg,
		"--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--cluster.listen-address=", // no gossip port: a single instance
		"--log.level=warn")
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		// Alertmanager sometimes takes seconds to stop after it has
		// received alerts; its state is a temporary directory, so a
		// short grace is enough.
		case <-time.After(time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := a.waitReady(exited, 30*time.Second); err != nil {
		stop()
		return nil, fmt.Errorf("%w\nalertmanager output:\n%s", err, a.out)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("alertmanager output:\n%s", a.out)
		}
	})
	return a, nil
}

func (a *Alertmanager) waitReady(exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New("alertmanager exited before it was ready")
		default:
		}
		if code, _, err := a.get("/-/ready"); err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("alertmanager not ready after %v", timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

// logBuffer keeps the last max bytes of the process's output.
type logBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	if over := l.buf.Len() - l.max; over > 0 {
		l.buf.Next(over)
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
