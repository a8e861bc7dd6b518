package admin

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// historyRecorder is a HistorySource and Baseliner that records its calls.
type historyRecorder struct {
	mu sync.Mutex
	historyCalls
}

// historyCalls counts the calls since the last take, with the last
// history call's arguments.
type historyCalls struct {
	calls     int
	since     time.Time
	step      time.Duration
	baselines int
}

func (h *historyRecorder) HistoryJSON(_ context.Context, since time.Time, step time.Duration) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	h.since, h.step = since, step
	return []byte(`{"points":[]}`), nil
}

func (h *historyRecorder) PinBaseline(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.baselines++
	return nil
}

func (h *historyRecorder) take() historyCalls {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.historyCalls
	h.historyCalls = historyCalls{}
	return c
}

// FuzzAdminRequest: the admin routes answer only the exact bearer token
// (401 and no work for any other Authorization value); GET /admin/history
// takes since as a duration ago (>= 0) or an RFC 3339 time and step as a
// duration >= 0, answers 400 naming the parameter otherwise, and passes
// what it parsed to the source; POST /admin/baseline ignores its body.
// Every answer is JSON.
func FuzzAdminRequest(f *testing.F) {
	for _, s := range [][4]string{
		{"Bearer s3cret", "15m", "10s", ""}, {"Bearer s3cret", "2026-11-29T10:00:00Z", "", "{}"},
		{"Bearer s3cret", "-5m", "-1s", "x"}, {"Bearer s3cret", "2026-11-29T10:00:00.123456789+01:00", "0", ""},
		{"bearer s3cret", "", "", ""}, {"Bearer s3cret ", "", "", ""}, {"Bearer  s3cret", "", "", ""}, {"", "1h", "1m", ""},
		{"Bearer s3cre", "9999999999h", "1e3s", ""}, {"Basic czNjcmV0", "now", "", ""},
	} {
		f.Add(s[0], s[1], s[2], []byte(s[3]))
	}
	src := &historyRecorder{}
	h := handler(Options{Token: "s3cret", History: src, Baseline: src})
	f.Fuzz(func(t *testing.T, auth, since, step string, body []byte) {
		q := url.Values{"since": {since}, "step": {step}}
		get := httptest.NewRequest(http.MethodGet, "/admin/history?"+q.Encode(), nil)
		get.Header["Authorization"] = []string{auth}
		before := time.Now()
		rec := testutil.Serve(h, get)
		after := time.Now()
		hist := src.take()
		what := "GET /admin/history since=" + strconv.Quote(since) + " step=" + strconv.Quote(step) + " auth " + strconv.Quote(auth)
		testutil.CheckJSONAnswer(t, what, rec, 1024+6*(len(since)+len(step)))

		post := httptest.NewRequest(http.MethodPost, "/admin/baseline", bytes.NewReader(body))
		post.Header["Authorization"] = []string{auth}
		prec := testutil.Serve(h, post)
		pinned := src.take().baselines
		testutil.CheckJSONAnswer(t, "POST /admin/baseline", prec, 1024)

		if auth != "Bearer s3cret" {
			if rec.Code != http.StatusUnauthorized || prec.Code != http.StatusUnauthorized || hist.calls != 0 || pinned != 0 ||
				rec.Header().Get("WWW-Authenticate") == "" {
				t.Fatalf("%s: %d and baseline %d (%d, %d calls), want 401 and no call", what, rec.Code, prec.Code, hist.calls, pinned)
			}
			return
		}
		if prec.Code != http.StatusOK || pinned != 1 || prec.Body.String() != `{"pinned":true}` {
			t.Fatalf("POST /admin/baseline with body %q: %d %q, %d pins", body, prec.Code, prec.Body.Bytes(), pinned)
		}
		wantSince, sinceOK := before.Add(-time.Hour), true
		if since != "" {
			if d, err := time.ParseDuration(since); err == nil && d >= 0 {
				wantSince = before.Add(-d)
			} else if ts, err := time.Parse(time.RFC3339Nano, since); err == nil {
				wantSince = ts
			} else {
				sinceOK = false
			}
		}
		wantStep, stepOK := time.Duration(0), true
		if step != "" {
			d, err := time.ParseDuration(step)
			wantStep, stepOK = d, err == nil && d >= 0
		}
		switch {
		case !sinceOK || !stepOK:
			param := "step"
			if !sinceOK {
				param = "since"
			}
			if rec.Code != http.StatusBadRequest || hist.calls != 0 || !strings.Contains(rec.Body.String(), param+":") {
				t.Fatalf("%s: %d %q (%d calls), want a 400 naming %s", what, rec.Code, rec.Body.Bytes(), hist.calls, param)
			}
		case rec.Code != http.StatusOK || hist.calls != 1 || rec.Body.String() != `{"points":[]}`:
			t.Fatalf("%s: %d %q (%d calls), want the source's answer", what, rec.Code, rec.Body.Bytes(), hist.calls)
		case hist.step != wantStep:
			t.Fatalf("%s: step %v, want %v", what, hist.step, wantStep)
		case since != "" && sinceOK && !isDurationAgo(since) && !hist.since.Equal(wantSince):
			t.Fatalf("%s: since %v, want %v", what, hist.since, wantSince)
		case (since == "" || isDurationAgo(since)) && (hist.since.Before(wantSince.Add(-after.Sub(before))) || hist.since.After(wantSince.Add(after.Sub(before)))):
			t.Fatalf("%s: since %v, want %v (±%v)", what, hist.since, wantSince, after.Sub(before))
		}
	})
}

// isDurationAgo reports whether since is a duration ago, as
// /admin/history reads it first.
func isDurationAgo(since string) bool {
	d, err := time.ParseDuration(since)
	return err == nil && d >= 0
}
