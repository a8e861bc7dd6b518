package main

import (
	"context"
	"flag"
	"io"
	"net"

	"github.com/vigil-gw/vigil/internal/app"
	"github.com/vigil-gw/vigil/nodeload"
)

// runAgent serves this node's load (CPU, memory, NVIDIA GPUs) for the
// gateway's dynamic balancer: JSON on /v1/load, Prometheus text on /metrics.
func runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", ":9400", "listen `address`")
	interval := fs.Duration("interval", nodeload.DefaultInterval, "sampling interval")
	allow := fs.Bool("allow-override", false,
		"testing aid: accept PUT /v1/load {\"cpu\":0.5,\"mem\":0.2,\"gpu\":0.9,\"gpu_mem\":0.4} to pin values until DELETE /v1/load")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"agent: unexpected argument " + fs.Arg(0)}
	}
	if *interval <= 0 {
		return usageError{"agent: --interval must be positive"}
	}
	log := newLogger(stderr, "info")
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := nodeload.NewSampler(*interval, nodeload.WithLogger(log))
	log.Info("agent serving", "listen", ln.Addr().String(), "interval", interval.String(), "allow_override", *allow)

	// Shutdown order: HTTP first, then the sampler (which shuts NVML down).
	sctx, stopSampler := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- s.Run(sctx) }()
	err = app.ServeHandler(ctx, ln, nodeload.Handler(s, *allow))
	stopSampler()
	if serr := <-done; err == nil {
		err = serr
	}
	return err
}
