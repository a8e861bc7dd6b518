package faults

import (
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/vigil-gw/vigil/state/redistest"
	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestRedisSlow: Redis answers every command 500 ms late (a latency toxic
// on its replies) while two replicas share their windows through it.
// Clients must not notice: the hot path never waits on Redis, so the P99
// stays far below the delay and no request fails. The flushes take about
// 2 s each (a few round trips, and new connections for those go-redis
// closed) and succeed, within their 5-s bound: the replicas go on sharing
// their windows, a couple of seconds late; once Redis is fast again both
// count every response exactly once. (With the flush bounded by the
// one-second interval and one round trip per series, every flush failed.)
func TestRedisSlow(t *testing.T) {
	t.Parallel()
	redisFault(t, flushesSucceed, func(t *testing.T, px *toxitest.Proxy) func() {
		px.AddToxic(t, toxitest.Latency("slow", 500*time.Millisecond))
		return func() { px.RemoveToxic(t, "slow") }
	})
}

// TestRedisLossy: about a tenth of the traffic to Redis is lost. Toxiproxy
// has no packet-level drop; the nearest it offers is a timeout toxic
// (timeout 0: data swallowed, connection left open) on the commands
// (upstream) at toxicity 0.1, drawn again for every connection every
// 200 ms (an update of the toxic draws anew): at any moment about 10 % of
// the connections lose what is sent on them, as TCP under 10 % loss stalls
// in retransmissions. go-redis times such a command out after a second,
// closes the connection and the next flush opens another. The same
// outcome is asserted as for a slow Redis: clients see nothing, windows
// end up exactly once; how many flushes fail is chance (about one in
// five or ten), so it is logged, not asserted.
func TestRedisLossy(t *testing.T) {
	t.Parallel()
	redisFault(t, flushesAny, func(t *testing.T, px *toxitest.Proxy) func() {
		x := toxitest.Blackhole("loss", "upstream")
		x.Toxicity = 0.1
		px.AddToxic(t, x)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if err := px.UpdateToxic("loss", 0.1, nil); err != nil {
						t.Errorf("redraw the loss: %v", err)
						return
					}
				}
			}
		}()
		return func() {
			close(stop)
			<-done
			px.RemoveToxic(t, "loss")
		}
	})
}

// TestRedisLaggy: Redis answers every command 100 ms late. A flush is a
// handful of round trips whatever the number of series (their windows go
// in one pipeline, state.Store.Exchange), so the flushes still succeed
// within the one-second interval and the replicas go on sharing their
// windows during the fault.
func TestRedisLaggy(t *testing.T) {
	t.Parallel()
	redisFault(t, flushesSucceed, func(t *testing.T, px *toxitest.Proxy) func() {
		px.AddToxic(t, toxitest.Latency("laggy", 100*time.Millisecond))
		return func() { px.RemoveToxic(t, "laggy") }
	})
}

// What redisFault asserts of the flushes during the fault.
type flushWant int

const (
	flushesAny     flushWant = iota // logged only
	flushesSucceed                  // none fails
)

// redisFault runs two replicas sharing windows through a Toxiproxy in
// front of a real Redis, under load: a baseline, then the fault inject
// makes (it returns the function that clears it), then the recovery. It
// asserts that clients do not notice the fault and that each replica's
// window ends up counting every response of both exactly once, and what
// want says of the flushes during the fault.
func redisFault(t *testing.T, want flushWant, inject func(*testing.T, *toxitest.Proxy) (clear func())) {
	tp := toxitest.Start(t)
	redis := redistest.Start(t)
	px := tp.Proxy(t, "redis", redis.Addr)
	be := startSim(t)
	cfg := baseConfig(backendYAML("a", be.URL)) + "state: {redis: {url: \"redis://" + px.Addr() + "/0\"}}\n"
	replicas := []*gateway{startVigil(t, "r1", cfg), startVigil(t, "r2", cfg)}

	clients := []openai.Client{newClient(replicas[0].URL), newClient(replicas[1].URL)}
	// agree waits until both replicas count n responses and returns how
	// long that took.
	agree := func(what string, n int, limit time.Duration) time.Duration {
		return waitFor(t, what, limit, func() bool {
			return replicas[0].responses(t) == int64(n) && replicas[1].responses(t) == int64(n)
		})
	}
	// exactly is agree, then checks that both still count n after two
	// more flushes: a bucket counted twice would show then.
	exactly := func(what string, n int, limit time.Duration) time.Duration {
		took := agree(what, n, limit)
		time.Sleep(2500 * time.Millisecond)
		for _, r := range replicas {
			if got := r.responses(t); got != int64(n) {
				t.Errorf("%s: %s counts %d responses, want exactly %d", what, r.name, got, n)
			}
		}
		return took
	}
	failures := func() (flushes, failed float64) {
		for _, r := range replicas {
			m := r.metrics(t) // one read: both counters of the same flushes
			flushes += metricSum(m, "vigil_state_flushes_total")
			failed += metricSum(m, "vigil_state_flush_failures_total")
		}
		return flushes, failed
	}

	base := startLoad(t, "baseline", 4, 5*time.Millisecond, chat(10*time.Second, clients...))
	time.Sleep(2 * time.Second)
	base.stop()
	n := base.total()
	agree("windows before the fault", n, 15*time.Second)
	flushes0, failed0 := failures()

	l := startLoad(t, "fault", 4, 5*time.Millisecond, chat(10*time.Second, clients...))
	clear := inject(t, px)
	time.Sleep(4 * time.Second)
	l.setPhase("recovered")
	// What each replica sees of the whole traffic at the end of the fault:
	// the rest is held back, not lost.
	sent := n + l.total()
	seen := []int64{replicas[0].responses(t), replicas[1].responses(t)}
	flushes1, failed1 := failures()
	clear()
	cleared := time.Now()
	time.Sleep(time.Second)
	l.stop()
	total := n + l.total()
	took := exactly("windows after the fault", total, 20*time.Second)
	recovered := time.Since(cleared) - 2500*time.Millisecond

	s := report(t, base, l)
	t.Logf("before the fault: %d responses, both replicas counted them all", n)
	t.Logf("during the fault: %.0f of %.0f flushes failed; at its end the replicas counted %v of the %d responses sent (the rest held back)",
		failed1-failed0, flushes1-flushes0, seen, sent)
	t.Logf("after the fault: both replicas count all %d responses exactly once, %v after the toxic was removed (%v after the load ended)",
		total, recovered.Round(100*time.Millisecond), took.Round(100*time.Millisecond))

	if f := s["fault"].failed + s["recovered"].failed; f != 0 {
		t.Errorf("%d client requests failed with a healthy backend", f)
	}
	// A request that waited on Redis would take the 500 ms delay or more
	// (a second, go-redis's timeout, when the command was lost): the P99
	// stays far below.
	if p99 := s["fault"].p99; p99 >= 500*time.Millisecond {
		t.Errorf("P99 under the fault %v: requests wait on Redis", p99)
	}
	if want == flushesSucceed && failed1 != failed0 {
		t.Errorf("%.0f of %.0f flushes failed during the fault", failed1-failed0, flushes1-flushes0)
	}
}
