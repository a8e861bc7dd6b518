package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Health has two parts. Active: the Checker probes each backend's health
// path; a failed probe takes the backend out, a passing one brings it back.
// Passive: requests report their outcome; Pool.Passive.Failures consecutive
// failures eject the backend. An ejected backend gets no client traffic,
// only probes: once its back-off has run out, the Checker sends it a
// readmission probe (the health path and a one-token generation, since a
// server can pass its health path and fail every request). A passing probe
// readmits it; a failed one doubles the back-off (Backoff, 2·Backoff, … up
// to MaxBackoff) and is counted. A readmitted backend is on probation until
// a request succeeds: its next failure ejects it again at once, with the
// back-off where it left off. Without active checks (health.interval 0)
// nothing probes, and the back-off's end readmits on probation
// (Pool.Sweep). Every flip is made by compare-and-swap, so exactly one
// caller sees it and reports it: one log line per ejection and one per
// readmission, however long the backend stays out.

// Healthy reports whether requests may go to the backend: its last active
// check passed and it is not ejected.
func (b *Backend) Healthy() bool {
	return b.healthy.Load() && b.ejectedUntil.Load() == 0
}

// ActiveHealthy reports the result of the last active check (true before any).
func (b *Backend) ActiveHealthy() bool { return b.healthy.Load() }

// SetHealthy records the result of an active check and reports whether it
// changed; the change is made by compare-and-swap so that it is reported once.
func (b *Backend) SetHealthy(v bool) bool { return b.healthy.CompareAndSwap(!v, v) }

// ConsecutiveFailures returns the number of failed requests since the last
// successful one, up to the one that ejected the backend: failures of
// requests still in flight when it was ejected are not counted.
func (b *Backend) ConsecutiveFailures() int64 { return b.fails.Load() }

// Ejected reports whether the backend is passively ejected.
func (b *Backend) Ejected() bool { return b.ejectedUntil.Load() != 0 }

// EjectedUntil returns the end of the current back-off of an ejected
// backend: no readmission probe is sent before it. It may lie in the past
// while the probe is due (the Checker sends it on its next round). The zero
// time when the backend is not ejected.
func (b *Backend) EjectedUntil() time.Time {
	until := b.ejectedUntil.Load()
	if until == 0 {
		return time.Time{}
	}
	return time.Unix(0, until)
}

// FailedProbes returns the number of failed readmission probes since the
// backend was last ejected (kept after its readmission, reset by its next
// ejection).
func (b *Backend) FailedProbes() int64 { return b.failedProbes.Load() }

// backoff returns the back-off after steps earlier ones since the last
// successful request: Backoff doubled steps times, at most MaxBackoff.
func (p *Passive) backoff(steps int64) time.Duration {
	d := p.Backoff
	for i := int64(0); i < steps && d < p.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, p.MaxBackoff)
}

// RecordSuccess records a request the backend answered without failing. It
// ends any ejection and the probation after one, and reports whether it
// readmitted an ejected backend (a request in flight when it was ejected
// can still succeed).
func (b *Backend) RecordSuccess(now time.Time) (readmitted bool) {
	b.errRate.observe(0, errorAlpha, now)
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if b.ejections.Load() != 0 {
		b.ejections.Store(0)
	}
	return b.readmit()
}

// RecordFailure records a failed request (connect error, timeout, 5xx
// answer, broken stream). It reports whether this failure ejected the
// backend, and until when its back-off runs; only the caller whose
// compare-and-swap ejected it gets true. Failures while the backend is
// already ejected (requests that were in flight) neither count nor extend
// the ejection.
func (b *Backend) RecordFailure(now time.Time) (ejected bool, until time.Time) {
	b.errRate.observe(1, errorAlpha, now)
	if b.ejectedUntil.Load() != 0 {
		return false, time.Time{}
	}
	n := b.fails.Add(1)
	pp := &b.pool.passive
	if pp.Failures <= 0 {
		return false, time.Time{}
	}
	prior := b.ejections.Load()
	if n < int64(pp.Failures) && prior == 0 {
		return false, time.Time{}
	}
	u := now.UnixNano() + int64(pp.backoff(prior))
	if !b.ejectedUntil.CompareAndSwap(0, u) {
		return false, time.Time{} // another failure ejected it first
	}
	b.failedProbes.Store(0)
	b.ejections.Add(1)
	return true, time.Unix(0, u)
}

// ProbeFailed records a failed readmission probe of an ejected backend:
// the back-off doubles from now. It returns the probes failed in this
// ejection and the new end of the back-off; ok is false when the backend
// is no longer ejected (a request readmitted it meanwhile) or another
// caller moved the back-off first.
func (b *Backend) ProbeFailed(now time.Time) (failed int64, until time.Time, ok bool) {
	old := b.ejectedUntil.Load()
	if old == 0 {
		return 0, time.Time{}, false
	}
	u := now.UnixNano() + int64(b.pool.passive.backoff(b.ejections.Load()))
	if !b.ejectedUntil.CompareAndSwap(old, u) {
		return 0, time.Time{}, false
	}
	b.ejections.Add(1)
	return b.failedProbes.Add(1), time.Unix(0, u), true
}

// readmit ends an ejection and reports whether this call did; the backend
// stays on probation until a request succeeds.
func (b *Backend) readmit() bool {
	old := b.ejectedUntil.Load()
	return old != 0 && b.ejectedUntil.CompareAndSwap(old, 0)
}

// Sweep ends the ejections whose back-off has run out, calling readmit (if
// not nil) once for each backend it readmits. The backends stay on
// probation until a request succeeds. It is for a gateway without active
// checks; with them, the Checker's probes readmit.
func (p *Pool) Sweep(now time.Time, readmit func(*Backend)) {
	nowNs := now.UnixNano()
	for _, b := range p.backends {
		old := b.ejectedUntil.Load()
		if old != 0 && nowNs >= old && b.ejectedUntil.CompareAndSwap(old, 0) && readmit != nil {
			readmit(b)
		}
	}
}

