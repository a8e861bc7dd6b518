package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/valyala/fasthttp"
)

// The fast-proxy target is a reverse proxy on fasthttp, the HTTP stack
// that replaces net/http in the fastest Go gateways, with nothing else:
// one HostClient with up to 1024 connections to the backend, responses
// read as streams, an event stream written to the client read by read
// with a flush after each. Measured in the same run as go-proxy, it tells
// what replacing net/http's server and client on Vigil's hot path would
// buy at most.

// runFastProxy serves `proxybench fastproxy -listen ADDR -backend URL`
// until SIGTERM or SIGINT.
func runFastProxy(args []string) error {
	listen, u, err := proxyFlags("fastproxy", args)
	if err != nil {
		return err
	}
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 1024, StreamResponseBody: true}
	srv := &fasthttp.Server{Handler: fastProxy(hc), NoDefaultServerHeader: true, NoDefaultDate: true}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Shutdown()
	}()
	return srv.ListenAndServe(listen)
}

var eventStream = []byte("text/event-stream")

func fastProxy(hc *fasthttp.HostClient) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		ctx.Request.Header.Del("Connection")
		resp := fasthttp.AcquireResponse()
		if err := hc.Do(&ctx.Request, resp); err != nil {
			fasthttp.ReleaseResponse(resp)
			ctx.Error("bad gateway: "+err.Error(), fasthttp.StatusBadGateway)
			return
		}
		resp.Header.CopyTo(&ctx.Response.Header)
		if !bytes.HasPrefix(resp.Header.ContentType(), eventStream) {
			ctx.Response.SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
			return
		}
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer fasthttp.ReleaseResponse(resp)
			body := resp.BodyStream()
			buf := make([]byte, 16<<10)
			for {
				n, err := body.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil || w.Flush() != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
}
