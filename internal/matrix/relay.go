package matrix

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
)

// relay is a TCP relay in front of a service (Redis, the trace
// collector) that the matrix scenario can cut, as a network partition
// would: Cut closes its listener and every connection through it, so that
// new dials are refused and open ones break; Restore listens again on the
// same address. Its methods are safe for concurrent use; Close ends it for
// good and waits for its goroutines.
type relay struct {
	target string // where connections go
	addr   string // where the relay listens, fixed at newRelay

	mu     sync.Mutex
	ln     net.Listener // nil while cut
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loops and the copying goroutines
}

// newRelay listens on a free port of 127.0.0.1 and relays every
// connection to target.
func newRelay(target string) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &relay{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	r.mu.Lock()
	r.start(ln)
	r.mu.Unlock()
	return r, nil
}

// Addr is the relay's address, the same across cuts.
func (r *relay) Addr() string { return r.addr }

// start serves ln; r.mu is held.
func (r *relay) start(ln net.Listener) {
	r.ln = ln
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // cut or closed
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.pipe(c)
			}()
		}
	}()
}

// pipe relays c to the target until either side ends or the relay is cut.
func (r *relay) pipe(c net.Conn) {
	var d net.Dialer
	up, err := d.DialContext(context.Background(), "tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	if !r.track(c, up) {
		c.Close()
		up.Close()
		return
	}
	defer r.untrack(c, up)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		io.Copy(dst, src)
		// One direction ended: end both, so that the other copy returns.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
}

// track registers a connection pair; false when the relay was cut or
// closed meanwhile (the pair must not outlive the cut).
func (r *relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil || r.closed {
		return false
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

// Cut closes the listener and every open connection: dials are refused
// until Restore. Cutting a cut relay does nothing.
func (r *relay) Cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cutLocked()
}

func (r *relay) cutLocked() {
	if r.ln != nil {
		r.ln.Close()
		r.ln = nil
	}
	for c := range r.conns {
		c.Close()
		delete(r.conns, c)
	}
}

// Restore listens again on the relay's address. Restoring a relay that is
// not cut does nothing.
func (r *relay) Restore() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return errors.New("relay closed")
	}
	if r.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		return err
	}
	r.start(ln)
	return nil
}

// IsCut reports whether the relay is cut now.
func (r *relay) IsCut() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ln == nil
}

// Close cuts the relay for good and waits for its goroutines.
func (r *relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.cutLocked()
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}
