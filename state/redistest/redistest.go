// Package redistest starts real redis-server processes for tests.
package redistest

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
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

// StartCluster runs a three-master Redis Cluster (no replicas) on free
// ports, created with redis-cli --cluster create, and returns its URL in
// OpenRedis's cluster form.
func StartCluster(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli not installed: ./test/run installs it (Debian package redis-server)")
	}
	dir := t.TempDir()
	var addrs []string
	for range 3 {
		port := freeClusterPort(t)
		s := &Server{port: port, Addr: "127.0.0.1:" + strconv.Itoa(port)}
		s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
			"--cluster-enabled", "yes", "--cluster-config-file", fmt.Sprintf("%s/nodes-%d.conf", dir, port),
			"--dir", dir)
		if err := s.cmd.Start(); err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		t.Cleanup(s.Stop)
		waitPort(t, s.Addr)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must say so: one that has not heard the others' slots
	// yet answers CLUSTERDOWN for the keys it serves.
	deadline := time.Now().Add(10 * time.Second)
	for _, addr := range addrs {
		for {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", addr[len("127.0.0.1:"):], "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok: %s", addr, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return "redis://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2]
}

// freeClusterPort finds a port whose cluster bus port (+10000) is free too.
func freeClusterPort(t testing.TB) int {
	for range 100 {
		p := freePort(t)
		if p+10000 > 65535 {
			continue
		}
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000)); err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

func waitPort(t testing.TB, addr string) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not start: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
