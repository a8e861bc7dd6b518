package alert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/state"
)

var fastRetry = Retry{Attempts: 4, Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}

func TestAlertmanagerNotifier(t *testing.T) {
	var got []map[string]any
	var path, ctype string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, ctype = r.URL.Path, r.Header.Get("Content-Type")
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &got); err != nil {
			t.Errorf("body %s: %v", b, err)
		}
	}))
	defer srv.Close()
	n := Notification{Labels: map[string]string{"alertname": "VigilLatencyTTFT", "severity": "warning", "signal": "latency", "backend": "a", "model": "m"},
		Annotations: map[string]string{"summary": "s", "description": "d", "dashboard": "http://x/dashboard"},
		StartsAt:    t0, EndsAt: t0.Add(time.Hour), GeneratorURL: "http://x/dashboard"}
	a := &AlertmanagerNotifier{URL: srv.URL + "/", Retry: fastRetry}
	if err := a.Notify(context.Background(), []Notification{n}); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{{
		"labels":      map[string]any{"alertname": "VigilLatencyTTFT", "severity": "warning", "signal": "latency", "backend": "a", "model": "m"},
		"annotations": map[string]any{"summary": "s", "description": "d", "dashboard": "http://x/dashboard"},
		"startsAt":    "2026-11-01T00:00:00Z", "endsAt": "2026-11-01T01:00:00Z", "generatorURL": "http://x/dashboard",
	}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("body (-want +got):\n%s", d)
	}
	if path != "/api/v2/alerts" || ctype != "application/json" {
		t.Errorf("POST %s (%s), want /api/v2/alerts (application/json)", path, ctype)
	}
}

func TestWebhookNotifier(t *testing.T) {
	var got WebhookBody
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	w := &WebhookNotifier{URL: srv.URL, Retry: fastRetry}
	res := Notification{Labels: map[string]string{"alertname": "x"}, StartsAt: t0, EndsAt: t0, resolved: true}
	if err := w.Notify(context.Background(), []Notification{res}); err != nil {
		t.Fatal(err)
	}
	if got.Status != "resolved" || got.Receiver != "vigil" || len(got.Alerts) != 1 || got.Alerts[0].Labels["alertname"] != "x" {
		t.Errorf("body = %+v", got)
	}
}

func TestRetry(t *testing.T) {
	for _, tc := range []struct {
		name     string
		codes    []int // answers in order; then 200
		attempts int32
		ok       bool
	}{
		{"ok", nil, 1, true},
		{"503 then ok", []int{503, 503}, 3, true},
		{"429 then ok", []int{429}, 2, true},
		{"400 is final", []int{400}, 1, false},
		{"gives up", []int{500, 500, 500, 500, 500}, 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if i := int(calls.Add(1)) - 1; i < len(tc.codes) {
					w.WriteHeader(tc.codes[i])
				}
			}))
			defer srv.Close()
			err := (&AlertmanagerNotifier{URL: srv.URL, Retry: fastRetry}).Notify(context.Background(), []Notification{{}})
			if (err == nil) != tc.ok || calls.Load() != tc.attempts {
				t.Errorf("err %v after %d attempts; want ok=%v after %d", err, calls.Load(), tc.ok, tc.attempts)
			}
		})
	}
}

// TestRetryHonoursContext: a back-off ends when the context does. In the
// bubble, promptly means exactly at the deadline.
func TestRetryHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		am := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		n := &AlertmanagerNotifier{URL: "http://am", Client: &http.Client{Transport: testutil.HandlerTransport(am)},
			Retry: Retry{Attempts: 100, Backoff: time.Second}}
		err := n.Notify(ctx, []Notification{{}})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 50*time.Millisecond {
			t.Fatalf("err %v after %v, want the deadline after 50ms", err, time.Since(start))
		}
	})
}

// recorder counts what it is asked to send; block makes it wait for ctx.
type recorder struct {
	mu    sync.Mutex
	got   []Notification
	block bool
	err   error
}

func (r *recorder) Notify(ctx context.Context, ns []Notification) error {
	if r.block {
		<-ctx.Done()
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, ns...)
	return r.err
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// fire makes e fire one alert in the current period of c.
func fire(e *Engine, c *clock, labels map[string]string) {
	for range 3 {
		e.Observe(context.Background(), map[string]Value{RuleErrorRate: {V: 1, Labels: labels}})
		c.t = c.t.Add(5 * time.Minute)
	}
}

// The tests that run Engine.Run do so in a synctest bubble: synctest.Wait
// returns once Run has done all it can (sent, or blocked on its queue or a
// timer), so that they check what was sent, and what was not, without
// sleeping against the machine's speed.

func TestRunDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		c := &clock{t: t0}
		e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, rec, quiet)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- e.Run(ctx) }()
		fire(e, c, nil)
		synctest.Wait()
		cancel()
		<-done
		if rec.count() != 1 || e.Stats().Sent != 1 {
			t.Fatalf("delivered %d, stats %+v; want 1", rec.count(), e.Stats())
		}
		if d := e.Deliveries(); len(d) != 1 || d[0].Outcome != OutcomeSent || d[0].Name != "VigilErrorRate" || d[0].Resolved {
			t.Errorf("deliveries %+v, want one firing VigilErrorRate sent", d)
		}
	})
}

