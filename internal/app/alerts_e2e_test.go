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

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/test/alertmanagertest"
)

// alertScenario is a gateway in front of one simulator of model "m",
// alerting to a real Alertmanager every period, with analyzers.interval
// left at its default (15 s, longer than the period: the signals are
// evaluated every alert period).
//
// Its bounds are in alert periods evaluated (the pipeline's count), not in
// wall time: a machine too busy to evaluate on time makes an alert later
// in seconds, not in periods. Delivery to Alertmanager, which no period
// bounds, is waited for as an event.
type alertScenario struct {
	t       *testing.T
	am      *alertmanagertest.Alertmanager
	sim     *sim.Server
	be      *httptest.Server
	url     string
	period  time.Duration
	periods func() int64 // alert periods evaluated so far
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
	a, url, _ := serveApp(t, cfg)
	return &alertScenario{t: t, am: am, sim: s, be: be, url: url, period: period, periods: a.pipeline.AlertPeriods}
}

// load sends streamed chat requests from n clients, at most perPeriod in
// an alert period, until stop is closed.
func (s *alertScenario) load(n, perPeriod int, stop <-chan struct{}) *sync.WaitGroup {
	return s.pace(n, perPeriod, stop, func(w, i int) string {
		return fmt.Sprintf(`{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"w%d q%d"}]}`, w, i)
	})
}

// pace sends the chat requests that body makes (for client w's i-th
// request) from n clients until stop is closed. The pipeline's count of
// alert periods paces them: each period evaluated releases perPeriod
// requests, so that a period holds as much traffic however fast or slow
// the machine, and a backend that fails at once is not flooded.
func (s *alertScenario) pace(n, perPeriod int, stop <-chan struct{}, body func(w, i int) string) *sync.WaitGroup {
	var wg sync.WaitGroup
	budget := make(chan struct{}, perPeriod)
	wg.Go(func() {
		for period := int64(-1); ; {
			if p := s.periods(); p != period {
				period = p
				for full := false; !full; { // top the budget up to perPeriod
					select {
					case budget <- struct{}{}:
					default:
						full = true
					}
				}
			}
			stopped := false
			testutil.Poll(s.period, s.period/20, func() bool {
				select {
				case <-stop:
					stopped = true
				default:
				}
				return stopped || s.periods() != period
			})
			if stopped {
				return
			}
		}
	})
	for w := range n {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-budget:
				}
				resp, err := http.Post(s.url+"/v1/chat/completions", "application/json", strings.NewReader(body(w, i)))
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	return &wg
}

// waitPeriods waits until n more alert periods have been evaluated.
func (s *alertScenario) waitPeriods(n int64) {
	s.t.Helper()
	want := s.periods() + n
	// Only a hang guard: the evaluations come every period, late ones
	// later, and the test waits for them however late.
	guard := time.Duration(10*n)*s.period + time.Minute
	if !testutil.Poll(guard, s.period/10, func() bool { return s.periods() >= want }) {
		s.t.Fatalf("%d of %d alert periods evaluated after %v", s.periods()-want+n, n, guard)
	}
}

// fires waits for the gateway's alert named name, with labels that include
// want, to fire, and fails the test when the pipeline has evaluated
// periods alert periods since it had evaluated since and the alert is
// still not firing. It returns the alert, and the alert periods it took.
func (s *alertScenario) fires(name string, want map[string]string, since, periods int64) (vigilAlert, int64) {
	s.t.Helper()
	var got vigilAlert
	var took int64
	notFiring := func(done int64) {
		s.t.Helper()
		s.t.Fatalf("%s%v not firing after %d alert periods; the gateway's alerts: %s", name, want, done-since, s.adminAlerts())
	}
	guard := time.Duration(10*periods)*s.period + time.Minute
	if !testutil.Poll(guard, s.period/10, func() bool {
		done := s.periods() // before the alerts are read: they show these evaluations at least
		for _, a := range s.vigilAlerts(name, want) {
			if a.State == "firing" {
				got, took = a, done-since
				return true
			}
		}
		if done-since >= periods {
			notFiring(done)
		}
		return false
	}) {
		notFiring(s.periods())
	}
	return got, took
}

// delivered waits for an alert named name whose labels include want to
// reach Alertmanager, and returns its labels there.
func (s *alertScenario) delivered(name string, want map[string]string) map[string]any {
	s.t.Helper()
	var got map[string]any
	testutil.WaitFor(s.t, name+" in Alertmanager", func() bool {
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
				got = l
				return true
			}
		}
		return false
	})
	return got
}

