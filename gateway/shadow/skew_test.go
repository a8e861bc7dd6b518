package shadow

import (
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/upstream"
	itest "github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// monitorSink scores every comparison into a precision monitor, as the
// analyzers' pipeline does.
type monitorSink struct {
	t    *testing.T
	mon  *precision.Monitor
	pair precision.Pair
}

func (s *monitorSink) OnShadow(sh *exchange.Shadow) {
	c, err := precision.FromShadow(sh)
	if err != nil {
		s.t.Errorf("comparison unreadable: %v", err)
		return
	}
	s.mon.Add(sh.Time, s.pair, &c)
}

// TestShadowSlowSideStaysOK: ten minutes of the demo's traffic to a
// quantized backend (sim-a-int8: sim-a's model with logprob noise 0.05)
// compared with its reference (sim-a), one of the two 10× or 30× slower
// than usual, while both models' confidence moves 0.85 → 0.4 and back every
// 3 s, as the demo's confidence phase and its end do to every simulator.
// The two stay the same model up to the noise: precision must be ok at
// every evaluation. A teacher-forced comparison that took the backend's
// logprobs from its generation and the reference's from its scoring, a
// generation later, read a change between the two (KL 0.4–0.6 nats a
// token against 0.0003) as divergence, and the fewer comparisons a slow
// side lets complete, the more those weigh: the window's KL reached
// 0.11–0.42 that way (max_kl 0.05); it stays below 0.001 now. Ten minutes
// of the bubble's clock take a few seconds.
func TestShadowSlowSideStaysOK(t *testing.T) {
	for _, tc := range []struct {
		slow   string
		factor time.Duration
	}{{"reference", 10}, {"reference", 30}, {"backend", 10}, {"backend", 30}} {
		t.Run(fmt.Sprintf("%s×%d", tc.slow, tc.factor), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { slowSideStaysOK(t, tc.slow == "reference", tc.factor) })
		})
	}
}

func slowSideStaysOK(t *testing.T, slowRef bool, factor time.Duration) {
	const (
		model = "demo"
		rate  = 4 // sim-a-int8's share of the demo's 20 req/s, chat and completions
		flip  = 3 * time.Second
	)
	duration := 10 * time.Minute
	if itest.Race {
		// The race detector makes the in-memory HTTP several times
		// slower; two minutes still hold forty changes.
		duration = 2 * time.Minute
	}
	knobs := func(ttft, itl time.Duration, noise float64) sim.Knobs {
		k := sim.DefaultKnobs()
		k.TTFT, k.ITL, k.Confidence, k.Noise = ttft, itl, 0.85, noise
		return k
	}
	refBase, qBase := knobs(60*time.Millisecond, 15*time.Millisecond, 0), knobs(50*time.Millisecond, 12*time.Millisecond, 0.05)
	if slowRef {
		refBase.TTFT *= factor
	} else {
		qBase.TTFT *= factor
	}
	var n itest.Network
	refSim := sim.New(sim.Options{Model: model, Seed: 1, Knobs: refBase})
	qSim := sim.New(sim.Options{Model: model, Seed: 1, Knobs: qBase})
	backends := []config.Backend{
		{Name: "sim-a-int8", URL: n.Serve(t, qSim.Handler()), Kind: "openai", Models: []string{model}, Weight: 100, Reference: "sim-a"},
		{Name: "sim-a", URL: n.Serve(t, refSim.Handler()), Kind: "openai", Models: []string{model}, Weight: 100},
	}
	cfg := config.Default()
	a := &cfg.Analyzers
	a.Bucket, a.Interval, a.Window = time.Second, time.Second, 15*time.Second // the demo's scenario
	a.Precision.SampleRatio = 1
	pair := precision.Pair{Backend: "sim-a-int8", Reference: "sim-a"}
	mon := precision.New(*a, []precision.Pair{pair})
	pool, err := upstream.NewPool(backends, cfg.Health, cfg.Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	client := n.Client()
	defer client.CloseIdleConnections()
	reg := prometheus.NewRegistry()
	sh := New(a.Precision, backends, pool, &monitorSink{t: t, mon: mon, pair: pair}, client, slog.New(slog.DiscardHandler), reg)
	q := pool.Backends()[0]

	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { // the demo's traffic: every request compared
		prompts := []string{"Tell me about the sea.", "What is the time in the city?", "Write a short story about a dog.",
			"Why do people read in the evening?", "Explain how water turns into ice.", "How would you describe the sky?"}
		for i := 0; time.Since(start) < duration; i++ {
			body := fmt.Sprintf(`{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":%q}]}`, model, prompts[i%len(prompts)])
			sh.Start(q, exchange.OpChat, []byte(body), nil, "")
			time.Sleep(time.Second / rate)
		}
	})
	wg.Go(func() { // both models' confidence 0.85 → 0.4 and back, off the traffic's beat
		time.Sleep(flip/2 + 333*time.Microsecond + 7)
		for low := true; time.Since(start) < duration; low = !low {
			for _, s := range []struct {
				srv  *sim.Server
				base sim.Knobs
			}{{refSim, refBase}, {qSim, qBase}} {
				k := s.base
				if low {
					k.Confidence = 0.4
				}
				s.srv.SetKnobs(k)
			}
			time.Sleep(flip)
		}
	})
	evaluations, divergent, maxKL := 0, 0, 0.0
	var first precision.PairResult
	wg.Go(func() { // analyzers.interval
		for time.Since(start) < duration {
			time.Sleep(a.Interval)
			p := mon.Evaluate(time.Now()).Pairs[0]
			if p.State == precision.StateUnknown {
				continue
			}
			evaluations++
			maxKL = max(maxKL, float64(p.KL))
			if p.State != precision.StateOK {
				if divergent == 0 {
					first = p
				}
				divergent++
			}
		}
	})
	wg.Wait()
	sh.Close()
	done := testutil.ToFloat64(sh.outcome.WithLabelValues("sim-a-int8", "done"))
	t.Logf("%.0f comparisons done, %d evaluations with a verdict, the window's KL at most %.4f", done, evaluations, maxKL)
	if divergent > 0 {
		t.Errorf("%d of %d evaluations not ok; the first at %s: %+v", divergent, evaluations, first.State, first)
	}
	// Half the run's evaluations at least: the signal had its tokens.
	if evaluations < int(duration/a.Interval)/2 || done < float64(duration/time.Second) {
		t.Errorf("%d evaluations with a verdict, %.0f comparisons done: too few to tell", evaluations, done)
	}
}

