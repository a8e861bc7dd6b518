package gateway

import (
	"context"
	"log"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// HTTPServer returns the http.Server for the gateway's handler, with the
// client limits of limits.*: the time to send headers (slowloris) and
// their size, the idle keep-alive timeout. The body's time (read_timeout)
// and the write timeout for clients that stop reading (write_timeout) are
// applied per request by the gateway itself, on the connection that
// ConnContext records: http.Server's ReadTimeout and WriteTimeout would
// bound a whole stream, and its ReadTimeout cancels the request's context
// when it passes under a long response.
//
// Serve it with [Server.Serve], which adds TLS when listen_tls is set.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	lim := s.cfg.Limits
	srv := &http.Server{
		Handler:           s.engine,
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnContext:       withConn,
		ErrorLog:          errorLog,
	}
	if s.certs != nil {
		srv.TLSConfig = s.certs.tlsConfig()
	}
	return srv
}

// Serve serves srv, made by HTTPServer, on ln: over TLS (HTTP/2 and
// HTTP/1.1) when listen_tls is set, else plain HTTP/1.1.
func (s *Server) Serve(srv *http.Server, ln net.Listener) error {
	if s.certs != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// Listener bounds ln to limits.max_connections connections open at once
// (further ones wait in the kernel's backlog); ln itself when unbounded.
func (s *Server) Listener(ln net.Listener) net.Listener {
	if n := s.cfg.Limits.MaxConnections; n > 0 {
		return netutil.LimitListener(ln, n)
	}
	return ln
}

// Drain marks the gateway as shutting down: /readyz answers 503 from now
// on, so that load balancers take this replica out of rotation, while
// requests are still served.
func (s *Server) Drain() { s.draining.Store(true) }

// Wait waits until every proxied request has returned, or ctx is done.
// Called after the http.Server shut down, when no request starts anymore.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type connKey struct{}

// withConn records a client connection in its requests' contexts.
func withConn(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// deadliner sets a request's read and write deadlines: its HTTP/1
// connection's, or its HTTP/2 stream's (a connection deadline would cut
// every stream of the connection).
type deadliner interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// clientDeadlines is a call's deadlines on the client's connection:
// where they are set (nil under a server other than HTTPServer's),
// limits.write_timeout and the write deadline set last. serveProxy sets
// it up, preprocess bounds the body's read with it and the tap moves the
// write deadline (extendWrite).
type clientDeadlines struct {
	dl            deadliner
	writeTimeout  time.Duration
	writeDeadline time.Time
}

// deadlinesOf returns where r's deadlines are set; nil when r's server is
// not HTTPServer's (tests' httptest servers).
func deadlinesOf(w http.ResponseWriter, r *http.Request) deadliner {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		return nil
	}
	if r.ProtoMajor == 1 {
		return c
	}
	return http.NewResponseController(w)
}

// extendWrite keeps a write deadline of limits.write_timeout ahead of now
// on the client's connection, moved only once half of it has passed (a
// deadline change costs a timer update), so a write that blocks because
// the client stopped reading fails after between half of write_timeout
// and all of it. The tap calls it with each read from the backend, before
// the proxy writes what it read.
//
// The deadline outlives the handler, so that net/http's last write (a
// chunked stream's end) is bounded too; net/http lifts a connection's
// write deadline once the response is finished, before the next request.
func (d *clientDeadlines) extendWrite(now time.Time) {
	if d.dl == nil || d.writeTimeout <= 0 || d.writeDeadline.Sub(now) > d.writeTimeout/2 {
		return
	}
	d.writeDeadline = now.Add(d.writeTimeout)
	_ = d.dl.SetWriteDeadline(d.writeDeadline)
}