// TestAlertsIncident (a): 16 alert periods (2 s) of normal traffic, then
// the backend answers with a 600 ms TTFT and 30 % HTTP 500s. Within 10
// periods the latency alert fires against a threshold learnt in the normal
// phase, and an error-rate alert with the backend's labels.
func TestAlertsIncident(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a minute of traffic")
	}
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 20*time.Millisecond, time.Millisecond
	const period = 2 * time.Second
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(4, 200, stop)
	defer func() { close(stop); wg.Wait() }()
	s.waitPeriods(16)
	k.TTFT, k.ErrorRate = 600*time.Millisecond, 0.3
	s.sim.SetKnobs(k)
	incident := s.periods()

	const limit = 10 // alert periods
	want := map[string]string{"backend": "a", "model": "m"}
	_, took := s.fires("VigilErrorRate", want, incident, limit)
	l := s.delivered("VigilErrorRate", want)
	for _, k := range []string{"alertname", "severity", "signal", "backend", "model"} {
		if _, ok := l[k]; !ok {
			t.Errorf("error alert lacks label %q: %v", k, l)
		}
	}
	t.Logf("error-rate alert after %d alert periods: %v", took, l)
	a, took := s.fires("VigilLatencyTTFT", nil, incident, limit)
	l = s.delivered("VigilLatencyTTFT", nil)
	t.Logf("TTFT alert after %d alert periods: %v", took, l)
	// Learnt in the normal phase: below 600 ms, which any P95 of the
	// incident's is above. Not nearer the normal TTFT (20 ms): on a busy
	// machine the gateway measures the normal phase slower (up to 250 ms
	// seen), as clients do.
	if a.ThresholdSource != "adaptive" || !(a.Threshold > 0 && a.Threshold < 600) {
		t.Errorf("TTFT alert %+v: want an adaptive threshold learnt in the normal phase (TTFT 20 ms), below the incident's 600 ms", a)
	}
	t.Logf("/admin/alerts: TTFT P95 %.1f ms against %.1f ms (%s)", a.Value, a.Threshold, a.ThresholdSource)
}

// vigilAlert is an alert as GET /admin/alerts shows it.
type vigilAlert struct {
	Name            string
	State           string
	Labels          map[string]string
	Value           float64
	Threshold       float64
	ThresholdSource string `json:"threshold_source"`
}

// adminAlerts returns GET /admin/alerts' body.
func (s *alertScenario) adminAlerts() []byte {
	s.t.Helper()
	code, body := testutil.Get(s.t, s.url+"/admin/alerts")
	if code != http.StatusOK {
		s.t.Fatalf("GET /admin/alerts: %d %s", code, body)
	}
	return body
}

// vigilAlerts returns the gateway's own view of the alerts named name
// whose labels include want (GET /admin/alerts).
func (s *alertScenario) vigilAlerts(name string, want map[string]string) []vigilAlert {
	s.t.Helper()
	var all []vigilAlert
	if err := json.Unmarshal(s.adminAlerts(), &all); err != nil {
		s.t.Fatal(err)
	}
	var out []vigilAlert
	for _, a := range all {
		ok := a.Name == name
		for k, v := range want {
			ok = ok && a.Labels[k] == v
		}
		if ok {
			out = append(out, a)
		}
	}
	return out
}

// TestAlertsBackendDies (b): a gateway whose only backend dies fires an
// error-rate alert within 10 alert periods.
func TestAlertsBackendDies(t *testing.T) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	const period = time.Second
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(2, 200, stop)
	defer func() { close(stop); wg.Wait() }()
	s.waitPeriods(5)
	s.be.CloseClientConnections()
	s.be.Close()
	died := s.periods()
	want := map[string]string{"model": "m"}
	_, took := s.fires("VigilErrorRate", want, died, 10)
	l := s.delivered("VigilErrorRate", want)
	t.Logf("error-rate alert %d alert periods after the backend died: %v", took, l)
}

// TestAlertsNewDeployment (c): a brand-new deployment (no history at all)
// whose backend fails half the requests alerts within 5 alert periods, on
// the cold-start threshold.
func TestAlertsNewDeployment(t *testing.T) {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL, k.ErrorRate = 0, 0, 0.5
	const period = time.Second
	s := newAlertScenario(t, period, k)
	stop := make(chan struct{})
	wg := s.load(2, 200, stop)
	defer func() { close(stop); wg.Wait() }()
	start := s.periods()
	// Passive ejection (3 failures in a row) turns part of the traffic into
	// the gateway's own 503s: the backend's series or the model's fires
	// first, whichever holds more failures.
	want := map[string]string{"model": "m"}
	a, took := s.fires("VigilErrorRate", want, start, 5)
	l := s.delivered("VigilErrorRate", want)
	t.Logf("error-rate alert %d alert periods after the first request: %v", took, l)
	if a.ThresholdSource != "cold_start" || a.Threshold != 0.05 {
		t.Errorf("error-rate alert %+v, want the cold-start threshold 0.05", a)
	}
}
