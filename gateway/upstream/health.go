package upstream

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Health has two parts. Active: the Checker probes each backend's health
// path; a failed probe takes the backend out, a passing one brings it back.
// Passive: requests report their outcome; Pool.Passive.Failures consecutive
// failures eject the backend for a back-off that doubles with each ejection
// (Backoff, 2·Backoff, … up to MaxBackoff) until a request succeeds. An
// ejected backend comes back when its back-off ends (on probation: its next
// failure ejects it again at once, for twice as long) or when an active probe
// passes. Every flip is made by compare-and-swap, so exactly one caller
// sees it and reports it.

// Healthy reports whether requests may go to the backend: its last active
// check passed and it is not ejected.
func (b *Backend) Healthy() bool {
	if !b.healthy.Load() {
		return false
	}
	until := b.ejectedUntil.Load()
	return until == 0 || time.Now().UnixNano() >= until
}

// ActiveHealthy reports the result of the last active check (true before any).
func (b *Backend) ActiveHealthy() bool { return b.healthy.Load() }

// SetHealthy records the result of an active check and reports whether it
// changed; the change is made by compare-and-swap so that it is reported once.
func (b *Backend) SetHealthy(v bool) bool { return b.healthy.CompareAndSwap(!v, v) }

// ConsecutiveFailures returns the number of failed requests since the last
// successful one.
func (b *Backend) ConsecutiveFailures() int64 { return b.fails.Load() }

// EjectedUntil returns when the backend's current ejection ends; the zero
// time when it is not ejected.
func (b *Backend) EjectedUntil() time.Time {
	until := b.ejectedUntil.Load()
	if until == 0 || time.Now().UnixNano() >= until {
		return time.Time{}
	}
	return time.Unix(0, until)
}

// RecordSuccess records a request the backend answered without failing. It
// ends any ejection and the probation after one, and reports whether it
// re-admitted an ejected backend.
func (b *Backend) RecordSuccess(now time.Time) (readmitted bool) {
	b.errRate.observe(0, errorAlpha, now)
	if b.fails.Load() != 0 {
		b.fails.Store(0)
	}
	if b.ejections.Load() != 0 {
		b.ejections.Store(0)
	}
	return b.clearEjection()
}

// RecordFailure records a failed request (connect error, timeout, 5xx
// answer, broken stream). It reports whether this failure ejected the
// backend, and until when; only the caller whose compare-and-swap ejected it
// gets true. Failures while the backend is already ejected (requests that
// were in flight) do not extend the ejection.
func (b *Backend) RecordFailure(now time.Time) (ejected bool, until time.Time) {
	b.errRate.observe(1, errorAlpha, now)
	n := b.fails.Add(1)
	pp := &b.pool.passive
	if pp.Failures <= 0 {
		return false, time.Time{}
	}
	prior := b.ejections.Load()
	if n < int64(pp.Failures) && prior == 0 {
		return false, time.Time{}
	}
	old := b.ejectedUntil.Load()
	nowNs := now.UnixNano()
	if old != 0 && nowNs < old {
		return false, time.Time{} // already ejected
	}
	d := pp.Backoff
	for i := int64(0); i < prior && d < pp.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, pp.MaxBackoff)
	u := nowNs + int64(d)
	if !b.ejectedUntil.CompareAndSwap(old, u) {
		return false, time.Time{}
	}
	b.ejections.Add(1)
	return true, time.Unix(0, u)
}

// clearEjection ends an ejection (current or elapsed) and reports whether
// this call did.
func (b *Backend) clearEjection() bool {
	old := b.ejectedUntil.Load()
	return old != 0 && b.ejectedUntil.CompareAndSwap(old, 0)
}

// Sweep ends the ejections whose back-off has run out, calling readmit (if
// not nil) once for each backend it re-admits. The backends stay on
// probation until a request succeeds.
func (p *Pool) Sweep(now time.Time, readmit func(*Backend)) {
	nowNs := now.UnixNano()
	for _, b := range p.backends {
		old := b.ejectedUntil.Load()
		if old != 0 && nowNs >= old && b.ejectedUntil.CompareAndSwap(old, 0) && readmit != nil {
			readmit(b)
		}
	}
}

// A Checker probes every backend's health path on an interval.
type Checker struct {
	Pool     *Pool
	Client   *http.Client
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Log      *slog.Logger
	// OnChange, if set, is called when a backend's active health flips.
	OnChange func(b *Backend, healthy bool)
	// OnReadmit, if set, is called when a passing probe ends a passive
	// ejection.
	OnReadmit func(b *Backend)
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
			ok := c.check(ctx, b)
			if ctx.Err() != nil {
				return
			}
			if b.SetHealthy(ok) {
				if c.Log != nil {
					c.Log.Info("backend health changed", "backend", b.Name, "healthy", ok)
				}
				if c.OnChange != nil {
					c.OnChange(b, ok)
				}
			}
			// A passing probe re-admits an ejected backend at once; it stays
			// on probation (ejections is kept) until a request succeeds.
			if ok && b.clearEjection() {
				if c.Log != nil {
					c.Log.Info("ejected backend re-admitted by a passing health check", "backend", b.Name)
				}
				if c.OnReadmit != nil {
					c.OnReadmit(b)
				}
			}
		})
	}
	wg.Wait()
}

func (c *Checker) check(ctx context.Context, b *Backend) bool {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.JoinPath(c.Path).String(), nil)
	if err != nil {
		return false
	}
	resp, err := c.Client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}
