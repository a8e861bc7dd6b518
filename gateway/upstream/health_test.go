package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestEjectionProbes walks the passive health state machine on the
// bubble's clock against a server whose health path passes while every
// generation fails (as sim-b's in the demo): one ejection however many
// failures follow, no readmission by the health path alone, a readmission
// probe at the end of each back-off (each failure counted and doubling the
// back-off up to the cap), one readmission and one log line for it when a
// probe passes, and probation after it.
func TestEjectionProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		var probes atomic.Int64
		var model atomic.Value
		var net testutil.Network
		url := net.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/health":
				w.WriteHeader(http.StatusOK)
			case "/v1/completions":
				probes.Add(1)
				var body struct {
					Model     string `json:"model"`
					MaxTokens int    `json:"max_tokens"`
				}
				json.NewDecoder(r.Body).Decode(&body)
				model.Store(body.Model)
				if failing.Load() {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				io.WriteString(w, `{"choices":[{"text":"x"}]}`)
			default:
				w.WriteHeader(http.StatusNotFound)
			}
		}))
		h := config.Default().Health
		h.Failures, h.Backoff, h.MaxBackoff = 3, time.Second, 4*time.Second
		p, err := NewPool([]config.Backend{{Name: "a", URL: url, Kind: KindOpenAI, Models: []string{"m1"}, Weight: 1}}, h, config.Default().Balancer.LatencyDecay)
		if err != nil {
			t.Fatal(err)
		}
		b := p.Backends()[0]
		var logs bytes.Buffer
		var failedCalls, readmits atomic.Int64
		c := &Checker{Pool: p, Client: net.Client(), Path: "/health", Interval: time.Second, Timeout: 500 * time.Millisecond,
			Log:           slog.New(slog.NewJSONHandler(&logs, nil)),
			OnProbeFailed: func(*Backend, int64, time.Time) { failedCalls.Add(1) },
			OnReadmit:     func(_ *Backend, failed int64) { readmits.Add(1) },
		}
		t0 := time.Now()
		ejections := 0
		for range 5 { // the last two as if in flight when the third ejected it
			if ej, until := b.RecordFailure(time.Now()); ej {
				ejections++
				if !until.Equal(t0.Add(time.Second)) {
					t.Errorf("ejected until +%v, want +1s", until.Sub(t0))
				}
			}
		}
		if ejections != 1 || b.ConsecutiveFailures() != 3 || b.Healthy() || !b.Ejected() {
			t.Fatalf("after 5 failures: %d ejections, %d failures, healthy %v; want 1, 3, false",
				ejections, b.ConsecutiveFailures(), b.Healthy())
		}

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(ctx) }()
		// Rounds at +0s, +1s, +2s, …: the probes go at +1s (back-off 1s),
		// +3s (2s), +7s (4s, the cap), and the back-off then ends at +11s.
		time.Sleep(10*time.Second + time.Second/2)
		synctest.Wait()
		if got := b.EjectedUntil().Sub(t0); got != 11*time.Second {
			t.Errorf("ejected until +%v, want +11s", got)
		}
		if n := probes.Load(); n != 3 || b.FailedProbes() != 3 || failedCalls.Load() != 3 {
			t.Errorf("%d probes sent, %d failed counted, %d reported; want 3 each", n, b.FailedProbes(), failedCalls.Load())
		}
		if m, _ := model.Load().(string); m != "m1" {
			t.Errorf("the probe asked for model %q, want m1", m)
		}
		if b.Healthy() || !b.ActiveHealthy() || b.ConsecutiveFailures() != 3 {
			t.Errorf("while out: healthy %v, active %v, failures %d; want false, true, 3", b.Healthy(), b.ActiveHealthy(), b.ConsecutiveFailures())
		}

		failing.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		if !b.Healthy() || b.Ejected() || readmits.Load() != 1 || b.FailedProbes() != 3 {
			t.Errorf("after a passing probe: healthy %v, ejected %v, %d readmissions, %d failed probes; want true, false, 1, 3",
				b.Healthy(), b.Ejected(), readmits.Load(), b.FailedProbes())
		}
		time.Sleep(3 * time.Second) // more rounds: nothing more to say
		synctest.Wait()
		cancel()
		<-done
		var lines []map[string]any
		for l := range bytes.Lines(logs.Bytes()) {
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, m)
		}
		if len(lines) != 1 || lines[0]["msg"] != "backend readmitted" || lines[0]["failed_probes"] != 3.0 {
			t.Errorf("log: %s; want one line, backend readmitted with failed_probes 3", logs.String())
		}

		// On probation: one failure ejects it again, the back-off going on
		// from where it was (4s, the cap); a success would have ended it.
		ej, until := b.RecordFailure(time.Now())
		if !ej || time.Until(until) != 4*time.Second || b.FailedProbes() != 0 {
			t.Errorf("a failure on probation: ejected %v for %v, %d failed probes; want true, 4s, 0", ej, time.Until(until), b.FailedProbes())
		}
		b.RecordSuccess(time.Now())
		if !b.Healthy() || b.ConsecutiveFailures() != 0 {
			t.Errorf("after a success: healthy %v, failures %d", b.Healthy(), b.ConsecutiveFailures())
		}
	})
}

// TestHealthTimeoutWhileAnswering: a health check that times out does not
// take out a backend that answered a request (headers below 500) within
// the last interval and timeout (a server saturated by its streams answers
// its health path late); without such an answer it does, and a refusal by
// status does whatever the traffic.
func TestHealthTimeoutWhileAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var status atomic.Int64 // 0: hang past the timeout
		var net testutil.Network
		url := net.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s := status.Load(); s != 0 {
				w.WriteHeader(int(s))
				return
			}
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
		}))
		p, err := NewPool([]config.Backend{{Name: "a", URL: url, Kind: KindOpenAI, Weight: 1}}, config.Default().Health, config.Default().Balancer.LatencyDecay)
		if err != nil {
			t.Fatal(err)
		}
		b := p.Backends()[0]
		c := &Checker{Pool: p, Client: net.Client(), Path: "/health", Interval: 5 * time.Second, Timeout: 2 * time.Second}

		// Answering: a request answered a second ago.
		b.Answered(time.Now())
		time.Sleep(time.Second)
		c.CheckAll(t.Context())
		if !b.Healthy() {
			t.Fatal("a backend answering requests was taken out by a health check that timed out")
		}
		// An error status takes it out, answering or not.
		status.Store(http.StatusServiceUnavailable)
		b.Answered(time.Now())
		c.CheckAll(t.Context())
		if b.Healthy() {
			t.Fatal("a health path answering 503 left the backend in")
		}
		status.Store(http.StatusOK)
		c.CheckAll(t.Context())
		if !b.Healthy() {
			t.Fatal("a passing check did not bring the backend back")
		}
		// No answer for longer than interval + timeout: a timeout counts.
		status.Store(0)
		time.Sleep(8 * time.Second)
		c.CheckAll(t.Context())
		if b.Healthy() {
			t.Fatal("a health check that timed out, with no recent answer, left the backend in")
		}
	})
}
