// Package upstream holds the state of the inference backends that the
// balancer, the health checker and the admin API share.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// Kinds of backend API.
const (
	KindOpenAI = "openai"
	KindTGI    = "tgi"
)

// Sentinel errors of Pick.
var (
	// ErrUnknownModel means no backend is configured to serve the model.
	ErrUnknownModel = errors.New("no backend serves this model")
	// ErrNoHealthy means backends serve the model but none is healthy.
	ErrNoHealthy = errors.New("no healthy backend")
)

// A Backend is one inference server. Its configuration is immutable; its
// health and in-flight count are atomics, safe for concurrent use.
type Backend struct {
	Name   string
	URL    *url.URL
	Kind   string
	Weight float64
	// models is nil when the backend serves every model.
	models map[string]struct{}

	healthy  atomic.Bool
	inflight atomic.Int64
}

// Serves reports whether the backend is configured for model. An empty model
// matches every backend.
func (b *Backend) Serves(model string) bool {
	if b.models == nil || model == "" {
		return true
	}
	_, ok := b.models[model]
	return ok
}

// Models returns the configured model list; nil means every model.
func (b *Backend) Models() []string {
	if b.models == nil {
		return nil
	}
	out := make([]string, 0, len(b.models))
	for m := range b.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// Healthy reports the backend's last known health.
func (b *Backend) Healthy() bool { return b.healthy.Load() }

// SetHealthy records the backend's health and reports whether it changed;
// the change is made by compare-and-swap so that it is reported once.
func (b *Backend) SetHealthy(v bool) bool { return b.healthy.CompareAndSwap(!v, v) }

// Inflight returns the number of requests being proxied to the backend.
func (b *Backend) Inflight() int64 { return b.inflight.Load() }

// Acquire counts a request in flight; call the returned func when it ends.
func (b *Backend) Acquire() (release func()) {
	b.inflight.Add(1)
	return func() { b.inflight.Add(-1) }
}

// A Pool is the fixed set of configured backends. It is safe for concurrent use.
type Pool struct {
	backends []*Backend
	next     atomic.Uint64
}

// NewPool builds a pool from validated backend configs. Every backend starts
// healthy: an unchecked backend is given the benefit of the doubt.
func NewPool(cfgs []config.Backend) (*Pool, error) {
	p := &Pool{}
	for i, c := range cfgs {
		u, err := url.Parse(c.URL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return nil, fmt.Errorf("backends[%d].url: invalid URL %q", i, c.URL)
		}
		b := &Backend{Name: c.Name, URL: u, Kind: c.Kind, Weight: c.Weight}
		if b.Kind == "" {
			b.Kind = KindOpenAI
		}
		if len(c.Models) > 0 {
			b.models = make(map[string]struct{}, len(c.Models))
			for _, m := range c.Models {
				b.models[m] = struct{}{}
			}
		}
		b.healthy.Store(true)
		p.backends = append(p.backends, b)
	}
	return p, nil
}

// Backends returns the backends in configuration order.
func (p *Pool) Backends() []*Backend { return p.backends }

// Pick chooses a healthy backend for model among those whose kind is in
// kinds (all kinds when kinds is empty), round robin. It returns
// ErrUnknownModel when no backend is configured for the model and
// ErrNoHealthy when some are but none is healthy.
func (p *Pool) Pick(model string, kinds ...string) (*Backend, error) {
	n := len(p.backends)
	if n == 0 {
		return nil, ErrNoHealthy
	}
	start := int(p.next.Add(1) % uint64(n))
	known := false
	for i := range n {
		b := p.backends[(start+i)%n]
		if len(kinds) > 0 && !slices.Contains(kinds, b.Kind) {
			continue
		}
		if !b.Serves(model) {
			continue
		}
		known = true
		if b.Healthy() {
			return b, nil
		}
	}
	if !known {
		return nil, ErrUnknownModel
	}
	return nil, ErrNoHealthy
}

// Ready reports whether at least one backend is healthy.
func (p *Pool) Ready() bool {
	for _, b := range p.backends {
		if b.Healthy() {
			return true
		}
	}
	return false
}

// A Checker probes every backend's health path on an interval.
type Checker struct {
	Pool     *Pool
	Client   *http.Client
	Path     string
	Interval time.Duration
	Timeout  time.Duration
	Log      *slog.Logger
	// OnChange, if set, is called when a backend's health flips.
	OnChange func(b *Backend, healthy bool)
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
