package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// TestReloadQuotas: each SIGHUP rereads the file's quotas and puts them in
// force; a file whose quotas are not valid changes nothing and says why.
func TestReloadQuotas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	got := make(chan config.Quotas)
	hup := make(chan os.Signal)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); reloadQuotas(ctx, hup, path, func(q config.Quotas) { got <- q }, log) }()
	defer func() { cancel(); <-done }()

	write("quotas:\n  enabled: true\n  tenants:\n    team-a: {requests_per_minute: 5}\n")
	hup <- syscall.SIGHUP
	if q := <-got; !q.Enabled || q.Tenants["team-a"].RequestsPerMinute != 5 {
		t.Fatalf("first reload: %+v", q)
	}
	write("quotas:\n  enabled: true\n  tenants:\n    team-a: {requests_per_minute: -1}\n")
	hup <- syscall.SIGHUP
	// The reload reads the file after the signal: the next write waits
	// for its verdict.
	for !logged(&mu, &logs, "quotas unchanged") {
		select {
		case q := <-got:
			t.Fatalf("an invalid file was put in force: %+v", q)
		case <-time.After(time.Millisecond):
		}
	}
	write("quotas:\n  enabled: true\n  tenants:\n    team-a: {requests_per_minute: 7}\n")
	hup <- syscall.SIGHUP
	if q := <-got; q.Tenants["team-a"].RequestsPerMinute != 7 {
		t.Fatalf("after an invalid file, then a valid one: %+v, want the valid one's", q)
	}
	if !logged(&mu, &logs, "requests_per_minute: must be >= 0") {
		t.Errorf("the log does not say why the invalid file changed nothing:\n%s", logs.String())
	}
}

func logged(mu *sync.Mutex, logs *bytes.Buffer, s string) bool {
	mu.Lock()
	defer mu.Unlock()
	return strings.Contains(logs.String(), s)
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
