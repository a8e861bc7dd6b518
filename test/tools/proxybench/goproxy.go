package main

import (
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
)

// The go-proxy target is the Go standard library's reverse proxy with
// nothing else: httputil.ReverseProxy over an http.Transport tuned as
// Vigil's (256 idle connections per host, no compression), FlushInterval
// -1 so that SSE passes event by event. Vigil is built on the same
// net/http server and client, so this is the ceiling of what Vigil can
// reach without replacing them: measured in the same run, it tells how
// much of the gap to nginx is Vigil's and how much is net/http's.

// runGoProxy serves `proxybench goproxy -listen ADDR -backend URL` until
// SIGTERM or SIGINT.
func runGoProxy(args []string) error {
	listen, u, err := proxyFlags("goproxy", args)
	if err != nil {
		return err
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.DisableCompression = true
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     t,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	return serveUntilSignal(ln, rp)
}

// proxyFlags parses the reference proxies' `-listen ADDR -backend URL`.
func proxyFlags(name string, args []string) (listen string, backend *url.URL, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	l := fs.String("listen", "127.0.0.1:0", "listen `address`")
	b := fs.String("backend", "", "backend base `URL` (http://host:port)")
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(*b)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return "", nil, errors.New(name + ": -backend: want http://host:port")
	}
	return *l, u, nil
}
