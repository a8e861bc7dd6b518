package faults

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestBackendHung: backend b of two starts accepting connections and never
// answering (a blackhole on its replies, in front of a healthy simulator):
// requests and health probes alike hang. The active health check (every
// second, 500 ms timeout) marks b down within about a second and a half;
// the requests caught on b meanwhile are then cancelled there and retried
// on a (cancel.go), so that none fails and none waits for
// limits.upstream_timeout (30 s here); from then on every request goes to
// a. The balancer is round_robin, so that requests are caught on b: the
// default strategy weighs latency, and on a busy machine it may have
// learnt to avoid b before the hang, leaving nothing to move.
func TestBackendHung(t *testing.T) {
	t.Parallel()
	tp := toxitest.Start(t)
	a, b := startSim(t), startSim(t)
	px := tp.Proxy(t, "b", b.Addr)
	const upstreamTimeout = 30 * time.Second
	cfg := baseConfig(backendYAML("a", a.URL)+backendYAML("b", "http://"+px.Addr())) +
		fmt.Sprintf("limits: {upstream_timeout: %v}\nbalancer: {strategy: round_robin}\n", upstreamTimeout)
	g := startVigil(t, "gw", cfg)

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, chat(15*time.Second, newClient(g.URL)))
	time.Sleep(2 * time.Second)
	l.setPhase("b hung")
	px.AddToxic(t, toxitest.Blackhole("hung", "downstream"))
	markedDown := waitFor(t, "b marked down in /admin/backends", 10*time.Second, func() bool {
		return !g.backends(t)["b"].Healthy
	})
	time.Sleep(2 * time.Second)
	l.setPhase("b back")
	px.RemoveToxic(t, "hung")
	back := waitFor(t, "b healthy again", 10*time.Second, func() bool { return g.backends(t)["b"].Healthy })
	time.Sleep(2 * time.Second)
	l.stop()
	s := report(t, l)

	// The requests caught on b waited from their start until it was
	// marked down, and a little more for a: the longest requests.
	var failed int
	var longest time.Duration
	for _, ph := range []string{"baseline", "b hung", "b back"} {
		for _, o := range l.outcomes(ph) {
			if o.err != nil {
				failed++
			}
			longest = max(longest, o.took)
		}
	}
	moved := g.metric(t, `vigil_retries_total{reason="backend_down"}`)
	t.Logf("b marked down %v after it hung; %v requests caught on it moved to a then; the longest request took %v (upstream_timeout %v)",
		markedDown.Round(100*time.Millisecond), moved, longest.Round(100*time.Millisecond), upstreamTimeout)
	t.Logf("%d of %d requests failed; b healthy again %v after the toxic was removed",
		failed, l.total(), back.Round(100*time.Millisecond))

	if s["baseline"].byBackend["b"] == 0 {
		t.Errorf("baseline: %v, want both backends used", s["baseline"])
	}
	// One health interval (1 s) plus the probe's timeout (500 ms), with
	// room for a loaded machine.
	if markedDown > 5*time.Second {
		t.Errorf("b marked down only %v after it hung", markedDown)
	}
	if failed != 0 {
		t.Errorf("%d requests failed, with a healthy backend beside the hung one", failed)
	}
	if moved == 0 || longest > markedDown+5*time.Second {
		t.Errorf("%v requests moved off b when it was marked down; the longest request took %v", moved, longest)
	}
}

// TestBackendStallsMidStream: backend b of two sends the headers and the
// first two tokens of every stream, then stalls for a minute (the
// simulator's stall knob); its health endpoint answers all along. Clients
// give a stream 3 s. Streams served by the healthy a never fail. A stream
// caught on b ends after limits.stream_idle_timeout (1 s here) with the
// gateway's error event, which the OpenAI SDK raises, and counts as b's
// failure: health.failures (3) of them eject b, and then only a serves.
// Nothing stays in flight at b.
func TestBackendStallsMidStream(t *testing.T) {
	t.Parallel()
	a, b := startSim(t, "--itl", "2ms"), startSim(t, "--itl", "2ms")
	const clientTimeout, idle = 3 * time.Second, time.Second
	g := startVigil(t, "gw", baseConfig(backendYAML("a", a.URL)+backendYAML("b", b.URL))+
		fmt.Sprintf("limits: {stream_idle_timeout: %v}\n", idle))

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, stream(clientTimeout, newClient(g.URL)))
	time.Sleep(2 * time.Second)
	l.setPhase("b stalls")
	b.setKnobs(t, `{"stall": "1m", "stall_after": 2}`)
	time.Sleep(5 * time.Second)
	l.setPhase("b fixed")
	b.setKnobs(t, `{"stall": "0s"}`)
	time.Sleep(2 * time.Second)
	l.stop()
	report(t, l)

	// A stream of the baseline that b was still generating when the
	// stall was set stalls too: all phases count.
	var onA, failedOnA, onB, stalled, idleEnded int
	var longest time.Duration
	for _, ph := range []string{"baseline", "b stalls", "b fixed"} {
		for _, o := range l.outcomes(ph) {
			switch o.backend {
			case "a":
				onA++
				if o.err != nil {
					failedOnA++
				}
			case "b":
				onB++
				if o.err != nil {
					stalled++
					longest = max(longest, o.took)
					if strings.Contains(o.err.Error(), "sent nothing for") {
						idleEnded++
					}
				}
			}
		}
	}
	// The streams b still holds once every client is gone.
	var running int64
	left := waitFor(t, "b's stalled streams cancelled", 10*time.Second, func() bool {
		var st struct {
			Running int64 `json:"running"`
		}
		resp, err := http.Get(b.URL + "/sim/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return false
		}
		running = st.Running
		return running == 0 && g.backends(t)["b"].Inflight == 0
	})
	ejections := g.metric(t, `vigil_backend_ejections_total{backend="b"}`)
	t.Logf("%d streams on a (%d failed), %d on b (%d stalled: %d ended by the gateway's idle error, the longest after %v); b ejected %v times",
		onA, failedOnA, onB, stalled, idleEnded, longest.Round(10*time.Millisecond), ejections)
	t.Logf("nothing left in flight at b %v after the load ended", left.Round(100*time.Millisecond))

	if failedOnA != 0 || onA == 0 {
		t.Errorf("%d of %d streams served by the healthy backend failed", failedOnA, onA)
	}
	if stalled == 0 {
		t.Errorf("no stream stalled on b: the stall knob did not take")
	}
	if idleEnded != stalled || longest >= clientTimeout {
		t.Errorf("%d of %d streams stalled on b ended by stream_idle_timeout; the longest took %v", idleEnded, stalled, longest)
	}
	if ejections == 0 {
		t.Errorf("b was never ejected, after %d stalled streams", stalled)
	}
}
