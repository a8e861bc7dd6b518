package latency

import (
	"cmp"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// MaxBackends bounds the backends a ByBackend keeps; the gateway's come
// from its configuration, far fewer.
const MaxBackends = 64

// ByBackend keeps one model's time to first token and end-to-end latency
// per backend over the last analyzers.window: which backend serves the
// model slowly. It judges nothing (the model's Monitor does, and
// backend_slow compares backends); it only shows. It is safe for
// concurrent use.
type ByBackend struct {
	cfg config.Analyzers

	mu     sync.Mutex
	series map[string]*window.Shared[pairSummary, *pairSummary]
}

// NewByBackend returns an empty ByBackend for validated settings, with
// a series for each of backends (the configured ones: other replicas'
// answers from them are read before this one has its own).
func NewByBackend(cfg config.Analyzers, backends []string) *ByBackend {
	m := &ByBackend{cfg: cfg, series: map[string]*window.Shared[pairSummary, *pairSummary]{}}
	for _, b := range backends {
		if len(m.series) < MaxBackends {
			m.series[b] = window.NewShared[pairSummary](cfg.Bucket, m.span(), nil)
		}
	}
	return m
}

// span is the buckets of the window and the one in progress.
func (m *ByBackend) span() int { return int(m.cfg.Window/m.cfg.Bucket) + 2 }

// Add records one response of backend that ended at t.
func (m *ByBackend) Add(t time.Time, backend string, s *Sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sh := m.series[backend]
	if sh == nil {
		if len(m.series) >= MaxBackends {
			return
		}
		sh = window.NewShared[pairSummary](m.cfg.Bucket, m.span(), nil)
		m.series[backend] = sh
	}
	if b := sh.Bucket(t); b != nil {
		b.add(s)
	}
}

// BackendStat is one backend's latency for one model.
type BackendStat struct {
	Backend   string    `json:"backend"`
	Responses int64     `json:"responses"`
	TTFT      Quantiles `json:"ttft_ms"`
	E2E       Quantiles `json:"e2e_ms"`
}

// Evaluate returns each backend's quantiles over the window ending now,
// by backend name; backends without a response in it are left out.
func (m *ByBackend) Evaluate(now time.Time) []BackendStat {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []BackendStat
	for name, sh := range m.series {
		view, _ := sh.View()
		w, _ := view.Range(now.Add(-m.cfg.Window), now.Add(time.Nanosecond))
		if w.e2e.Count() == 0 {
			continue
		}
		out = append(out, BackendStat{Backend: name, Responses: w.e2e.Count(), TTFT: quantiles(&w.ttft), E2E: quantiles(&w.e2e)})
	}
	slices.SortFunc(out, func(a, b BackendStat) int { return cmp.Compare(a.Backend, b.Backend) })
	return out
}

// quantiles returns q's P50, P95 and P99 in milliseconds.
func quantiles(q *window.Sketch) Quantiles {
	ms := func(p float64) stats.Num { return stats.Num(q.Quantile(p) * 1000) }
	return Quantiles{P50: ms(0.5), P95: ms(0.95), P99: ms(0.99)}
}

// Shared hands each backend's series to the replica flusher as
// "latency-by-backend/<backend>", under the lock. Of a backend that is
// not configured (none of the gateway's are not), another replica's
// answers are read once this one has its own.
func (m *ByBackend) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, sh := range m.series {
		f("latency-by-backend/"+name, sh)
	}
}

// pairSummary is one bucket of one backend's latency: sketches of the
// time to first token and the end-to-end latency, in seconds.
type pairSummary struct {
	ttft, e2e window.Sketch
}

func (s *pairSummary) add(x *Sample) {
	if v := x.Values[TTFT]; !math.IsNaN(v) && v > 0 {
		s.ttft.Add(v)
	}
	if v := x.Values[E2E]; !math.IsNaN(v) && v > 0 {
		s.e2e.Add(v)
	}
}

func (s *pairSummary) Merge(o *pairSummary) error {
	if err := s.ttft.Merge(&o.ttft); err != nil {
		return err
	}
	return s.e2e.Merge(&o.e2e)
}

func (s *pairSummary) Reset() {
	s.ttft.Reset()
	s.e2e.Reset()
}

// MarshalBinary encodes s (a window.Codec).
func (s *pairSummary) MarshalBinary() ([]byte, error) { return window.EncodeParts(&s.ttft, &s.e2e) }

// UnmarshalBinary decodes s.
func (s *pairSummary) UnmarshalBinary(b []byte) error {
	return window.DecodeParts(b, &s.ttft, &s.e2e)
}
