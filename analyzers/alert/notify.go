package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Notification is one alert as Alertmanager's v2 API takes it
// (POST /api/v2/alerts, the postableAlert schema). A firing alert's EndsAt
// is the time Alertmanager may resolve it by itself if it hears nothing
// more; a resolution carries the time the condition ended.
type Notification struct {
	Labels       map[string]string `json:"labels"`
	Annotations  map[string]string `json:"annotations,omitempty"`
	StartsAt     time.Time         `json:"startsAt"`
	EndsAt       time.Time         `json:"endsAt"`
	GeneratorURL string            `json:"generatorURL,omitempty"`

	resolved bool
}

// Resolved reports whether the engine made n as a resolution: the condition
// is back inside its threshold since n.EndsAt.
func (n Notification) Resolved() bool { return n.resolved }

// A Notifier delivers a batch of notifications. Implementations must honour
// ctx and be safe for use by one goroutine at a time.
type Notifier interface {
	Notify(ctx context.Context, ns []Notification) error
}

// Multi sends to each notifier in turn and joins their errors.
type Multi []Notifier

// Notify implements Notifier.
func (m Multi) Notify(ctx context.Context, ns []Notification) error {
	var errs []error
	for _, n := range m {
		if err := n.Notify(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Retry is the back-off of a notifier: Attempts tries in all, waiting
// Backoff, 2·Backoff, 4·Backoff… (at most MaxBackoff) between them. Only
// transport errors, 429 and 5xx answers are retried. Zero values mean
// 4 attempts, 500 ms and 10 s.
type Retry struct {
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// AlertmanagerNotifier posts to Alertmanager's v2 API. It is safe for
// concurrent use.
type AlertmanagerNotifier struct {
	// URL is Alertmanager's base URL, e.g. http://127.0.0.1:9093.
	URL string
	// Client sends the requests. Nil: a client with a 10 s timeout.
	Client *http.Client
	Retry  Retry
}

var _ Notifier = (*AlertmanagerNotifier)(nil)

// Notify implements Notifier: one POST /api/v2/alerts of the JSON array of
// ns.
func (a *AlertmanagerNotifier) Notify(ctx context.Context, ns []Notification) error {
	body, err := json.Marshal(ns)
	if err != nil {
		return &PermanentError{err}
	}
	return post(ctx, a.Client, a.Retry, strings.TrimRight(a.URL, "/")+"/api/v2/alerts", body)
}

// WebhookNotifier posts a JSON body to any URL:
//
//	{"receiver": "vigil", "status": "firing"|"resolved", "alerts": [Notification...]}
//
// status is "firing" when any alert of the batch fires. It is safe for
// concurrent use.
type WebhookNotifier struct {
	URL string
	// Client sends the requests. Nil: a client with a 10 s timeout.
	Client *http.Client
	Retry  Retry
}

var _ Notifier = (*WebhookNotifier)(nil)

// WebhookBody is the JSON a WebhookNotifier posts.
type WebhookBody struct {
	Receiver string         `json:"receiver"`
	Status   string         `json:"status"`
	Alerts   []Notification `json:"alerts"`
}

// Notify implements Notifier.
func (w *WebhookNotifier) Notify(ctx context.Context, ns []Notification) error {
	status := "resolved"
	for _, n := range ns {
		if !n.Resolved() {
			status = "firing"
		}
	}
	body, err := json.Marshal(WebhookBody{Receiver: "vigil", Status: status, Alerts: ns})
	if err != nil {
		return &PermanentError{err}
	}
	return post(ctx, w.Client, w.Retry, w.URL, body)
}

var defaultClient = &http.Client{Timeout: 10 * time.Second}

// PermanentError wraps a delivery error that sending the same
// notifications again cannot cure: the receiver rejected them (an HTTP
// 4xx other than 429) or the request could not be made. The engine sends
// again after any other error.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// permanent reports whether err, or one of the errors it joins, is a
// PermanentError.
func permanent(err error) bool {
	_, ok := errors.AsType[*PermanentError](err)
	return ok
}

// post sends body with retries and exponential back-off, honouring ctx.
// An error no retry can cure is a PermanentError.
func post(ctx context.Context, c *http.Client, r Retry, url string, body []byte) error {
	if c == nil {
		c = defaultClient
	}
	if r.Attempts <= 0 {
		r.Attempts = 4
	}
	if r.Backoff <= 0 {
		r.Backoff = 500 * time.Millisecond
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = 10 * time.Second
	}
	wait := r.Backoff
	var err error
	for attempt := 1; ; attempt++ {
		var retry bool
		retry, err = postOnce(ctx, c, url, body)
		if err != nil && !retry && ctx.Err() == nil {
			return &PermanentError{err}
		}
		if err == nil || !retry || attempt >= r.Attempts {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("alert: post %s: %w (after %d attempts: %w)", url, ctx.Err(), attempt, err)
		case <-t.C:
		}
		wait = min(2*wait, r.MaxBackoff)
	}
	return err
}

// postOnce makes one attempt; retry says whether another may succeed.
func postOnce(ctx context.Context, c *http.Client, url string, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("alert: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return ctx.Err() == nil, fmt.Errorf("alert: post %s: %w", url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	retry = resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	return retry, fmt.Errorf("alert: post %s: %s: %s", url, resp.Status, bytes.TrimSpace(msg))
}
