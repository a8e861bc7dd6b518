package analyzers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
)

// TestSharing: two pipelines over one store see each other's responses
// exactly once, however often they flush, and a baseline pinned on one is
// pinned on the other.
func TestSharing(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	cfg := config.Default().Analyzers
	cfg.MinRequests, cfg.Window = 1000, time.Hour
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: cfg, Now: func() time.Time { return now },
			Sharing: &Sharing{Store: store, Replica: replica}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	feed := func(p *Pipeline, n int) {
		for i := range n {
			body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"q%d"}]}`, i)
			r := &exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: now, Body: body}
			p.OnRequest(r)
			p.OnResponse(r, &exchange.Response{Status: 200, Latency: 300 * time.Millisecond, CompletionTokens: 10})
			now = now.Add(100 * time.Millisecond)
		}
	}
	responses := func(p *Pipeline) int64 { return p.Evaluate().Latency.Responses }
	ctx := context.Background()
	feed(a, 30)
	feed(b, 20)
	for range 3 { // repeated flushes must not count twice
		a.Flush(ctx)
		b.Flush(ctx)
	}
	if ra, rb := responses(a), responses(b); ra != 50 || rb != 50 {
		t.Errorf("merged responses: a %d, b %d, want 50 each", ra, rb)
	}
	feed(a, 5)
	a.Flush(ctx)
	b.Flush(ctx)
	if rb := responses(b); rb != 55 {
		t.Errorf("b sees %d responses after a served 5 more, want 55", rb)
	}
	// A replica without traffic of its own (new, or one the load balancer
	// skips) sees the others' windows too.
	c := mk("c")
	c.Flush(ctx)
	if rc := responses(c); rc != 55 {
		t.Errorf("idle replica c sees %d responses, want 55", rc)
	}

	a.PinBaseline(ctx) // drift refuses (fewer than min_requests prompts); the others pin
	b.Flush(ctx)
	if ref := b.Evaluate().Latency.Reference; ref != "pinned" {
		t.Errorf("b's latency reference %q after a pinned, want pinned", ref)
	}
}

// TestSharedCalibration: feedback about a response served by replica a
// reaches replica b; both count the label.
func TestSharedCalibration(t *testing.T) {
	f := newFeeder(t, config.Default().Analyzers, 5) // for its simulator
	store := state.NewMemory()
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: config.Default().Analyzers, Sharing: &Sharing{Store: store, Replica: replica}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	f.p = a
	var r struct{ ID string }
	if err := json.Unmarshal(f.send(), &r); err != nil || r.ID == "" {
		t.Fatalf("response id: %v", err)
	}
	ctx := context.Background()
	a.Flush(ctx)
	if err := b.Feedback(ctx, r.ID, true); err != nil {
		t.Fatalf("feedback on the other replica: %v", err)
	}
	if err := b.Feedback(ctx, "chatcmpl-nope", true); !errors.Is(err, ErrUnknownResponse) {
		t.Errorf("unknown id: %v", err)
	}
	labels := func(p *Pipeline) int { return p.Evaluate().Confidence.Calibration.Labels }
	for range 12 { // labels are read every tenth flush
		b.Flush(ctx)
		a.Flush(ctx)
	}
	if la, lb := labels(a), labels(b); la != 1 || lb != 1 {
		t.Errorf("labels: a %d, b %d, want 1 each", la, lb)
	}
}

// TestSharedErrorRate: the error rate a replica alerts on counts every
// replica's requests.
func TestSharedErrorRate(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	cfg := config.Default()
	cfg.Alerts.Fixed = map[string]float64{alert.RuleErrorRate: 0.1}
	cfg.Alerts.Consecutive = 1
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now },
			Sharing: &Sharing{Store: store, Replica: replica}, Backends: []config.Backend{{Name: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	feed := func(p *Pipeline, n, failed int) {
		for i := range n {
			r := &exchange.Request{Operation: "embeddings", Model: "m", Backend: "x", Start: now}
			resp := &exchange.Response{Status: 200, Latency: 50 * time.Millisecond}
			if i < failed {
				resp.Status, resp.ErrorClass = 503, "upstream_5xx"
			}
			p.OnRequest(r)
			p.OnResponse(r, resp)
		}
	}
	feed(a, 40, 0)
	feed(b, 40, 16) // b alone: 40%; both: 20%
	now = now.Add(time.Minute)
	ctx := context.Background()
	b.Flush(ctx)
	a.Flush(ctx)
	a.ObserveAlerts(ctx)
	var got []alert.Alert
	for _, al := range a.alerts.Alerts() {
		if al.Rule == alert.RuleErrorRate {
			got = append(got, al)
		}
	}
	if len(got) != 1 || float64(got[0].Value) != 0.2 || got[0].Labels["backend"] != "x" {
		t.Errorf("a's error-rate alerts: %+v, want one at 0.2 (16 failures in 80 requests) for backend x", got)
	}
}

// TestErrorRatesOutliveTheirSpan: the error rates' snapshots live in the
// store as long as the longest burn-rate window reads them, so that a
// replica that went away still counts in a 6 h burn rate.
func TestErrorRatesOutliveTheirSpan(t *testing.T) {
	e := newErrorRates(10*time.Second, 6*time.Hour)
	if ttl, every := e.sharing("errors/total"); ttl < 6*time.Hour || every != 1 {
		t.Errorf("sharing = %v, %d; want at least 6h, read every flush", ttl, every)
	}
}
