package app

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// TestLatencyAndConfidenceEndToEnd: streams with logprobs go through a real
// gateway to a simulator; the confidence and latency signals read them; the
// simulator's TTFT is raised through its admin endpoint and the latency
// signal turns anomalous on ttft. The step is 10×: wall-clock jitter on a
// loaded two-core machine (and -race) inflates σ (a CI run with other
// suites beside it measured 40 ms TTFTs with a mean + 2σ limit of 275 ms),
// so that mean + 2σ cannot promise to catch a small step here; the
// detection of 1.5× under controlled jitter is measured in
// analyzers/latency (TestTTFTDetection).
func TestLatencyAndConfidenceEndToEnd(t *testing.T) {
	backendURL := simBackend(t, func(k *sim.Knobs) {
		k.TTFT, k.ITL, k.OutputTokens = 40*time.Millisecond, time.Millisecond, 8
	})
	cfg := testConfig(backendURL)
	an := &cfg.Analyzers
	an.Bucket, an.MinRequests, an.Window, an.Consecutive = time.Second, 100, time.Hour, 1
	// Jitter alone once put 14 % of an unchanged phase's TTFTs past mean +
	// 2σ against 3 % in the reference (CI, 2026-12-01): a rise of 0.11, just
	// past the default min_rise 0.1. TTFT ×10 puts nearly every response
	// past the limit, so a 0.3 rise still tells the change, not the noise.
	an.Latency.MinRise = 0.3
	a, gwURL := startApp(t, cfg)

	send := func(n int) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; i < n; i += 4 {
					body := fmt.Sprintf(`{"model":"m","stream":true,"logprobs":true,"top_logprobs":3,"messages":[{"role":"user","content":"q%d"}]}`, i)
					resp, err := http.Post(gwURL+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	// Bucket boundaries follow the wall clock (1 s here): a phase sends in
	// two halves a bucket apart, so that each half has a bucket of its own.
	var sent int64
	half := func() {
		send(130)
		sent += 130
		nextBucket(t, a, sent, an.Bucket)
	}
	phase := func() { half(); half() }
	// Anomalies are counted against the limits of the latest evaluation:
	// a first phase sets them, a second is checked against them.
	phase()
	if lim := a.pipeline.Evaluate().Latency.Metrics["ttft"].Limit; math.IsNaN(float64(lim)) {
		t.Fatal("no anomaly limits after the first phase")
	}
	phase()
	s := a.pipeline.Evaluate()
	if st := s.Latency.State; st != latency.StateOK {
		t.Fatalf("latency state %q before the change, want ok: %+v", st, s.Latency)
	}
	d := s.Confidence
	if d.Responses < 100 || !(float64(d.MeanLogprob) < 0) {
		t.Errorf("confidence from streamed logprobs: %+v", d)
	}

	req, _ := http.NewRequest(http.MethodPatch, backendURL+"/sim/knobs", strings.NewReader(`{"ttft":"400ms"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("PATCH /sim/knobs: %v %v", err, resp)
	}
	resp.Body.Close()
	send(130)
	var last latency.Result
	if !testutil.Poll(testutil.WaitDeadline, 20*time.Millisecond, func() bool {
		last = *a.pipeline.Evaluate().Latency
		return last.State == latency.StateAnomalous
	}) {
		st := last.Metrics["ttft"]
		t.Fatalf("latency not anomalous after TTFT x10: ttft limit %.1f ms, p50 %.1f ms, anomalous share %.2f (reference %.2f)",
			float64(st.Limit), float64(st.P50), float64(st.AnomalousShare), float64(st.RefAnomalousShare))
	}
	sig, err := http.Get(gwURL + "/admin/signals")
	if err != nil {
		t.Fatal(err)
	}
	defer sig.Body.Close()
	var out struct {
		Latency struct {
			State   string
			TTFT    struct{ P50 float64 } `json:"ttft_ms"`
			Metrics map[string]struct{ Anomalous bool }
		}
	}
	if err := json.NewDecoder(sig.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if out.Latency.State != "anomalous" || !out.Latency.Metrics["ttft"].Anomalous || out.Latency.TTFT.P50 < 110 {
		t.Errorf("/admin/signals latency: %+v", out.Latency)
	}
}
