package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
)

// Network is an in-memory network of HTTP servers for tests that run in a
// testing/synctest bubble: its connections are net.Pipe pairs, so that a
// goroutine waiting on one is durably blocked and the bubble's clock can
// move (a real socket would block the bubble). Servers listen on made-up
// loopback addresses (127.0.0.1, ports from 10000), which only this
// Network's Dial reaches. The zero value is ready to use.
type Network struct {
	mu        sync.Mutex
	listeners map[string]*memListener
	next      int
}

// Listen returns a listener on a fresh address of n.
func (n *Network) Listen() net.Listener {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listeners == nil {
		n.listeners = map[string]*memListener{}
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10000 + n.next}
	n.next++
	l := &memListener{net: n, addr: addr, conns: make(chan net.Conn, 128), closed: make(chan struct{})}
	n.listeners[addr.String()] = l
	return l
}

// DialContext connects to the listener of n at addr, as net.Dialer's
// DialContext does; an address nobody listens on is refused.
func (n *Network) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	refused := &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
	if l == nil {
		return nil, refused
	}
	client, server := net.Pipe()
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000 + n.nextPort()}
	select {
	case l.conns <- &memConn{Conn: server, local: l.addr, remote: local}:
		return &memConn{Conn: client, local: local, remote: l.addr}, nil
	case <-l.closed:
		return nil, refused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *Network) nextPort() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	return n.next
}

// Transport returns an HTTP transport that dials through n.
func (n *Network) Transport() *http.Transport {
	return &http.Transport{DialContext: n.DialContext, MaxIdleConnsPerHost: 64, DisableCompression: true}
}

// Client returns an HTTP client that dials through n.
func (n *Network) Client() *http.Client {
	return &http.Client{Transport: n.Transport()}
}

// Serve serves h on a fresh address of n until the test ends, and returns
// its base URL (http://127.0.0.1:port).
func (n *Network) Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	return "http://" + n.ServeServer(t, &http.Server{Handler: h}, nil)
}

// ServeServer serves srv on a fresh address of n until the test ends, and
// returns that address (127.0.0.1:port): for a test of the server's own
// settings (its timeouts, its ConnContext). wrap, when not nil, wraps the
// listener first, as a production listener wrapper would.
func (n *Network) ServeServer(t testing.TB, srv *http.Server, wrap func(net.Listener) net.Listener) string {
	t.Helper()
	l := n.Listen()
	addr := l.Addr().String()
	if wrap != nil {
		l = wrap(l)
	}
	// Close does not wait for the connections' goroutines, and a bubble
	// must not end with one left: count them out.
	var conns sync.WaitGroup
	inner := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			conns.Done()
		}
		if inner != nil {
			inner(c, st)
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		<-done
		conns.Wait()
	})
	return addr
}

type memListener struct {
	net       *Network
	addr      net.Addr
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, fmt.Errorf("accept on %v: %w", l.addr, net.ErrClosed)
	}
}

func (l *memListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.closed)
		l.net.mu.Lock()
		delete(l.net.listeners, l.addr.String())
		l.net.mu.Unlock()
		for { // refuse what waits in the backlog
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

func (l *memListener) Addr() net.Addr { return l.addr }

// memConn is a pipe end with loopback TCP addresses, as a server checking
// where a request comes from expects.
type memConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *memConn) LocalAddr() net.Addr  { return c.local }
func (c *memConn) RemoteAddr() net.Addr { return c.remote }
