package upstream

import (
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/config"
)

func newTestPool(t *testing.T, cfgs ...config.Backend) *Pool {
	t.Helper()
	p, err := NewPool(cfgs, config.Default().Health, config.Default().Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrefixWindowServer: the server's counters give the hit rate over
// the last PrefixWindow; a reset (restart) is bridged, never a negative
// count; samples older than the window drop out.
func TestPrefixWindowServer(t *testing.T) {
	p := newTestPool(t, config.Backend{Name: "a", URL: "http://h:1", Weight: 1})
	b := p.Backends()[0]
	t0 := time.Unix(1764400000, 0)
	nan := math.NaN()
	steps := []struct {
		at      time.Duration
		q, h    float64 // the server's raw counters
		want    PrefixCache
		comment string
	}{
		{0, 100, 0, PrefixCache{HitRate: nan, Source: "server", Queries: 100, Hits: 0, ServerQueries: 100, ServerHits: 0}, "first reading: no window yet"},
		{10 * time.Second, 300, 100, PrefixCache{HitRate: 0.5, Source: "server", WindowQueries: 200, WindowHits: 100, Queries: 300, Hits: 100, ServerQueries: 300, ServerHits: 100}, "200 queried, 100 hit"},
		{20 * time.Second, 50, 50, PrefixCache{HitRate: 0.6, Source: "server", WindowQueries: 250, WindowHits: 150, Queries: 350, Hits: 150, ServerQueries: 350, ServerHits: 150}, "restart: counted from zero again"},
		{75 * time.Second, 150, 50, PrefixCache{HitRate: 0, Source: "server", WindowQueries: 100, WindowHits: 0, Queries: 450, Hits: 150, ServerQueries: 450, ServerHits: 150}, "the first two samples left the window"},
	}
	for _, st := range steps {
		now := t0.Add(st.at)
		b.StoreServerLoad(&ServerLoad{Waiting: nan, Running: nan, KVCache: nan, PrefixQueries: st.q, PrefixHits: st.h, AsOf: now})
		got := b.samplePrefix(now, time.Minute)
		st.want.AsOf = now
		if diff := cmp.Diff(&st.want, got, cmpopts.EquateNaNs()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.comment, diff)
		}
		if got.WindowQueries < 0 || got.WindowHits < 0 {
			t.Errorf("%s: negative window counts %v %v", st.comment, got.WindowQueries, got.WindowHits)
		}
	}
	if got := b.PrefixCache(); got == nil || got.AsOf != t0.Add(75*time.Second) {
		t.Errorf("stored figures %+v, want the last sample's", got)
	}
}

// TestPrefixWindowGateway: without server counters (or with a stale
// reading) the answers' cached tokens give the hit rate.
func TestPrefixWindowGateway(t *testing.T) {
	p := newTestPool(t, config.Backend{Name: "a", URL: "http://h:1", Weight: 1}, config.Backend{Name: "b", URL: "http://h:2", Weight: 1})
	a, b := p.Backends()[0], p.Backends()[1]
	t0 := time.Unix(1764400000, 0)
	a.ObserveTokens(100, 0)
	a.ObserveTokens(0, 5)     // no prompt: nothing to count
	a.ObserveTokens(10, 50)   // cached beyond the prompt: clamped
	a.ObserveTokens(-3, -100) // nonsense: ignored
	if a.PromptTokens() != 110 || a.CachedTokens() != 10 {
		t.Fatalf("counters %d/%d, want 110/10", a.PromptTokens(), a.CachedTokens())
	}
	// A stale server reading is not used.
	a.StoreServerLoad(&ServerLoad{PrefixQueries: 1e6, PrefixHits: 1e6, AsOf: t0.Add(-time.Hour)})
	a.samplePrefix(t0, 10*time.Second)
	b.samplePrefix(t0, 10*time.Second)
	a.ObserveTokens(100, 80)
	b.ObserveTokens(300, 0)
	got := a.samplePrefix(t0.Add(5*time.Second), 10*time.Second)
	want := &PrefixCache{HitRate: 0.8, Source: "gateway", WindowQueries: 100, WindowHits: 80, Queries: 210, Hits: 90,
		ServerQueries: math.NaN(), ServerHits: math.NaN(), AsOf: t0.Add(5 * time.Second)}
	if diff := cmp.Diff(want, got, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	b.samplePrefix(t0.Add(5*time.Second), 10*time.Second)
	// The fleet: (80 + 0) / (100 + 300).
	f := p.FleetPrefixCache()
	if f.HitRate != 0.2 || f.WindowQueries != 400 || f.Queries != 510 || f.Hits != 90 {
		t.Errorf("fleet %+v, want hit rate 0.2 over 400 tokens, 90/510 in all", f)
	}
}

// TestPrefixNoTraffic: a window without prompt tokens has no hit rate,
// and neither has a fleet without figures.
func TestPrefixNoTraffic(t *testing.T) {
	p := newTestPool(t, config.Backend{Name: "a", URL: "http://h:1", Weight: 1})
	if f := p.FleetPrefixCache(); !math.IsNaN(f.HitRate) {
		t.Errorf("fleet before any sample: %v, want NaN", f.HitRate)
	}
	b := p.Backends()[0]
	t0 := time.Unix(1764400000, 0)
	b.samplePrefix(t0, 0)
	if got := b.samplePrefix(t0.Add(time.Second), 0); !math.IsNaN(got.HitRate) || got.Source != "gateway" {
		t.Errorf("idle backend: %+v, want NaN from the gateway", got)
	}
}

// TestPrefixSamplesBounded: a scrape interval far below the window keeps
// at most maxPrefixSamples samples.
func TestPrefixSamplesBounded(t *testing.T) {
	p := newTestPool(t, config.Backend{Name: "a", URL: "http://h:1", Weight: 1})
	b := p.Backends()[0]
	t0 := time.Unix(1764400000, 0)
	for i := range 3 * maxPrefixSamples {
		b.ObserveTokens(10, 5)
		b.samplePrefix(t0.Add(time.Duration(i)*time.Millisecond), 0)
	}
	if n := len(b.prefix.samples); n != maxPrefixSamples {
		t.Errorf("%d samples kept, want %d", n, maxPrefixSamples)
	}
	if got := b.PrefixCache(); got.HitRate != 0.5 {
		t.Errorf("hit rate %v, want 0.5", got.HitRate)
	}
}