// TestDeliveriesListed: what the engine hands on is listed with its
// outcome, also without a receiver, and the list is bounded.
func TestDeliveriesListed(t *testing.T) {
	c := &clock{t: t0}
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, nil, quiet)
	if d := e.Deliveries(); d == nil || len(d) != 0 {
		t.Fatalf("deliveries before any: %#v, want an empty list", d)
	}
	fire(e, c, nil)
	e.Observe(context.Background(), map[string]Value{RuleErrorRate: {V: 0}})
	d := e.Deliveries()
	if len(d) != 2 || d[0].Outcome != OutcomeNoReceiver || d[0].Resolved || !d[1].Resolved {
		t.Fatalf("deliveries %+v, want a firing and a resolution, no receiver", d)
	}
	for i := range maxDeliveries {
		fire(e, c, map[string]string{"backend": fmt.Sprint(i)})
	}
	if n := len(e.Deliveries()); n != maxDeliveries {
		t.Errorf("%d deliveries kept, want %d", n, maxDeliveries)
	}
}

// TestFailingReceiverNeverBlocksObserve: with the receiver hanging, Observe
// returns at once (in the bubble's time, no time at all) and drops what
// the queue cannot hold. A blocked Observe would deadlock the bubble,
// which fails the test.
func TestFailingReceiverNeverBlocksObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{block: true}
		c := &clock{t: t0}
		e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, rec, quiet, WithQueue(1))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- e.Run(ctx) }()
		start := time.Now()
		for i := range 5 { // five label sets fire: one batch in flight, one queued, the rest dropped
			fire(e, c, map[string]string{"backend": string(rune('a' + i))})
			synctest.Wait() // Run has taken the first batch, and hangs in it
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Observe blocked for %v", d)
		}
		if st := e.Stats(); st.Dropped != 3 {
			t.Errorf("stats %+v, want 3 dropped", st)
		}
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
	})
}

func TestOneSenderAcrossReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := state.NewMemory()
		cfg := Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}
		ra, rb := &recorder{}, &recorder{}
		c := &clock{t: t0}
		a := NewEngine(cfg, store, c.now, ra, quiet, WithLeader(Leader{Store: store, Owner: "a"}))
		b := NewEngine(cfg, store, c.now, rb, quiet, WithLeader(Leader{Store: store, Owner: "b"}))
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, e := range []*Engine{a, b} {
			wg.Go(func() { e.Run(ctx) })
		}
		var returned int
		for range 3 { // both see the same condition, b first
			v := map[string]Value{RuleErrorRate: {V: 1, Labels: map[string]string{"backend": "x"}}}
			returned += len(b.Observe(context.Background(), v)) + len(a.Observe(context.Background(), v))
			c.t = c.t.Add(5 * time.Minute)
		}
		synctest.Wait() // both Runs sent what they had
		cancel()
		wg.Wait()
		if ra.count() != 0 || rb.count() != 1 || returned != 1 {
			t.Fatalf("a sent %d, b sent %d (returned %d); want only b, once", ra.count(), rb.count(), returned)
		}
		// Both list the alert as firing.
		for _, e := range []*Engine{a, b} {
			if got := e.Alerts(); len(got) != 1 || got[0].State != Firing {
				t.Errorf("alerts %+v", got)
			}
		}
	})
}

// failingLeases fails every Acquire.
type failingLeases struct{}

func (failingLeases) Acquire(context.Context, string, string, time.Duration) (bool, error) {
	return false, errors.New("down")
}

func TestLeaseErrorDoesNotSend(t *testing.T) {
	c := &clock{t: t0}
	rec := &recorder{}
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, rec, quiet, WithLeader(Leader{Store: failingLeases{}, Owner: "a"}))
	fire(e, c, nil)
	if got := e.Alerts(); len(got) != 1 || got[0].State != Firing {
		t.Fatalf("alerts %+v, want firing", got)
	}
	if e.Stats().StoreErrors == 0 || len(e.queue) != 0 {
		t.Fatalf("stats %+v, queue %d", e.Stats(), len(e.queue))
	}
}

