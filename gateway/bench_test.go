package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/tracing"
)

// BenchmarkAddedLatency measures what Vigil adds to a request: the same
// requests go straight to an in-process simulator (zero TTFT and ITL) and
// through the gateway, one at a time over keep-alive connections. Compare
// the direct and vigil rows of the same run: the difference in p50/p99 and
// allocs/op is the gateway's (client and simulator costs appear in both).
//
//	go test -run '^$' -bench AddedLatency -benchmem ./gateway/
func BenchmarkAddedLatency(b *testing.B) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	s := sim.New(sim.Options{Model: "m1", Seed: 1, Created: 1, Knobs: k})
	simSrv := newBenchServer(b, s.Handler())

	cfg := config.Default()
	cfg.Backends = []config.Backend{backend("a", simSrv, "m1")}
	cfg.Health.Interval = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	newGateway := func(tracer *tracing.Provider) string {
		o := Options{
			Config:    cfg,
			Log:       slog.New(slog.DiscardHandler),
			AccessLog: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Observer:  nopObserver{},
		}
		if tracer != nil {
			o.Tracer, o.Propagator = tracer.Tracer(), tracer.Propagator()
		}
		gw, err := New(o)
		if err != nil {
			b.Fatal(err)
		}
		go gw.Run(ctx)
		return newBenchServer(b, gw.Handler())
	}
	gwSrv := newGateway(nil)
	// 100% sampling, spans batched to an exporter that discards them: the
	// cost of making and exporting the span tree, without a network.
	tp, err := tracing.New(ctx, tracing.Options{Config: config.Default().Tracing, Exporter: discardExporter{}})
	if err != nil {
		b.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	tracedSrv := newGateway(tp)

	bodies := map[string]string{
		"nonstream": `{"model":"m1","max_tokens":32,"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`,
		"stream":    `{"model":"m1","max_tokens":32,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`,
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for _, mode := range []string{"nonstream", "stream"} {
		for _, target := range []struct{ name, url string }{{"direct", simSrv}, {"vigil", gwSrv}, {"vigil-traced", tracedSrv}} {
			b.Run(mode+"/"+target.name, func(b *testing.B) {
				url := target.url + "/v1/chat/completions"
				var lat []time.Duration
				b.ReportAllocs()
				cpu := processCPU()
				for b.Loop() {
					start := time.Now()
					resp, err := client.Post(url, "application/json", strings.NewReader(bodies[mode]))
					if err != nil {
						b.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
					lat = append(lat, time.Since(start))
				}
				// The CPU of the client, the simulator and (but for
				// direct) the gateway: the difference is the gateway's.
				reportCPU(b, cpu)
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

type nopObserver struct{}

func (nopObserver) OnPrompt(time.Time, exchange.Operation, []byte)   {}
func (nopObserver) OnRequest(*exchange.Request)                      {}
func (nopObserver) OnEvent(*exchange.Request, []byte)                {}
func (nopObserver) OnResponse(*exchange.Request, *exchange.Response) {}

func newBenchServer(b *testing.B, h http.Handler) string {
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	return srv.URL
}
