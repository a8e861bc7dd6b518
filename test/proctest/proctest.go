// Package proctest runs the real services end-to-end tests need (Jaeger,
// Alertmanager) from binaries that ./test/run builds: it finds the binary,
// picks free ports, starts the process, waits until it serves, keeps the
// tail of its output for failure messages and stops it when the test ends.
package proctest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Binary returns the path in the environment variable env. It skips the
// test when env is unset, saying that ./test/run builds what, and fails it
// when the file is missing.
func Binary(t testing.TB, env, what string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		t.Skip(env + " unset: run ./test/run, which builds " + what)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return bin
}

// Start calls start until it succeeds, at most attempts times (another
// process may take a chosen free port before the service binds it), and
// fails the test with the last error.
func Start[T any](t testing.TB, attempts int, start func() (T, error)) T {
	t.Helper()
	var err error
	for range attempts {
		var v T
		if v, err = start(); err == nil {
			return v
		}
	}
	t.Fatal(err)
	var zero T
	return zero
}

// FreePorts returns n distinct free 127.0.0.1 host:port pairs. They are
// free when returned, not reserved: run the service under Start, which
// retries when it loses a port to another process.
func FreePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l) // held until all are chosen, so that they differ
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// Service says how Run starts a program and when it serves. Name, Path and
// Ready are required; the zero value of every other field picks the default
// its comment names.
type Service struct {
	// Name names the program in errors and logs, e.g. "jaeger".
	Name string
	// Path and Args are the binary and its arguments, as for exec.Command.
	Path string
	Args []string
	// Env is the program's environment; nil means the test's own.
	Env []string
	// Ready reports whether the program serves. Run polls it every 50 ms,
	// so each call should give up within about a second.
	Ready func() bool
	// ReadyTimeout bounds the wait for Ready; zero means 30 s.
	ReadyTimeout time.Duration
	// StopGrace is how long the program may take to exit after SIGTERM
	// before it is killed; zero means 5 s.
	StopGrace time.Duration
}

// logMax is how much of a program's output Run keeps: the last 64 KiB,
// where a crash or a failed start leaves its reason.
const logMax = 64 << 10

// Run starts s and waits until s.Ready reports true. It stops the program
// at the end of the test and logs its output if the test failed. When the
// program exits first or is not ready in time, Run stops it and returns an
// error that holds its output; call Run under Start to retry.
func Run(t testing.TB, s Service) error {
	t.Helper()
	out := &logBuffer{max: logMax}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = s.Env
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.Path, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	grace := cmp.Or(s.StopGrace, 5*time.Second)
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	if err := waitReady(s, exited); err != nil {
		stop()
		return fmt.Errorf("%w\n%s output:\n%s", err, s.Name, out)
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s output:\n%s", s.Name, out)
		}
	})
	return nil
}

func waitReady(s Service, exited <-chan struct{}) error {
	timeout := cmp.Or(s.ReadyTimeout, 30*time.Second)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-exited:
			return errors.New(s.Name + " exited before it was ready")
		default:
		}
		if s.Ready() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v", s.Name, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// HTTPOK reports whether GET url answers 200 OK within a second; a
// building block for Service.Ready.
func HTTPOK(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// logBuffer keeps the last max bytes written to it. It is safe for
// concurrent use: exec copies the program's output from its own goroutine
// while the test reads it.
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

// WithoutOTEL returns env without its OTEL_* variables: they are meant for
// the Vigil under test and would configure a child's own telemetry (or
// point a Vigil at a collector it should not use).
func WithoutOTEL(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "OTEL_") {
			out = append(out, kv)
		}
	}
	return out
}

// BuildVigil builds the vigil command into a new temporary folder, without
// the race detector (the processes under test are the product as
// shipped), and returns the binary's path and a func that removes the
// folder. The go command's output goes to stderr.
func BuildVigil() (bin string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "vigil-bin-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "vigil")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/vigil-gw/vigil/cmd/vigil")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building vigil: %w", err)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}
