// Package toxitest runs a real Toxiproxy (v2.5.0) for fault-injection
// tests and drives it through its REST API: proxies between Vigil and its
// peers (Redis, the OTLP collector, Alertmanager, backends) and the toxics
// that make them slow, lossy or silent.
//
// The binary is found at $VIGIL_TOXIPROXY_BIN, which ./test/run sets after
// building the server from the test/tools module into a cache
// (test/toolbin toxiproxy). Without the variable, Start skips the test. The
// API is spoken over net/http, so that Toxiproxy's client library stays
// out of the main go.mod.
//
//	tp := toxitest.Start(t)
//	px := tp.Proxy(t, "redis", redis.Addr) // point Vigil at px.Addr()
//	px.AddToxic(t, toxitest.Latency("slow", 500*time.Millisecond))
//	px.RemoveToxic(t, "slow")
package toxitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
)

// EnvBin names the environment variable that holds the binary's path.
const EnvBin = "VIGIL_TOXIPROXY_BIN"

// Toxiproxy is a running Toxiproxy server owned by one test. Its methods
// are safe for concurrent use.
type Toxiproxy struct {
	api string // base URL of the REST API
}

// startAttempts bounds retries when another process takes the API port
// between choosing it and Toxiproxy binding it.
const startAttempts = 3

// Start runs Toxiproxy with its API on a free port of 127.0.0.1 and waits
// until it answers; it stops at the end of the test. It skips the test
// when $VIGIL_TOXIPROXY_BIN is unset and fails it when the file is missing.
func Start(t testing.TB) *Toxiproxy {
	t.Helper()
	bin := proctest.Binary(t, EnvBin, "Toxiproxy")
	return proctest.Start(t, startAttempts, func() (*Toxiproxy, error) { return start(t, bin) })
}

func start(t testing.TB, bin string) (*Toxiproxy, error) {
	ports, err := proctest.FreePorts(1)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(ports[0])
	if err != nil {
		return nil, err
	}
	tp := &Toxiproxy{api: "http://" + ports[0]}
	err = proctest.Run(t, proctest.Service{
		Name: "toxiproxy",
		Path: bin,
		Args: []string{"-host", host, "-port", port},
		// Toxiproxy logs every connection at info; warnings are what a
		// failed test needs.
		Env:   append(os.Environ(), "LOG_LEVEL=warn"),
		Ready: func() bool { return proctest.HTTPOK(tp.api + "/version") },
		// It keeps nothing: SIGTERM exits at once.
		StopGrace: time.Second,
	})
	if err != nil {
		return nil, err
	}
	return tp, nil
}

// URL returns the base URL of the REST API, e.g. http://127.0.0.1:41234.
func (tp *Toxiproxy) URL() string { return tp.api }

// A Proxy forwards the TCP connections made to its listen address to its
// upstream, through its toxics. Its methods are safe for concurrent use.
type Proxy struct {
	tp   *Toxiproxy
	name string
	addr string // host:port it listens on
}

// proxyJSON is a proxy as the API takes and returns it.
type proxyJSON struct {
	Name     string `json:"name"`
	Listen   string `json:"listen"`
	Upstream string `json:"upstream"`
	Enabled  bool   `json:"enabled"`
}

// Proxy creates a proxy named name that listens on a free port of
// 127.0.0.1 (Toxiproxy binds port 0 and reports the port it got) and
// forwards to upstream, a host:port. It fails the test on error.
func (tp *Toxiproxy) Proxy(t testing.TB, name, upstream string) *Proxy {
	t.Helper()
	var out proxyJSON
	tp.call(t, http.MethodPost, "/proxies", proxyJSON{Name: name, Listen: "127.0.0.1:0", Upstream: upstream, Enabled: true}, &out)
	if out.Listen == "" {
		t.Fatalf("toxitest: proxy %s: no listen address in the answer", name)
	}
	return &Proxy{tp: tp, name: name, addr: out.Listen}
}

