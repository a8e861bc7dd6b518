package alertmanagertest_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/test/alertmanagertest"
)

// waitAlerts polls until Alertmanager lists n alerts or timeout passes.
func waitAlerts(t *testing.T, am *alertmanagertest.Alertmanager, n int, timeout time.Duration) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := am.Alerts(t)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestNotifierSendsOneAlert(t *testing.T) {
	am := alertmanagertest.Start(t)
	now := time.Now().UTC().Truncate(time.Second)
	n := alert.Notification{
		Labels:      map[string]string{"alertname": "VigilLatencyTTFT", "severity": "warning", "signal": "latency", "backend": "a", "model": "llama"},
		Annotations: map[string]string{"summary": "TTFT P95 above its threshold", "description": "d", "dashboard": "http://vigil/dashboard"},
		StartsAt:    now, EndsAt: now.Add(time.Hour), GeneratorURL: "http://vigil/dashboard",
	}
	if err := (&alert.AlertmanagerNotifier{URL: am.URL()}).Notify(context.Background(), []alert.Notification{n}); err != nil {
		t.Fatal(err)
	}
	got := waitAlerts(t, am, 1, testutil.WaitDeadline)
	if len(got) != 1 {
		t.Fatalf("alertmanager has %d alerts, want 1: %v", len(got), got)
	}
	labels := map[string]any{"alertname": "VigilLatencyTTFT", "severity": "warning", "signal": "latency", "backend": "a", "model": "llama"}
	if d := cmp.Diff(labels, got[0]["labels"]); d != "" {
		t.Errorf("labels (-want +got):\n%s", d)
	}
	if st, _ := got[0]["status"].(map[string]any); st["state"] != "active" {
		t.Errorf("status %v, want active", got[0]["status"])
	}
}

// counting counts the notifications passed to the Alertmanager notifier.
type counting struct {
	alert.AlertmanagerNotifier
	n atomic.Int64
}

func (c *counting) Notify(ctx context.Context, ns []alert.Notification) error {
	c.n.Add(int64(len(ns)))
	return c.AlertmanagerNotifier.Notify(ctx, ns)
}

func TestTwoReplicasNotifyOnce(t *testing.T) {
	am := alertmanagertest.Start(t)
	store := state.NewMemory()
	log := alert.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The engines run on an accelerated clock that ends near now, so that
	// the notification is current for Alertmanager.
	var mu sync.Mutex
	clk := time.Now().Add(-15 * time.Minute)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	cfg := alert.Config{Fixed: map[string]float64{alert.RuleErrorRate: 0.05}, DashboardURL: "http://vigil/dashboard"}
	var notifiers []*counting
	var engines []*alert.Engine
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, owner := range []string{"replica-a", "replica-b"} {
		n := &counting{AlertmanagerNotifier: alert.AlertmanagerNotifier{URL: am.URL()}}
		e := alert.NewEngine(cfg, store, now, n, log, alert.WithLeader(alert.Leader{Store: store, Owner: owner}))
		notifiers, engines = append(notifiers, n), append(engines, e)
		wg.Go(func() { e.Run(ctx) })
	}
	for range 4 { // the same condition on both, 4 periods: fires once at the 3rd
		rate := 0.2
		v := alert.Values(alert.Signals{ErrorRate: &rate, Labels: map[string]string{"backend": "a", "model": "llama"}})
		for _, e := range engines {
			e.Observe(ctx, v)
		}
		mu.Lock()
		clk = clk.Add(5 * time.Minute)
		mu.Unlock()
	}
	waitAlerts(t, am, 1, testutil.WaitDeadline)
	// Run delivers what it holds before it returns: once both have
	// returned, a duplicate would have been sent.
	cancel()
	wg.Wait()
	got := am.Alerts(t)
	a, b := notifiers[0].n.Load(), notifiers[1].n.Load()
	t.Logf("notifier calls: replica-a %d, replica-b %d; alertmanager alerts %d", a, b, len(got))
	// One replica sends. It may send its notification twice: a delivery
	// that timed out on a loaded machine is retried (and Alertmanager
	// keeps one alert); the other replica must send none.
	if (a == 0) == (b == 0) || len(got) != 1 {
		t.Fatalf("replica-a sent %d notifications, replica-b %d, alertmanager has %d alerts; want one replica only, and 1 alert", a, b, len(got))
	}
	if l, _ := got[0]["labels"].(map[string]any); l["alertname"] != "VigilErrorRate" || l["backend"] != "a" {
		t.Errorf("labels %v", got[0]["labels"])
	}
}
