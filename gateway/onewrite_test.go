package gateway

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// TestUpstreamRequestOneWrite: the gateway sends a request's headers and
// body to the backend in one write, so the backend's first read holds the
// whole request. ReverseProxy's own body wrapper made the transport flush
// the headers first: two writes, two TCP packets, two reads for the
// backend. (A first read that returns early can only make this pass when
// it should fail, never the reverse: one write on loopback arrives whole.)
func TestUpstreamRequestOneWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	body := `{"model":"m1","max_tokens":4,"messages":[{"role":"user","content":"hello"}]}`
	firsts := make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					firsts <- bytes.Clone(buf[:n])
					// The rest of the request, if the first read was short.
					for got := n; !bytes.HasSuffix(buf[:got], []byte(body)); {
						m, err := c.Read(buf[got:])
						if err != nil {
							return
						}
						got += m
					}
					resp := `{"id":"x","object":"chat.completion","choices":[]}`
					c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
						strconv.Itoa(len(resp)) + "\r\n\r\n" + resp))
				}
			}()
		}
	}()
	gw := startGateway(t, []config.Backend{backend("raw", "http://"+ln.Addr().String(), "m1")}, nil)
	for i := range 3 {
		code, _, resp := post(t, gw.URL+"/v1/chat/completions", body)
		if code != 200 {
			t.Fatalf("request %d: %d %s", i, code, resp)
		}
		if first := <-firsts; !strings.Contains(string(first), "\r\n\r\n"+body) {
			t.Errorf("request %d: the backend's first read held %q, want the headers and the body", i, first)
		}
	}
}
