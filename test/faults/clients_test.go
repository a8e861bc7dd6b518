package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestIdleKeepAlives opens 10,000 keep-alive connections to a `vigil
// serve` process, each after one request, and leaves them idle (issue
// 18: clients that misbehave). They are all served; what each costs the
// gateway (RSS, goroutines, open files from its /metrics) is logged; after
// limits.idle_timeout the gateway has closed every one, its goroutines and
// files are back to where they were, and it serves the next client.
func TestIdleKeepAlives(t *testing.T) {
	const n = 10_000
	sim := startSim(t)
	g := startVigil(t, "idle", baseConfig(backendYAML("a", sim.URL))+"limits: {idle_timeout: 15s, max_connections: 12000}\n")
	addr := strings.TrimPrefix(g.URL, "http://")
	before := processStats(t, g)

	conns := make([]net.Conn, n)
	var mu sync.Mutex
	var failed []error
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				c, err := openKeepAlive(addr)
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		})
	}
	wg.Wait()
	opened := time.Since(start)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	if len(failed) > 0 {
		t.Fatalf("%d of %d keep-alive connections not served; first: %v", len(failed), n, failed[0])
	}
	held := processStats(t, g)
	t.Logf("%d idle keep-alive connections opened in %v: RSS %.1f → %.1f MiB (%.1f KiB each), goroutines %d → %d, open files %d → %d",
		n, opened.Round(time.Millisecond), before.rss/(1<<20), held.rss/(1<<20), (held.rss-before.rss)/1024/n,
		before.goroutines, held.goroutines, before.fds, held.fds)
	if held.fds < before.fds+n {
		t.Errorf("the gateway holds %d open files with %d connections idle, want at least %d", held.fds, n, before.fds+n)
	}

	// After idle_timeout (15 s) the gateway closes them all.
	deadline := time.Now().Add(60 * time.Second)
	var after stats
	for {
		after = processStats(t, g)
		if after.fds <= before.fds+5 && after.goroutines <= before.goroutines+5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the connections went idle: goroutines %d (before %d), open files %d (before %d)",
				after.goroutines, before.goroutines, after.fds, before.fds)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after idle_timeout: goroutines %d, open files %d, RSS %.1f MiB", after.goroutines, after.fds, after.rss/(1<<20))
	c, err := openKeepAlive(addr)
	if err != nil {
		t.Fatalf("the next client after the idle connections: %v", err)
	}
	c.Close()
}

// openKeepAlive connects to addr, sends GET /healthz and reads the answer,
// leaving the connection open.
func openKeepAlive(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: vigil\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		c.Close()
		return nil, fmt.Errorf("GET /healthz: %s, close %v", resp.Status, resp.Close)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

type stats struct {
	rss             float64
	goroutines, fds int
}

// processStats reads the gateway's process figures from its /metrics.
func processStats(t *testing.T, g *gateway) stats {
	t.Helper()
	var s stats
	for line := range bytes.Lines(g.get(t, "/metrics")) {
		f := strings.Fields(string(line))
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "process_resident_memory_bytes":
			s.rss = v
		case "go_goroutines":
			s.goroutines = int(v)
		case "process_open_fds":
			s.fds = int(v)
		}
	}
	if s.rss == 0 || s.goroutines == 0 || s.fds == 0 {
		t.Fatalf("%s /metrics lacks process_resident_memory_bytes, go_goroutines or process_open_fds", g.name)
	}
	return s
}