// Name returns the proxy's name.
func (p *Proxy) Name() string { return p.name }

// Addr returns the host:port the proxy listens on: the address to give the
// client in place of the upstream's.
func (p *Proxy) Addr() string { return p.addr }

// SetUpstream points the proxy at another host:port. Toxiproxy restarts
// the proxy on the same listen address; open connections are closed.
func (p *Proxy) SetUpstream(t testing.TB, upstream string) {
	t.Helper()
	p.tp.call(t, http.MethodPost, "/proxies/"+p.name, map[string]string{"upstream": upstream}, nil)
}

// Toxic is one toxic as the API takes it. See Toxiproxy's README for the
// types and their attributes.
type Toxic struct {
	Name string `json:"name"`
	// Type is latency, bandwidth, slow_close, timeout, reset_peer, slicer
	// or limit_data.
	Type string `json:"type"`
	// Stream is the direction it acts on: "upstream" (client to server)
	// or "downstream" (server to client). Empty: downstream.
	Stream string `json:"stream,omitempty"`
	// Toxicity is the probability that the toxic applies to a connection,
	// drawn for each connection when it opens and when the toxic is added
	// or updated. Zero: 1, every connection.
	Toxicity float64 `json:"toxicity,omitempty"`
	// Attributes are the type's parameters, e.g. {"latency": 500}
	// (milliseconds) for latency.
	Attributes map[string]any `json:"attributes"`
}

// Latency delays the data coming back from the server by d.
func Latency(name string, d time.Duration) Toxic {
	return Toxic{Name: name, Type: "latency", Stream: "downstream", Attributes: map[string]any{"latency": d.Milliseconds()}}
}

// Blackhole swallows all data flowing in stream ("upstream" or
// "downstream") and keeps the connection open: a peer that accepts and
// never answers (Toxiproxy's timeout toxic with timeout 0). Removing it
// closes the connections it held.
func Blackhole(name, stream string) Toxic {
	return Toxic{Name: name, Type: "timeout", Stream: stream, Attributes: map[string]any{"timeout": 0}}
}

// AddToxic adds a toxic to the proxy; it acts on open connections too. It
// fails the test on error.
func (p *Proxy) AddToxic(t testing.TB, x Toxic) {
	t.Helper()
	if x.Attributes == nil {
		x.Attributes = map[string]any{}
	}
	p.tp.call(t, http.MethodPost, "/proxies/"+p.name+"/toxics", x, nil)
}

// UpdateToxic changes a toxic's toxicity and attributes (nil: unchanged).
// Toxiproxy draws the toxicity again for every open connection, so that
// updating a toxic to the same values draws anew which connections it
// acts on. It returns the error rather than failing the test, so that a
// goroutine of the test may call it.
func (p *Proxy) UpdateToxic(name string, toxicity float64, attrs map[string]any) error {
	body := map[string]any{"toxicity": toxicity}
	if attrs != nil {
		body["attributes"] = attrs
	}
	return p.tp.do(http.MethodPost, "/proxies/"+p.name+"/toxics/"+name, body, nil)
}

// RemoveToxic removes the toxic named name. It fails the test on error.
func (p *Proxy) RemoveToxic(t testing.TB, name string) {
	t.Helper()
	p.tp.call(t, http.MethodDelete, "/proxies/"+p.name+"/toxics/"+name, nil, nil)
}

// call sends one API request with in as its JSON body (nil: none) and
// decodes a JSON answer into out (nil: discarded). It fails the test
// unless the answer is 2xx.
func (tp *Toxiproxy) call(t testing.TB, method, path string, in, out any) {
	t.Helper()
	if err := tp.do(method, path, in, out); err != nil {
		t.Fatalf("toxitest: %v", err)
	}
}

func (tp *Toxiproxy) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, tp.api+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decode: %w", method, path, err)
		}
	}
	return nil
}
