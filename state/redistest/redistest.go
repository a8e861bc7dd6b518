// Package redistest starts real redis-server processes for tests.
package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// Server is a redis-server started for one test.
type Server struct {
	Addr string
	cmd  *exec.Cmd
	port int
}

// Start runs redis-server on a free port without persistence and stops it
// when the test ends. Without redis-server on PATH the test is skipped:
// ./test/run installs it (Debian package redis-server).
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed: ./test/run installs it (Debian package redis-server)")
	}
	s := &Server{port: freePort(t)}
	s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

func (s *Server) start(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (its data is lost: it keeps nothing on disk).
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
		s.cmd = nil
	}
}

// Restart starts a new, empty server on the same port.
func (s *Server) Restart(t testing.TB) {
	s.Stop()
	s.start(t)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(fmt.Errorf("free port: %w", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