// A Checker probes every backend's health path on an interval, and sends
// each ejected backend whose back-off has run out a readmission probe.
type Checker struct {
	Pool     *Pool
	Client   *http.Client
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Log      *slog.Logger
	// OnChange, if set, is called when a backend's active health flips.
	OnChange func(b *Backend, healthy bool)
	// OnReadmit, if set, is called once when a passing probe ends a
	// passive ejection, with the probes that failed before it.
	OnReadmit func(b *Backend, failedProbes int64)
	// OnProbeFailed, if set, is called for each failed readmission probe
	// with the failed probes of this ejection so far and the new end of
	// the back-off.
	OnProbeFailed func(b *Backend, failed int64, until time.Time)
}

// Run checks all backends at once every Interval until ctx is done. It
// returns nil at once when Interval is zero (checks disabled).
func (c *Checker) Run(ctx context.Context) error {
	if c.Interval <= 0 {
		return nil
	}
	t := time.NewTicker(c.Interval)
	defer t.Stop()
	for {
		c.CheckAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CheckAll probes every backend once, concurrently, and waits for the results.
func (c *Checker) CheckAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, b := range c.Pool.backends {
		wg.Go(func() {
			ok, timedOut := c.check(ctx, b)
			if ctx.Err() != nil {
				return
			}
			if !ok && timedOut && c.answering(b, time.Now()) {
				// A server saturated by the traffic it is serving answers
				// its health path late; taking it out would refuse the
				// requests it is still serving well (with one backend,
				// every request). A refusal or an error status still
				// counts, and so does a timeout without recent answers.
				ok = true
				if c.Log != nil {
					c.Log.Debug("health check timed out; the backend is answering requests", "backend", b.Name)
				}
			}
			if b.SetHealthy(ok) {
				if c.Log != nil {
					c.Log.Info("backend health changed", "backend", b.Name, "healthy", ok)
				}
				if c.OnChange != nil {
					c.OnChange(b, ok)
				}
			}
			if until := b.EjectedUntil(); !until.IsZero() && !time.Now().Before(until) {
				c.readmission(ctx, b, ok)
			}
		})
	}
	wg.Wait()
}

// readmission sends the readmission probe of an ejected backend whose
// back-off has run out; healthOK is the health path's answer of this
// round. A passing health path alone does not readmit: the server that
// answered it may fail every generation.
func (c *Checker) readmission(ctx context.Context, b *Backend, healthOK bool) {
	pass := healthOK && c.probe(ctx, b)
	if ctx.Err() != nil {
		return
	}
	if pass {
		failed := b.FailedProbes()
		if b.readmit() {
			if c.Log != nil {
				c.Log.Info("backend readmitted", "backend", b.Name, "by", "probe", "failed_probes", failed)
			}
			if c.OnReadmit != nil {
				c.OnReadmit(b, failed)
			}
		}
		return
	}
	if n, until, ok := b.ProbeFailed(time.Now()); ok {
		if c.Log != nil {
			c.Log.Debug("readmission probe failed", "backend", b.Name, "failed_probes", n, "until", until.Format(time.RFC3339Nano))
		}
		if c.OnProbeFailed != nil {
			c.OnProbeFailed(b, n, until)
		}
	}
}

// check asks the backend's health path; it reports whether it passed and,
// when not, whether it ran out of time (rather than being refused or
// answered with an error).
func (c *Checker) check(ctx context.Context, b *Backend) (ok, timedOut bool) {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.JoinPath(c.Path).String(), nil)
	if err != nil {
		return false, false
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return false, errors.Is(err, context.DeadlineExceeded)
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300, false
}

// answering reports whether the backend answered a request through the
// gateway (headers below 500) within the last check interval and
// timeout, as of now: it is serving, whatever its health path says in
// time.
func (c *Checker) answering(b *Backend, now time.Time) bool {
	at := b.answered.Load()
	return at != 0 && now.UnixNano()-at <= int64(c.Interval+c.Timeout)
}

// Answered records that the backend answered a request with a status below
// 500 at now (its response headers arrived): evidence that it serves,
// which a health check that times out does not override. A stream counts
// when it starts, not when it ends minutes later.
func (b *Backend) Answered(now time.Time) {
	if t := now.UnixNano(); t > b.answered.Load() {
		b.answered.Store(t)
	}
}

// probe asks the backend for one generated token, the least request that
// goes the way client requests go. It passes on any answer below 500: a
// 4xx (a model that cannot complete, say) is an answer, as for the
// passive side, which counts only 5xx, timeouts and connect errors.
func (c *Checker) probe(ctx context.Context, b *Backend) bool {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	path, body := "/generate", map[string]any{"inputs": "ping", "parameters": map[string]any{"max_new_tokens": 1}}
	if b.Kind != KindTGI {
		path, body = "/v1/completions", map[string]any{"prompt": "ping", "max_tokens": 1}
		if m := b.probeModel(); m != "" {
			body["model"] = m
		}
	}
	buf, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL.JoinPath(path).String(), bytes.NewReader(buf))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 500
}

// probeModel names a model the backend serves: the first configured one,
// else the first it listed; "" when neither is known (the server then
// picks its own, as vLLM does for a request without a model).
func (b *Backend) probeModel() string {
	if ms := b.Models(); len(ms) > 0 {
		return ms[0]
	}
	if d := b.DiscoveredModels(); d != nil {
		if ids := d.IDs(); len(ids) > 0 {
			return ids[0]
		}
	}
	return ""
}
