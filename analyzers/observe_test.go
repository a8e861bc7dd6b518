package analyzers

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// TestSample: the gap metrics come from the gaps the gateway measured and
// only from them; tokens per second counts the larger of the reported and
// the parsed token counts over the time after the first token.
func TestSample(t *testing.T) {
	nan := math.NaN()
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	gaps := exchange.Gaps{Count: 31, P50: ms(20), P95: ms(30), Max: 2 * time.Second}
	tests := []struct {
		name   string
		stream bool
		resp   exchange.Response
		sum    logprob.Summary
		want   [latency.NumMetrics]float64
		wantLP float64
	}{
		{
			name: "stream with gaps", stream: true,
			resp: exchange.Response{Latency: 3 * time.Second, TTFT: 500 * time.Millisecond, CompletionTokens: 32, Gaps: gaps},
			want: [latency.NumMetrics]float64{latency.E2E: 3, latency.TTFT: 0.5, latency.ITL: 0.02, latency.ITLP95: 0.03,
				latency.Stall: 2, latency.TPS: 32 / 2.5},
			wantLP: nan,
		},
		{
			// No (total − TTFT)/(tokens − 1) estimate when no gap was
			// measured.
			name: "stream of one content chunk", stream: true,
			resp: exchange.Response{Latency: time.Second, TTFT: 800 * time.Millisecond, CompletionTokens: 4},
			want: [latency.NumMetrics]float64{latency.E2E: 1, latency.TTFT: 0.8, latency.ITL: nan, latency.ITLP95: nan,
				latency.Stall: nan, latency.TPS: 4 / 0.2},
			wantLP: nan,
		},
		{
			name: "stream counted from logprobs", stream: true,
			resp: exchange.Response{Latency: 2 * time.Second, TTFT: time.Second, CompletionTokens: 5, Gaps: gaps},
			sum:  logprob.Summary{Tokens: 10, OutputTokens: 10, MeanLogprob: -0.3},
			want: [latency.NumMetrics]float64{latency.E2E: 2, latency.TTFT: 1, latency.ITL: 0.02, latency.ITLP95: 0.03,
				latency.Stall: 2, latency.TPS: 10},
			wantLP: -0.3,
		},
		{
			name: "stream without tokens", stream: true,
			resp: exchange.Response{Latency: time.Second, TTFT: 900 * time.Millisecond},
			want: [latency.NumMetrics]float64{latency.E2E: 1, latency.TTFT: 0.9, latency.ITL: nan, latency.ITLP95: nan,
				latency.Stall: nan, latency.TPS: nan},
			wantLP: nan,
		},
		{
			name: "not streamed",
			resp: exchange.Response{Latency: 2 * time.Second, CompletionTokens: 40},
			want: [latency.NumMetrics]float64{latency.E2E: 2, latency.TTFT: nan, latency.ITL: nan, latency.ITLP95: nan,
				latency.Stall: nan, latency.TPS: 20},
			wantLP: nan,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &exchange.Request{Operation: exchange.OpChat, Stream: tt.stream}
			got := sample(r, &tt.resp, &tt.sum)
			approx := cmpopts.EquateApprox(0, 1e-9)
			if d := cmp.Diff(tt.want, got.Values, approx, cmpopts.EquateNaNs()); d != "" {
				t.Errorf("values (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantLP, got.MeanLogprob, cmpopts.EquateNaNs()); d != "" {
				t.Errorf("mean logprob (-want +got):\n%s", d)
			}
		})
	}
}

