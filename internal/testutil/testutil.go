// Package testutil holds the helpers that Vigil's tests share: HTTP calls
// that fail the test on a transport error, a check of JSON answers
// against OpenAI's error shape, waiting on a condition with a
// deadline generous enough for a busy machine (or the caller's own),
// float comparisons for golden values, an in-memory transport for tests
// that run in a testing/synctest bubble (where real network I/O is not
// allowed), and readers that cut a body where a network might.
//
// Only _test.go files import it.
package testutil

import (
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// WaitDeadline is how long WaitFor polls before it fails the test: far
// longer than any condition takes on an idle machine, so that only a
// condition that never comes fails, not a machine shared with other work.
const WaitDeadline = 30 * time.Second

// WaitFor polls cond every few milliseconds until it holds, and fails the
// test, naming what, if it does not within WaitDeadline. It waits for
// something to happen; to show that something does not happen, use
// testing/synctest or wait for an event that proves the work was done.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Poll(WaitDeadline, 5*time.Millisecond, cond) {
		t.Fatalf("timed out after %v waiting for %s", WaitDeadline, what)
	}
}

// Poll calls cond every interval until it holds, and reports whether it
// did before limit passed. It is WaitFor for a test that says itself what
// went wrong, or whose condition costs a request each time (a longer
// interval), or comes only after a run longer than WaitDeadline. Inside a
// testing/synctest bubble it polls on the bubble's clock.
func Poll(limit, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Post POSTs body to url as application/json and returns the status, the
// headers and the whole body; a transport error fails the test.
func Post(t testing.TB, url, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return resp.StatusCode, resp.Header, b
}

// Get GETs url with the given request headers (name, value, ...) and
// returns the status and the whole body; a transport error fails the test.
func Get(t testing.TB, url string, header ...string) (int, []byte) {
	t.Helper()
	resp, b := GetResp(t, url, header...)
	return resp.StatusCode, b
}

// GetResp GETs url with the given request headers (name, value, ...) and
// returns the response, its body read whole and closed; a transport error
// fails the test.
func GetResp(t testing.TB, url string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp, b
}

// Serve runs one request through h, in the calling goroutine, and returns
// the response.
func Serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// CheckJSONAnswer fails t, naming the request what, unless rec's body is
// JSON of at most limit bytes and, for a status of 400 or more, an error
// body in OpenAI's shape, with a message and a code.
func CheckJSONAnswer(t testing.TB, what string, rec *httptest.ResponseRecorder, limit int) {
	t.Helper()
	b := rec.Body.Bytes()
	if !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") || !json.Valid(b) || len(b) > limit {
		t.Fatalf("%s: %d %q (%s), want JSON of at most %d bytes", what, rec.Code, b, rec.Header().Get("Content-Type"), limit)
	}
	if rec.Code >= 400 {
		var eb struct {
			Error struct{ Message, Type, Code string }
		}
		if json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" || eb.Error.Code == "" {
			t.Fatalf("%s: %d %q, not an OpenAI error body", what, rec.Code, b)
		}
	}
}

// RelErr is the relative error of got against want, |got-want|/|want|:
// 0 when they are equal, +Inf when want is 0 and got is not.
func RelErr(got, want float64) float64 {
	if got == want {
		return 0
	}
	if want == 0 {
		return math.Inf(1)
	}
	return math.Abs(got-want) / math.Abs(want)
}

// ApproxEqual reports whether got matches want to the relative error rel,
// or to the absolute error abs (for values at or next to zero, where a
// relative error means nothing).
func ApproxEqual(got, want, rel, abs float64) bool {
	return got == want || math.Abs(got-want) <= max(rel*math.Abs(want), abs)
}

// HandlerTransport is an http.RoundTripper that serves each request with
// h in the calling goroutine, without a network: a client using it works
// inside a testing/synctest bubble. The response is what h wrote, whole;
// streaming and the request's context are not honoured while h runs.
func HandlerTransport(h http.Handler) http.RoundTripper {
	return handlerTransport{h}
}

type handlerTransport struct{ h http.Handler }

func (ht handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	ht.h.ServeHTTP(rec, r)
	if r.Body != nil {
		r.Body.Close() // a RoundTripper must, as a real connection would
	}
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}
