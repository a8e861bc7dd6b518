package faults

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/alertmanagertest"
	"github.com/vigil-gw/vigil/test/proctest"
	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestAlertmanagerFailing: an alert fires while Alertmanager answers
// HTTP 500 (a tiny server standing in for a broken one behind the same
// proxy), then while the real Alertmanager accepts connections and never
// answers (a blackhole in both directions), then Alertmanager recovers.
// Clients must not notice any of it: delivery runs off the hot path. The
// alert must reach Alertmanager once it recovers: a notification that
// failed with a transient error is sent again, not lost for the 30 minutes
// the alert stays silent.
//
// The alert is made on purpose, apart from the client load: a second
// backend that serves model "d" is dead, and a trickle of requests for
// "d" (not counted with the clients') fires VigilErrorRate{model="d"} on
// the cold-start threshold within a few one-second periods.
func TestAlertmanagerFailing(t *testing.T) {
	t.Parallel()
	am := alertmanagertest.Start(t)
	var refused atomic.Int64
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		refused.Add(1)
		http.Error(w, "broken", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	tp := toxitest.Start(t)
	amAddr := strings.TrimPrefix(am.URL(), "http://")
	px := tp.Proxy(t, "alertmanager", amAddr)
	be := startSim(t)
	dead, err := proctest.FreePorts(1) // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	cfg := baseConfig(backendYAML("a", be.URL)+fmt.Sprintf("  - {name: dead, url: %q, models: [d]}\n", "http://"+dead[0])) +
		fmt.Sprintf("alerts: {alertmanager_url: %q, period: 1s, consecutive: 2}\n", "http://"+px.Addr())
	g := startVigil(t, "gw", cfg)

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, chat(10*time.Second, newClient(g.URL)))
	time.Sleep(2 * time.Second)

	l.setPhase("Alertmanager 500")
	px.SetUpstream(t, broken.Listener.Addr().String())
	stopTrigger := trigger(t, g.URL)
	defer stopTrigger()
	fired := waitFor(t, "VigilErrorRate firing in /admin/alerts", 15*time.Second, func() bool {
		return firing(t, g, "VigilErrorRate")
	})
	// The first delivery, retries included (about 3.5 s), fails.
	waitFor(t, "a failed delivery", 15*time.Second, func() bool {
		return metricSum(g.metrics(t), "vigil_alert_notifications_total", "outcome", "failed") > 0 ||
			metricSum(g.metrics(t), "vigil_alert_notifications_total", "outcome", "retried") > 0
	})
	answered500 := refused.Load()

	l.setPhase("Alertmanager silent")
	px.AddToxic(t, toxitest.Blackhole("in", "upstream"))
	px.AddToxic(t, toxitest.Blackhole("out", "downstream"))
	px.SetUpstream(t, amAddr)
	time.Sleep(4 * time.Second)

	l.setPhase("recovered")
	px.RemoveToxic(t, "in")
	px.RemoveToxic(t, "out")
	recovered := time.Now()
	arrived, ok := time.Duration(0), false
	for time.Since(recovered) < 30*time.Second {
		if inAlertmanager(t, am, "VigilErrorRate", "d") {
			arrived, ok = time.Since(recovered), true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(time.Second) // a little recovered traffic
	l.stop()
	stopTrigger()
	s := report(t, l)
	m := g.metrics(t)
	sent, failed, retried, dropped := metricSum(m, "vigil_alert_notifications_total", "outcome", "sent"),
		metricSum(m, "vigil_alert_notifications_total", "outcome", "failed"),
		metricSum(m, "vigil_alert_notifications_total", "outcome", "retried"),
		metricSum(m, "vigil_alert_notifications_total", "outcome", "dropped")
	t.Logf("alert firing %v after the trigger started; Alertmanager answered 500 to %d posts before it went silent",
		fired.Round(100*time.Millisecond), answered500)
	t.Logf("notifications: %.0f sent, %.0f failed attempts retried, %.0f given up, %.0f dropped (queue full)",
		sent, retried, failed, dropped)
	if ok {
		t.Logf("the alert reached Alertmanager %v after it recovered", arrived.Round(100*time.Millisecond))
	}

	if f := s["Alertmanager 500"].failed + s["Alertmanager silent"].failed + s["recovered"].failed; f != 0 {
		t.Errorf("%d client requests failed with a healthy backend", f)
	}
	// A request that waited on delivery would wait out the notifier's
	// 10 s client timeout: far beyond this.
	for _, ph := range []string{"Alertmanager 500", "Alertmanager silent"} {
		if p99 := s[ph].p99; p99 >= 500*time.Millisecond {
			t.Errorf("P99 while %s: %v: requests wait on alert delivery", ph, p99)
		}
	}
	if !ok {
		t.Errorf("VigilErrorRate{model=\"d\"} did not reach Alertmanager within 30 s of its recovery: the notification was lost; Alertmanager holds %v", am.Alerts(t))
	}
}

// trigger sends requests for model "d", whose only backend is dead, ten a
// second until the returned func is called: they make the error rate that
// fires the alert.
func trigger(t *testing.T, url string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
				strings.NewReader(`{"model":"d","messages":[{"role":"user","content":"hi"}]}`))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }
}

// firing reports whether the gateway lists an alert named name as firing.
func firing(t *testing.T, g *gateway, name string) bool {
	var as []struct {
		Name  string `json:"name"`
		State string `json:"state"`
	}
	g.getJSON(t, "/admin/alerts", &as)
	for _, a := range as {
		if a.Name == name && a.State == "firing" {
			return true
		}
	}
	return false
}

// inAlertmanager reports whether Alertmanager holds the alert name for
// model.
func inAlertmanager(t *testing.T, am *alertmanagertest.Alertmanager, name, model string) bool {
	for _, a := range am.Alerts(t) {
		l, _ := a["labels"].(map[string]any)
		if l["alertname"] == name && l["model"] == model {
			return true
		}
	}
	return false
}
