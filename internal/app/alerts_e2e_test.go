package app

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/test/alertmanagertest"
)

// alertScenario is a gateway in front of one simulator of model "m",
// alerting to a real Alertmanager every period, with analyzers.interval
// left at its default (15 s, longer than the period: the signals are
// evaluated every alert period).
type alertScenario struct {
	t      *testing.T
	am     *alertmanagertest.Alertmanager
	sim    *sim.Server
	be     *httptest.Server
	url    string
	period time.Duration
}

func newAlertScenario(t *testing.T, period time.Duration, k sim.Knobs) *alertScenario {
	am := alertmanagertest.Start(t)
	s := sim.New(sim.Options{Model: "m", Seed: 1, Knobs: k})
	be := httptest.NewServer(s.Handler())
	t.Cleanup(be.Close)
	cfg := testConfig(be.URL)
	cfg.Backends[0].Models = []string{"m"}
	cfg.Alerts.AlertmanagerURL, cfg.Alerts.Period = am.URL(), period
	// Windows of a few periods, so that the P95s follow the traffic.
	cfg.Analyzers.Bucket, cfg.Analyzers.Window, cfg.Analyzers.MinRequests = time.Second, 10*time.Second, 20
	if err := cfg.ValidateServe(); err != nil {
		t.Fatal(err)
	}
	_, url, _ := serveApp(t, cfg)
	return &alertScenario{t: t, am: am, sim: s, be: be, url: url, period: period}
}

// load sends streamed chat requests from n clients until stop is closed.
func (s *alertScenario) load(n int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"w%d q%d"}]}`, w, i)
				resp, err := http.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				time.Sleep(5 * time.Millisecond)
			}
		})
	}
	return &wg
}

// waitAlert waits up to limit for an alert named name whose labels include
// want to reach Alertmanager; it returns the alert's labels and how long
// it took.
func (s *alertScenario) waitAlert(name string, want map[string]string, limit time.Duration) (map[string]any, time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < limit {
		for _, a := range s.am.Alerts(s.t) {
			l, _ := a["labels"].(map[string]any)
			if l["alertname"] != name {
				continue
			}
			ok := true
			for k, v := range want {
				ok = ok && l[k] == v
			}
			if ok {
				return l, time.Since(start), true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, limit, false
}

// TestAlertsIncident (issue 13, a): 32 s of normal traffic at a 2 s alert
// period, then the backend answers with a 600 ms TTFT and 30 % HTTP 500s.
// Within 10 periods the latency alert fires against a threshold learnt in
// the normal phase, and an error-rate alert with the backend's labels.
func TestAlertsIncident(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a minute of traffic")
	}
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 20*time.Millisecond, time.Millisecond
	const period = 2 * time.Second
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(4, stop)
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(32 * time.Second)
	k.TTFT, k.ErrorRate = 600*time.Millisecond, 0.3
	s.sim.SetKnobs(k)

	limit := 10*period + time.Second // ten periods, and a second to deliver
	l, took, ok := s.waitAlert("VigilErrorRate", map[string]string{"backend": "a", "model": "m"}, limit)
	if !ok {
		t.Fatalf("no VigilErrorRate alert for backend a within %v; Alertmanager holds %v", limit, s.am.Alerts(t))
	}
	for _, k := range []string{"alertname", "severity", "signal", "backend", "model"} {
		if _, ok := l[k]; !ok {
			t.Errorf("error alert lacks label %q: %v", k, l)
		}
	}
	t.Logf("error-rate alert after %v: %v", took.Round(100*time.Millisecond), l)
	l, took2, ok := s.waitAlert("VigilLatencyTTFT", nil, limit-took)
	if !ok {
		t.Fatalf("no VigilLatencyTTFT alert within %v; Alertmanager holds %v", limit, s.am.Alerts(t))
	}
	t.Logf("TTFT alert after %v: %v", (took + took2).Round(100*time.Millisecond), l)
	a := s.vigilAlert("VigilLatencyTTFT")
	if a.ThresholdSource != "adaptive" || !(a.Threshold > 0 && a.Threshold < 300) {
		t.Errorf("TTFT alert %+v: want an adaptive threshold learnt in the normal phase (TTFT 20 ms), far below 600 ms", a)
	}
	t.Logf("/admin/alerts: TTFT P95 %.1f ms against %.1f ms (%s)", a.Value, a.Threshold, a.ThresholdSource)
}

// vigilAlert returns the gateway's own view of the alert named name
// (GET /admin/alerts), failing the test without one.
func (s *alertScenario) vigilAlert(name string) (out struct {
	Name            string
	State           string
	Value           float64
	Threshold       float64
	ThresholdSource string `json:"threshold_source"`
}) {
	s.t.Helper()
	resp, err := http.Get(s.url + "/admin/alerts")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var all []json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		s.t.Fatal(err)
	}
	for _, raw := range all {
		if err := json.Unmarshal(raw, &out); err == nil && out.Name == name {
			return out
		}
	}
	s.t.Fatalf("/admin/alerts has no %s", name)
	return out
}

// TestAlertsBackendDies (issue 13, b): a gateway whose only backend dies
// fires an error-rate alert.
func TestAlertsBackendDies(t *testing.T) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	const period = time.Second
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(2, stop)
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(5 * time.Second)
	s.be.CloseClientConnections()
	s.be.Close()
	limit := 10*period + time.Second
	l, took, ok := s.waitAlert("VigilErrorRate", map[string]string{"model": "m"}, limit)
	if !ok {
		t.Fatalf("no VigilErrorRate alert within %v of the backend's death; Alertmanager holds %v", limit, s.am.Alerts(t))
	}
	t.Logf("error-rate alert %v after the backend died: %v", took.Round(100*time.Millisecond), l)
}

// TestAlertsNewDeployment (issue 13, c): a brand-new deployment (no
// history at all) whose backend fails half the requests alerts within 5
// periods, on the cold-start threshold.
func TestAlertsNewDeployment(t *testing.T) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.ErrorRate = 0, 0, 0.5
	const period = time.Second
	start := time.Now()
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(2, stop)
	defer func() { close(stop); wg.Wait() }()
	limit := 5*period + time.Second
	// Passive ejection (3 failures in a row) turns part of the traffic into
	// the gateway's own 503s: the backend's series or the model's fires
	// first, whichever holds more failures.
	l, took, ok := s.waitAlert("VigilErrorRate", map[string]string{"model": "m"}, limit)
	if !ok {
		t.Fatalf("no VigilErrorRate alert within %v; Alertmanager holds %v", limit, s.am.Alerts(t))
	}
	t.Logf("error-rate alert %v after the first request (%v after start): %v", took.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond), l)
	if a := s.vigilAlert("VigilErrorRate"); a.ThresholdSource != "cold_start" || a.Threshold != 0.05 {
		t.Errorf("error-rate alert %+v, want the cold-start threshold 0.05", a)
	}
}
