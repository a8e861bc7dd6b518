package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/sim"
)

const demoModel = "demo-model"

// runDemo runs two simulated backends, a gateway in front of them with
// in-memory state, and a trickle of traffic, until ctx is done or the
// duration passes.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway listen `address`")
	duration := fs.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	rps := fs.Float64("rps", 2, "requests per second of demo traffic (0: none)")
	accessLog := fs.Bool("access-log", false, "print the gateway's access log to stdout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	log := newLogger(stderr, "warn")

	// sim-a-int8 is sim-a's model "quantized": the same seed, a little
	// noise on its logprobs; it is shadow-compared against sim-a (signal 5).
	int8 := demoKnobs(50*time.Millisecond, 12*time.Millisecond, 0.85)
	int8.Noise = 0.05
	sims := []struct {
		name, reference string
		opts            sim.Options
	}{
		{"sim-a", "", sim.Options{Model: demoModel, Seed: 1, Knobs: demoKnobs(60*time.Millisecond, 15*time.Millisecond, 0.85)}},
		{"sim-b", "", sim.Options{Model: demoModel, Seed: 2, Knobs: demoKnobs(90*time.Millisecond, 20*time.Millisecond, 0.75)}},
		{"sim-a-int8", "sim-a", sim.Options{Model: demoModel, Seed: 1, Knobs: int8}},
	}
	cfg := config.Default()
	cfg.Listen = *listen
	// The demo needs no collector; set OTEL_EXPORTER_OTLP_ENDPOINT to send
	// its spans to one (e.g. Jaeger's OTLP port).
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		cfg.Tracing.Exporter = "none"
	}
	// Ask for logprobs on a share of the demo's requests, so that the
	// confidence signals have data.
	cfg.Analyzers.Confidence.Inject.SampleRatio = 0.5
	// Compare every request sim-a-int8 serves (production samples 5%), so
	// that the precision signal has its tokens within a minute at 2 req/s.
	cfg.Analyzers.Precision.SampleRatio = 1
	cfg.Health.Interval = 2 * time.Second
	var g errgroup.Group
	simCtx, stopSims := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSims()
	for _, s := range sims {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		h := sim.New(s.opts).Handler()
		g.Go(func() error { return serveHandler(simCtx, ln, h) })
		cfg.Backends = append(cfg.Backends, config.Backend{
			Name: s.name, URL: "http://" + ln.Addr().String(), Kind: "openai", Models: []string{demoModel}, Weight: 100,
			Reference: s.reference,
		})
	}
	if err := cfg.ValidateServe(); err != nil {
		stopSims()
		g.Wait()
		return err
	}
	var access *slog.Logger
	if *accessLog {
		access = slog.New(slog.NewJSONHandler(stdout, nil))
	}
	app, err := build(cfg, log, access)
	if err != nil {
		stopSims()
		g.Wait()
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		stopSims()
		g.Wait()
		return fmt.Errorf("gateway listen: %w", err)
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, `Vigil demo: a gateway in front of three simulated vLLM backends (in-memory state);
sim-a-int8 is shadow-compared against sim-a for precision divergence.

  gateway     %[1]s
  dashboard   %[1]s/dashboard
  metrics     %[1]s/metrics
  signals     %[1]s/admin/signals
  backends    %[1]s/admin/backends   (sim-a %[2]s, sim-b %[3]s, sim-a-int8 %[6]s)

Point any OpenAI client at it; only the base URL changes:
  export OPENAI_BASE_URL=%[1]s/v1 OPENAI_API_KEY=unused
  curl -s %[1]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"%[4]s","messages":[{"role":"user","content":"Hello"}]}'

Sending %.1[5]f requests/s of demo traffic. Ctrl-C stops.
`, base, cfg.Backends[0].URL, cfg.Backends[1].URL, demoModel, *rps, cfg.Backends[2].URL)

	g.Go(func() error {
		defer stopSims()
		return app.serve(ctx, ln)
	})
	if *rps > 0 {
		g.Go(func() error { return demoTraffic(ctx, base, *rps) })
	}
	return g.Wait()
}

func demoKnobs(ttft, itl time.Duration, confidence float64) sim.Knobs {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.Confidence = ttft, itl, confidence
	return k
}

var demoPrompts = []string{
	"Summarise the incident report in three bullet points.",
	"Translate 'good morning' into French and German.",
	"Write a haiku about load balancers.",
	"What is the capital of Australia?",
	"Explain KV-cache in one paragraph.",
}

// demoTraffic sends chat requests at rps until ctx is done, alternating
// streaming and non-streaming, with logprobs on every other pair.
func demoTraffic(ctx context.Context, base string, rps float64) error {
	client := &http.Client{Timeout: 30 * time.Second}
	t := time.NewTicker(time.Duration(float64(time.Second) / rps))
	defer t.Stop()
	var wg sync.WaitGroup // owns the request goroutines; waited for on return
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		lp := ""
		if i%4 < 2 {
			lp = `,"logprobs":true,"top_logprobs":3`
		}
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":%d,"stream":%t%s}`,
			demoModel, demoPrompts[i%len(demoPrompts)], 16+i%32, i%2 == 0, lp)
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader([]byte(body)))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
