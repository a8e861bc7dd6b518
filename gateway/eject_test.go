package gateway

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestEjectionProbed, with active checks on the bubble's clock: backend b
// passes its health path but answers every generation with a 500 (the
// demo's phase e). Its third failure ejects it; while out it gets no
// client request, only a readmission probe at the end of each back-off;
// the gateway logs one line when it is ejected and one when it is
// readmitted, and counts the failed probes in between
// (vigil_backend_failed_probes_total, health.failed_probes) with the
// back-off's end in health.ejected_until.
func TestEjectionProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		_, urlA := startSimIn(t, n, "m1", nil)
		sb := newSim("m1", func(k *sim.Knobs) { k.ErrorRate = 1 })
		var out atomic.Bool // b is ejected: count what reaches it
		var clientWhileOut, probesWhileOut atomic.Int64
		hb := sb.Handler()
		urlB := n.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if out.Load() {
				switch r.URL.Path {
				case "/v1/chat/completions":
					clientWhileOut.Add(1)
				case "/v1/completions":
					probesWhileOut.Add(1)
				}
			}
			hb.ServeHTTP(w, r)
		}))
		logs := &syncBuffer{}
		gw := startGatewayIn(t, n, []config.Backend{backend("a", urlA, "m1"), backend("b", urlB, "m1")}, func(c *config.Config) {
			c.Balancer.Strategy = "round_robin"
			c.Health.Interval, c.Health.Timeout = time.Second, 500*time.Millisecond
			c.Health.Failures, c.Health.Backoff, c.Health.MaxBackoff = 3, time.Second, 4*time.Second
		}, func(o *Options) { o.Log = slog.New(slog.NewJSONHandler(logs, nil)) })
		chat := `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`
		send := func() {
			t.Helper()
			// Retries move b's failures to a: the client sees 200s.
			if code, _, body := gw.post(t, "/v1/chat/completions", chat); code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
		}
		for range 6 { // round robin: three go to b first
			send()
		}
		b := adminBackends(t, gw)["b"]
		if !b.Health.Ejected || b.Healthy || b.Health.EjectedUntil == nil {
			t.Fatalf("after three failures b is %+v, want ejected", b)
		}
		out.Store(true)
		// 12 s of traffic at 5 requests a second while b stays out.
		for range 60 {
			send()
			time.Sleep(200 * time.Millisecond)
		}
		b = adminBackends(t, gw)["b"]
		probes := probesWhileOut.Load()
		if n := clientWhileOut.Load(); n != 0 {
			t.Errorf("b got %d client requests while ejected, want 0", n)
		}
		// Back-offs of 1, 2, 4, 4 s from the ejection: 3 or 4 probes in 12 s,
		// as the 1 s rounds fall.
		if probes < 3 || probes > 4 || b.Health.FailedProbes != probes {
			t.Errorf("%d probes reached b, %d failed counted; want 3 or 4, the same", probes, b.Health.FailedProbes)
		}
		if v := metricValue(t, gw, `vigil_backend_failed_probes_total{backend="b"}`); v != float64(probes) {
			t.Errorf("vigil_backend_failed_probes_total = %v, want %d", v, probes)
		}
		if !b.Health.Ejected || b.Health.EjectedUntil == nil || b.Health.EjectedUntil.Before(time.Now()) || b.Health.EjectedUntil.After(time.Now().Add(4*time.Second)) {
			t.Errorf("b's back-off ends %v, want within the 4 s cap from now (%v)", b.Health.EjectedUntil, time.Now())
		}
		if b.Health.ConsecutiveFailures != 3 {
			t.Errorf("consecutive failures %d while out, want the 3 that ejected it", b.Health.ConsecutiveFailures)
		}

		// b recovers: the next probe readmits it and traffic returns.
		sb.SetKnobs(sim.Knobs{TTFT: time.Millisecond})
		out.Store(false)
		time.Sleep(5 * time.Second)
		for range 4 {
			send()
		}
		b = adminBackends(t, gw)["b"]
		if !b.Healthy || b.Health.Ejected || b.Health.FailedProbes != probes || b.Health.ConsecutiveFailures != 0 {
			t.Errorf("after recovery b is %+v, want healthy, %d failed probes kept", b, probes)
		}
		var ejected, readmitted int
		for _, l := range logs.lines(t) {
			if l["backend"] != "b" {
				continue
			}
			switch l["msg"] {
			case "backend ejected":
				ejected++
			case "backend readmitted":
				readmitted++
				if l["by"] != "probe" || l["failed_probes"] != float64(probes) {
					t.Errorf("readmission line %v, want by probe after %d failed probes", l, probes)
				}
			default:
				line, _ := json.Marshal(l)
				t.Errorf("unexpected log line %s", line)
			}
		}
		if ejected != 1 || readmitted != 1 {
			t.Errorf("log: %d ejection lines and %d readmission lines for b, want 1 and 1", ejected, readmitted)
		}
	})
}