// countSink counts the comparisons handed on.
type countSink struct {
	mu sync.Mutex
	n  int
}

func (s *countSink) OnShadow(*exchange.Shadow) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
}

// TestShadowIncomplete: a comparison whose reference does not answer within
// precision.timeout is counted incomplete, one whose reference answers
// HTTP 500 failed; neither reaches the sink.
func TestShadowIncomplete(t *testing.T) {
	for _, tc := range []struct {
		name  string
		knobs func(*sim.Knobs)
		want  string
	}{
		{"timeout", func(k *sim.Knobs) { k.TTFT = 3 * time.Second }, "incomplete"},
		{"error", func(k *sim.Knobs) { k.ErrorRate = 1 }, "failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var n itest.Network
				qk, rk := sim.DefaultKnobs(), sim.DefaultKnobs()
				qk.TTFT, rk.TTFT = time.Millisecond, time.Millisecond
				tc.knobs(&rk)
				backends := []config.Backend{
					{Name: "q", URL: n.Serve(t, sim.New(sim.Options{Model: "m", Seed: 1, Knobs: qk}).Handler()), Kind: "openai", Models: []string{"m"}, Weight: 100, Reference: "ref"},
					{Name: "ref", URL: n.Serve(t, sim.New(sim.Options{Model: "m", Seed: 1, Knobs: rk}).Handler()), Kind: "openai", Models: []string{"m"}, Weight: 100},
				}
				cfg := config.Default()
				pc := cfg.Analyzers.Precision
				pc.SampleRatio, pc.Timeout = 1, time.Second
				pool, err := upstream.NewPool(backends, cfg.Health, cfg.Balancer.LatencyDecay)
				if err != nil {
					t.Fatal(err)
				}
				client := n.Client()
				defer client.CloseIdleConnections()
				sink := &countSink{}
				sh := New(pc, backends, pool, sink, client, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
				sh.Start(pool.Backends()[0], exchange.OpChat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil, "")
				// Past precision.timeout, the comparison has ended on its
				// own; Close would cancel one still in flight.
				time.Sleep(2 * pc.Timeout)
				synctest.Wait()
				sh.Close()
				for _, o := range []string{"done", "skipped", "failed", "incomplete"} {
					want := 0.0
					if o == tc.want {
						want = 1
					}
					if got := testutil.ToFloat64(sh.outcome.WithLabelValues("q", o)); got != want {
						t.Errorf("outcome %s: %v, want %v", o, got, want)
					}
				}
				if sink.n != 0 {
					t.Errorf("%d comparisons handed on, want none", sink.n)
				}
			})
		})
	}
}
