package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, body string
		wantErr    string // empty: valid
	}{
		{"valid", "listen: 127.0.0.1:8080\nbackends:\n  - url: http://127.0.0.1:8000\n", ""},
		{"open admin API", "listen: \":8080\"\nbackends:\n  - url: http://127.0.0.1:8000\n", "admin.token: is empty"},
		{"admin.open", "listen: \":8080\"\nadmin:\n  open: true\nbackends:\n  - url: http://127.0.0.1:8000\n", ""},
		{"unknown key", "backends:\n  - url: http://127.0.0.1:8000\n    urll: x\n", "backends[0].urll"},
		{"bad value", "backends:\n  - url: http://127.0.0.1:8000\nlimits:\n  upstream_timeout: 5 minutes\n", "limits.upstream_timeout"},
		{"no backends", "listen: \":9000\"\n", "backends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"check", "--config", write(tt.name+".yaml", tt.body)}, &out, &errOut)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("check failed: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || exitCode(err) == 0 {
				t.Errorf("err = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
	if err := run(context.Background(), []string{"check"}, io.Discard, io.Discard); exitCode(err) != 2 {
		t.Errorf("check without --config: %v (exit %d), want a usage error", err, exitCode(err))
	}
	if err := run(context.Background(), []string{"bogus"}, io.Discard, io.Discard); exitCode(err) != 2 {
		t.Errorf("unknown command: %v", err)
	}
}

// TestDemo runs the demo end to end: it must print its URL, serve a chat
// completion through the gateway and stop cleanly when its context ends.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--rps", "20"}, pw, io.Discard)
		pw.Close()
	}()
	urlRE := regexp.MustCompile(`gateway\s+(http://\S+)`)
	var base string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if m := urlRE.FindStringSubmatch(sc.Text()); m != nil {
			base = m[1]
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if base == "" {
		t.Fatal("demo printed no gateway URL")
	}
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo-model","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Vigil-Backend") == "" {
		t.Errorf("chat through the demo: %d, backend %q", resp.StatusCode, resp.Header.Get("X-Vigil-Backend"))
	}
	time.Sleep(300 * time.Millisecond) // let demo traffic flow
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo ended with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("demo did not stop")
	}
}
