package faults

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestBackendHung: backend b of two starts accepting connections and never
// answering (a blackhole on its replies, in front of a healthy simulator):
// requests and health probes alike hang. The active health check (every
// second, 500 ms timeout) marks b down within about a second and a half;
// from then on no request fails, every one going to the healthy a. The
// requests caught on b before that wait out limits.upstream_timeout (3 s
// here, 300 s by default) and fail with 504: the gateway retries only
// connection failures, since a timed-out request may have run.
func TestBackendHung(t *testing.T) {
	t.Parallel()
	tp := toxitest.Start(t)
	a, b := startSim(t), startSim(t)
	px := tp.Proxy(t, "b", b.Addr)
	const upstreamTimeout = 3 * time.Second
	cfg := baseConfig(backendYAML("a", a.URL)+backendYAML("b", "http://"+px.Addr())) +
		fmt.Sprintf("limits: {upstream_timeout: %v}\n", upstreamTimeout)
	g := startVigil(t, "gw", cfg)

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, chat(15*time.Second, newClient(g.URL)))
	time.Sleep(2 * time.Second)
	l.setPhase("b hung")
	px.AddToxic(t, toxitest.Blackhole("hung", "downstream"))
	hung := time.Now()
	markedDown := waitFor(t, "b marked down in /admin/backends", 10*time.Second, func() bool {
		return !g.backends(t)["b"].Healthy
	})
	down := hung.Add(markedDown)
	// Until the requests caught on b have timed out.
	time.Sleep(time.Until(down.Add(upstreamTimeout + time.Second)))
	l.setPhase("b back")
	px.RemoveToxic(t, "hung")
	back := waitFor(t, "b healthy again", 10*time.Second, func() bool { return g.backends(t)["b"].Healthy })
	time.Sleep(2 * time.Second)
	l.stop()
	s := report(t, l)

	// A request in flight on b when it hung is caught like one sent to it
	// afterwards: the phases are by start, so some are the baseline's.
	var caught, afterDown, failedAfterDown, timeouts, baseFailed int
	var caughtWait time.Duration
	for _, o := range append(l.outcomes("baseline"), l.outcomes("b hung")...) {
		switch {
		case o.start.After(down):
			afterDown++
			if o.err != nil {
				failedAfterDown++
			}
			continue
		case o.start.Add(o.took).Before(hung) && o.err != nil:
			baseFailed++
			continue
		}
		if o.err != nil {
			caught++
			caughtWait = max(caughtWait, o.took)
			if apiErr, ok := errors.AsType[*openai.Error](o.err); ok && apiErr.StatusCode == http.StatusGatewayTimeout {
				timeouts++
			}
		}
	}
	t.Logf("b marked down %v after it hung; %d requests caught on it before that failed (%d with 504) after up to %v",
		markedDown.Round(100*time.Millisecond), caught, timeouts, caughtWait.Round(100*time.Millisecond))
	t.Logf("after b was marked down: %d requests, %d failed; b healthy again %v after the toxic was removed",
		afterDown, failedAfterDown, back.Round(100*time.Millisecond))

	if baseFailed != 0 || s["baseline"].byBackend["b"] == 0 {
		t.Errorf("baseline: %v, want no failure before b hung and both backends used", s["baseline"])
	}
	// One health interval (1 s) plus the probe's timeout (500 ms), with
	// room for a loaded machine.
	if markedDown > 5*time.Second {
		t.Errorf("b marked down only %v after it hung", markedDown)
	}
	if failedAfterDown != 0 || afterDown == 0 {
		t.Errorf("%d of %d requests started after b was marked down failed, with a healthy backend", failedAfterDown, afterDown)
	}
	if caught != timeouts {
		t.Errorf("%d requests caught on the hung backend failed, %d of them with the 504 of limits.upstream_timeout", caught, timeouts)
	}
	if f := s["b back"].failed; f != 0 {
		t.Errorf("%d requests failed once b was back", f)
	}
}

// TestBackendStallsMidStream: backend b of two sends the headers and the
// first two tokens of every stream, then stalls for a minute (the
// simulator's stall knob); its health endpoint answers all along. Clients
// give a stream 3 s. Streams served by the healthy a never fail; a stream
// caught on b stalls until its client gives up, since the gateway has no
// idle timeout on a stream once its headers are sent (limits.
// upstream_timeout bounds the wait for headers only) and b stays healthy.
// The balancer's in-flight count steers most streams away from b while
// its streams hang. When the clients give up, the gateway cancels the
// upstream requests: nothing stays in flight at b.
func TestBackendStallsMidStream(t *testing.T) {
	t.Parallel()
	a, b := startSim(t, "--itl", "2ms"), startSim(t, "--itl", "2ms")
	g := startVigil(t, "gw", baseConfig(backendYAML("a", a.URL)+backendYAML("b", b.URL)))
	const clientTimeout = 3 * time.Second

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, stream(clientTimeout, newClient(g.URL)))
	time.Sleep(2 * time.Second)
	l.setPhase("b stalls")
	b.setKnobs(t, `{"stall": "1m", "stall_after": 2}`)
	time.Sleep(5 * time.Second)
	l.setPhase("b fixed")
	b.setKnobs(t, `{"stall": "0s"}`)
	time.Sleep(2 * time.Second)
	l.stop()
	s := report(t, l)

	var onA, failedOnA, onB, stalled int
	for _, ph := range []string{"b stalls", "b fixed"} {
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
	t.Logf("while b stalled: %d streams on a (%d failed), %d on b (%d stalled until the client's %v timeout)",
		onA, failedOnA, onB, stalled, clientTimeout)
	t.Logf("nothing left in flight at b %v after the load ended", left.Round(100*time.Millisecond))

	if s["baseline"].failed != 0 {
		t.Errorf("baseline: %v", s["baseline"])
	}
	if failedOnA != 0 || onA == 0 {
		t.Errorf("%d of %d streams served by the healthy backend failed", failedOnA, onA)
	}
	if stalled == 0 {
		t.Errorf("no stream stalled on b: the stall knob did not take")
	}
}