// TestPipelineStall: through the pipeline, a stream that paused once for
// 2 s among streams whose gaps are 20 ms counts as a stall anomaly
// (vigil_latency_anomalies_total{metric="stall"}), and not as an ITL one.
func TestPipelineStall(t *testing.T) {
	cfg := config.Default().Analyzers
	cfg.Drift.Enabled = false
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	p, err := New(Options{Config: cfg, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	// Gaps with a few percent of jitter, deterministic.
	jitter := func(i int, d time.Duration) time.Duration {
		return d + time.Duration(i%7-3)*d/50
	}
	send := func(i int, stall time.Duration) {
		gaps := exchange.Gaps{Count: 31, P50: jitter(i, 20*time.Millisecond), P95: jitter(i+3, 26*time.Millisecond),
			Max: jitter(i+5, 40*time.Millisecond)}
		lat := 200*time.Millisecond + 31*gaps.P50
		if stall > 0 {
			gaps.Max = stall
			lat += stall
		}
		r := &exchange.Request{Route: "/v1/chat/completions", Operation: exchange.OpChat, Model: "m", Backend: "a",
			Stream: true, Start: now.Add(-lat)}
		p.OnRequest(r)
		p.OnResponse(r, &exchange.Response{Status: 200, Latency: lat, TTFT: jitter(i, 200*time.Millisecond),
			CompletionTokens: 32, UsageSource: exchange.UsageReported, Gaps: gaps})
		now = now.Add(200 * time.Millisecond)
	}
	for i := range 2 * cfg.MinRequests {
		send(i, 0)
	}
	p.Evaluate() // sets the anomaly limits
	count := func(metric string) float64 { return testutil.ToFloat64(p.m.latencyAnomalies.WithLabelValues(metric)) }
	stalls, itls := count("stall"), count("itl")
	send(0, 2*time.Second)
	if got := count("stall") - stalls; got != 1 {
		t.Errorf("stall anomalies +%v, want +1", got)
	}
	if got := count("itl") - itls; got != 0 {
		t.Errorf("itl anomalies +%v, want 0", got)
	}
	if st := p.Evaluate().Latency.Metrics["stall"]; !(st.AnomalousShare > 0) {
		t.Errorf("stall anomalous share %v in the window, want the stall counted", float64(st.AnomalousShare))
	}
}

// TestDriftCountsPromptsWhenSent: a prompt counts for input drift when its
// request is sent, so that a backend hanging on the prompts routed to it
// (alike prompts share a backend under the prefix strategy) is not taken
// for clients changing what they send; clients that stop sending those
// prompts are.
func TestDriftCountsPromptsWhenSent(t *testing.T) {
	const short = `{"model":"m","messages":[{"role":"user","content":"hi %d"}]}`
	const long = `{"model":"m","max_tokens":512,"messages":[{"role":"system","content":"You review contracts for the legal team and cite the clause."},` +
		`{"role":"user","content":"Summarize clause %d of the supply agreement in plain words, with its risks"}]}`
	drifted := func(sendLong bool) []string {
		now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		p, err := New(Options{Config: config.Default().Analyzers, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		send := func(body []byte, answer bool) {
			r := &exchange.Request{Operation: exchange.OpChat, Model: "m", Backend: "a", Start: now, Body: body}
			p.OnPrompt(r.Start, r.Operation, r.Body)
			p.OnRequest(r)
			if answer {
				p.OnResponse(r, &exchange.Response{Status: 200, Latency: time.Second, CompletionTokens: 8})
			}
		}
		// An hour and a quarter of both kinds, a second apart, all
		// answered; then five minutes in which the long ones are sent and
		// never answered, or not sent.
		for i := range 75*60 + 5*60 {
			incident := i >= 75*60
			send(fmt.Appendf(nil, short, i), true)
			if !incident || sendLong {
				send(fmt.Appendf(nil, long, i), !incident)
			}
			now = now.Add(time.Second)
		}
		var names []string
		for _, f := range p.Evaluate().Drift.Features {
			if f.Drift {
				names = append(names, f.Name+"/"+f.Test)
			}
		}
		return names
	}
	if got := drifted(true); len(got) > 0 {
		t.Errorf("long prompts sent and not answered (a backend hangs): drift in %v, want none", got)
	}
	if got := drifted(false); len(got) == 0 {
		t.Error("long prompts no longer sent: no drift")
	}
}