func TestAlertJSON(t *testing.T) {
	c := &clock{t: t0}
	e := NewEngine(Config{}, nil, c.now, nil, quiet)
	e.Observe(context.Background(), map[string]Value{RuleTTFT: {V: 1e6}}) // no history, no cold start yet: nothing listed
	if got := e.Alerts(); len(got) != 0 {
		t.Fatalf("alerts %+v", got)
	}
	e2 := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, nil, quiet)
	e2.Observe(context.Background(), map[string]Value{RuleErrorRate: {V: 0.5}})
	b, err := json.Marshal(e2.Alerts())
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	json.Unmarshal(b, &got)
	want := []map[string]any{{"name": "VigilErrorRate", "rule": "error_rate", "state": "pending",
		"labels": map[string]any{"alertname": "VigilErrorRate", "rule": "error_rate", "severity": "warning", "signal": "errors"},
		"since":  c.t.Format(time.RFC3339), "value": 0.5, "threshold": 0.1, "threshold_source": "fixed"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// fastRedelivery makes Run send a failed batch again after a millisecond
// for the rest of the test.
func fastRedelivery(t *testing.T) {
	w, m := redeliverWait, redeliverMaxWait
	redeliverWait, redeliverMaxWait = time.Millisecond, 4*time.Millisecond
	t.Cleanup(func() { redeliverWait, redeliverMaxWait = w, m })
}

// runEngine runs e.Run until the test ends.
func runEngine(t *testing.T, e *Engine) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestRedelivery: Alertmanager answers 500 to more posts than
// one delivery retries; the firing notification is sent again until it
// goes through, and the one fired after it arrives after it, not lost.
func TestRedelivery(t *testing.T) {
	synctest.Test(t, testRedelivery)
}

func testRedelivery(t *testing.T) {
	fastRedelivery(t)
	var mu sync.Mutex
	var got []string // alertnames' backends, in the order received
	var posts atomic.Int32
	am := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) <= 10 { // two and a half deliveries of 4 attempts
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		var ns []Notification
		json.NewDecoder(r.Body).Decode(&ns)
		mu.Lock()
		defer mu.Unlock()
		for _, n := range ns {
			got = append(got, n.Labels["backend"])
		}
	})
	c := &clock{t: t0}
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now,
		&AlertmanagerNotifier{URL: "http://am", Client: &http.Client{Transport: testutil.HandlerTransport(am)}, Retry: fastRetry}, quiet)
	runEngine(t, e)
	fire(e, c, map[string]string{"backend": "a"})
	fire(e, c, map[string]string{"backend": "b"})
	time.Sleep(time.Minute) // in the bubble: all the retries and redeliveries are over
	synctest.Wait()
	mu.Lock()
	defer mu.Unlock()
	if d := cmp.Diff([]string{"a", "b"}, got); d != "" {
		t.Errorf("received (-want +got):\n%s", d)
	}
	if st := e.Stats(); st.Sent != 2 || st.Failed != 0 || st.Retried != 2 {
		t.Errorf("stats %+v, want 2 sent and 2 retried (the first batch's two failed deliveries), none failed", st)
	}
	var outcomes []string
	for _, d := range e.Deliveries() {
		outcomes = append(outcomes, d.Labels["backend"]+" "+d.Outcome)
	}
	if d := cmp.Diff([]string{"a retrying", "a retrying", "a sent", "b sent"}, outcomes); d != "" {
		t.Errorf("deliveries (-want +got):\n%s", d)
	}
}

// TestNoRedeliveryOfRejected: a batch the receiver rejects (400) is not
// sent again: it is counted as failed at once.
func TestNoRedeliveryOfRejected(t *testing.T) {
	synctest.Test(t, testNoRedeliveryOfRejected)
}

func testNoRedeliveryOfRejected(t *testing.T) {
	fastRedelivery(t)
	var posts atomic.Int32
	am := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		http.Error(w, "bad alert", http.StatusBadRequest)
	})
	c := &clock{t: t0}
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now,
		&AlertmanagerNotifier{URL: "http://am", Client: &http.Client{Transport: testutil.HandlerTransport(am)}, Retry: fastRetry}, quiet)
	runEngine(t, e)
	fire(e, c, nil)
	time.Sleep(time.Minute) // in the bubble: ample room for a wrong redelivery
	synctest.Wait()
	if st, n := e.Stats(), posts.Load(); st.Failed != 1 || st.Retried != 0 || n != 1 {
		t.Errorf("stats %+v after %d posts, want 1 failed after 1 post", st, n)
	}
}

// failTimes fails its first n deliveries with a transient error, then
// records like a recorder.
type failTimes struct {
	recorder
	n atomic.Int32
}

func (f *failTimes) Notify(ctx context.Context, ns []Notification) error {
	if f.n.Add(-1) >= 0 {
		return errors.New("unreachable")
	}
	return f.recorder.Notify(ctx, ns)
}

// TestRedeliveryMulti: with two receivers, only the one that failed gets
// the batch again; the other gets it once.
func TestRedeliveryMulti(t *testing.T) {
	synctest.Test(t, testRedeliveryMulti)
}

func testRedeliveryMulti(t *testing.T) {
	fastRedelivery(t)
	ok, flaky := &recorder{}, &failTimes{}
	flaky.n.Store(3)
	c := &clock{t: t0}
	e := NewEngine(Config{Fixed: map[string]float64{RuleErrorRate: 0.1}}, nil, c.now, Multi{ok, flaky}, quiet)
	runEngine(t, e)
	fire(e, c, nil)
	time.Sleep(time.Minute) // in the bubble: all the redeliveries are over
	synctest.Wait()
	if ok.count() != 1 || flaky.count() != 1 {
		t.Errorf("received %d and %d times, want once each", ok.count(), flaky.count())
	}
	if st := e.Stats(); st.Sent != 1 || st.Retried != 3 || st.Failed != 0 {
		t.Errorf("stats %+v, want 1 sent after 3 retried attempts", st)
	}
}
