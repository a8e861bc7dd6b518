package matrix

import (
	"context"
	"net"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is the matrix scenario's trace collector: an in-process
// OTLP/gRPC trace service that counts the spans it receives and keeps
// none. Start serves it until Stop; Stop is safe without Start.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer

	ln    net.Listener
	srv   *grpc.Server
	spans atomic.Int64
	done  chan struct{} // closed when Serve returns; nil before Start
}

// newCollector listens on a free port of 127.0.0.1.
func newCollector() (*collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &collector{ln: ln, srv: grpc.NewServer()}
	coltracepb.RegisterTraceServiceServer(c.srv, c)
	return c, nil
}

// Addr is the collector's host:port (plaintext gRPC).
func (c *collector) Addr() string { return c.ln.Addr().String() }

// Spans is the number of spans received so far.
func (c *collector) Spans() int64 { return c.spans.Load() }

// Export implements the OTLP TraceService.
func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var n int64
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += int64(len(ss.GetSpans()))
		}
	}
	c.spans.Add(n)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Start serves the collector in a goroutine that Stop ends.
func (c *collector) Start() {
	c.done = make(chan struct{})
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(c.ln) // returns when Stop closes the listener
	}()
}

// Stop ends the collector and waits for it; without Start it closes the
// listener.
func (c *collector) Stop() {
	if c.done == nil {
		c.ln.Close()
		return
	}
	c.srv.Stop()
	<-c.done
}
