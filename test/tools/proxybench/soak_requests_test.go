package main

import (
	"encoding/json"
	"net"
	"os"
	"testing"
)

// TestBackendConns counts this process's own connections: those it dialed
// to the listed address, not those it accepted there, nor those to an
// address not listed.
func TestBackendConns(t *testing.T) {
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		return ln
	}
	dial := func(ln net.Listener, n int) []net.Conn {
		var out []net.Conn
		for range n {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			out = append(out, c)
		}
		return out
	}
	backend, other := listen(), listen()
	conns := dial(backend, 3)
	dial(other, 2)
	count := func() int {
		t.Helper()
		n, err := backendConns(os.Getpid(), []string{backend.Addr().String()})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 3 {
		t.Fatalf("backendConns = %d with 3 connections dialed to the backend, want 3", n)
	}
	conns[0].Close()
	if n := count(); n != 2 {
		t.Fatalf("backendConns = %d after closing one of 3, want 2", n)
	}
}

// TestSoakBodies checks that each request of the soak by count is JSON
// asking for what its kind says, and that the kinds take turns.
func TestSoakBodies(t *testing.T) {
	if len(soakBodies) != 32 {
		t.Fatalf("%d bodies, want 32 (4 kinds × 8 prompts)", len(soakBodies))
	}
	kinds := map[string]int{}
	for i, b := range soakBodies {
		var req struct {
			Model       string `json:"model"`
			Stream      bool   `json:"stream"`
			Logprobs    bool   `json:"logprobs"`
			TopLogprobs int    `json:"top_logprobs"`
			MaxTokens   int    `json:"max_tokens"`
		}
		if err := json.Unmarshal(b.json, &req); err != nil {
			t.Fatalf("body %d (%s): %v\n%s", i, b.kind, err, b.json)
		}
		if req.Model != mockModel || req.Stream != b.stream || req.Logprobs != b.lprobs || (req.TopLogprobs > 0) != b.lprobs || req.MaxTokens < 1 {
			t.Errorf("body %d (%s) asks %+v", i, b.kind, req)
		}
		if want := soakBodies[i%4].kind; b.kind != want {
			t.Errorf("body %d is %s, want %s: the kinds take turns", i, b.kind, want)
		}
		kinds[b.kind]++
	}
	for k, n := range kinds {
		if n != 8 {
			t.Errorf("%d bodies of kind %s, want 8", n, k)
		}
	}
}
