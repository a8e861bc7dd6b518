// Package latency turns per-response timings into signal 3, latency
// variance: windows of end-to-end latency, time to first token, inter-token
// latency (a stream's median and P95 gap between content chunks), its
// longest stall and tokens per second, each with its mean, σ and
// P50/P95/P99; an anomaly whenever a response is beyond the reference's
// mean + k·σ; the signal is "anomalous" when the current window's
// anomalous share rises clearly above the reference's.
package latency

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
)

// States of the signal.
const (
	StateUnknown   = "unknown"
	StateOK        = "ok"
	StateAnomalous = "anomalous"
)

// Metrics measured per response. The gap metrics (ITL, ITLP95, Stall) are
// read from the times between consecutive content chunks of the same
// choice of a stream, as they reached the gateway (exchange.Gaps), not
// derived from the total: a stream that pauses once for seconds
// and otherwise runs at pace shows in Stall, where an average would hide
// it.
const (
	E2E    = iota // request received to last byte, seconds
	TTFT          // to the first byte of a stream, seconds
	ITL           // a stream's median gap between content chunks, seconds
	ITLP95        // a stream's 95th-percentile gap, seconds
	Stall         // a stream's longest gap, seconds
	TPS           // output tokens per second of generation
	NumMetrics
)

// Names are the metric names used in labels and JSON.
var Names = [NumMetrics]string{
	E2E: "e2e", TTFT: "ttft", ITL: "itl", ITLP95: "itl_p95", Stall: "stall", TPS: "tokens_per_second",
}

// lowerIsWorse marks metrics whose anomalies are low values.
var lowerIsWorse = [NumMetrics]bool{TPS: true}

// scale converts a metric's value to its unit in Result: milliseconds for
// times, tokens per second as it is.
var scale = [NumMetrics]float64{E2E: 1000, TTFT: 1000, ITL: 1000, ITLP95: 1000, Stall: 1000, TPS: 1}

// Sample is one response's timings; NaN where a metric does not apply
// (TTFT and the gaps of a non-streaming response, the gaps of a stream
// with fewer than two content chunks).
type Sample struct {
	Values [NumMetrics]float64
	// MeanLogprob is the response's mean token logprob, NaN when unknown,
	// for the latency–confidence correlation.
	MeanLogprob float64
}

// summary is one bucket: per metric its moments, a quantile sketch and
// anomaly counts; and the latency–confidence co-moments.
type summary struct {
	m         [NumMetrics]window.Moments
	q         [NumMetrics]window.Sketch
	checked   [NumMetrics]int64 // values compared with a reference
	anomalous [NumMetrics]int64
	co        coMoments
}

func (s *summary) Merge(o *summary) error {
	for i := range NumMetrics {
		s.m[i].Merge(&o.m[i])
		if err := s.q[i].Merge(&o.q[i]); err != nil {
			return err
		}
		s.checked[i] += o.checked[i]
		s.anomalous[i] += o.anomalous[i]
	}
	s.co.merge(&o.co)
	return nil
}

func (s *summary) Reset() {
	for i := range NumMetrics {
		s.m[i].Reset()
		s.q[i].Reset()
	}
	s.checked, s.anomalous, s.co = [NumMetrics]int64{}, [NumMetrics]int64{}, coMoments{}
}

func count(s *summary) int64 { return s.m[E2E].Count() }

// coMoments are the sums of a bivariate sample (x: end-to-end latency,
// y: mean logprob) from which Pearson's r follows; they merge by addition.
type coMoments struct {
	n                     float64
	sx, sy, sxx, syy, sxy float64
}

func (c *coMoments) add(x, y float64) {
	c.n++
	c.sx += x
	c.sy += y
	c.sxx += x * x
	c.syy += y * y
	c.sxy += x * y
}

func (c *coMoments) merge(o *coMoments) {
	c.n += o.n
	c.sx += o.sx
	c.sy += o.sy
	c.sxx += o.sxx
	c.syy += o.syy
	c.sxy += o.sxy
}

// r is Pearson's correlation coefficient, NaN with fewer than 3 pairs or
// no variance.
func (c *coMoments) r() float64 {
	if c.n < 3 {
		return math.NaN()
	}
	cov := c.sxy - c.sx*c.sy/c.n
	vx := c.sxx - c.sx*c.sx/c.n
	vy := c.syy - c.sy*c.sy/c.n
	if !(vx > 0 && vy > 0) {
		return math.NaN()
	}
	return cov / math.Sqrt(vx*vy)
}

// A Monitor keeps latency windows. It is safe for concurrent use.
type Monitor struct {
	cfg   config.Analyzers
	alpha atomic.Uint64 // SetAlpha's level, float64 bits; 0: cfg.Alpha

	mu      sync.Mutex
	buckets *window.Shared[summary, *summary]
	limits  [NumMetrics]float64 // anomaly thresholds from the last evaluation; NaN: none yet
	pinned  *summary
	streak  int
}

// New returns a Monitor for validated analyzer settings.
func New(cfg config.Analyzers) *Monitor {
	span := int((cfg.Window+cfg.Reference)/cfg.Bucket) + 2
	m := &Monitor{cfg: cfg, buckets: window.NewShared[summary](cfg.Bucket, span, nil)}
	for i := range m.limits {
		m.limits[i] = math.NaN()
	}
	return m
}

// SetAlpha sets the significance level of the monitor's tests in place
// of analyzers.alpha; zero restores it. The analyzers divide alpha among
// the segments they test (Bonferroni), so that many models do not alarm
// by chance more often than one. Safe for concurrent use.
func (m *Monitor) SetAlpha(a float64) { m.alpha.Store(math.Float64bits(a)) }

// level is the significance level in force.
func (m *Monitor) level() float64 {
	if b := m.alpha.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return m.cfg.Alpha
}

// Add records one response that ended at t and reports, per metric,
// whether it was anomalous against the latest reference.
func (m *Monitor) Add(t time.Time, s *Sample) (anomalies [NumMetrics]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.buckets.Bucket(t)
	if b == nil {
		return anomalies
	}
	for i, v := range s.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		b.m[i].Add(v)
		b.q[i].Add(v)
		if lim := m.limits[i]; !math.IsNaN(lim) {
			b.checked[i]++
			if (!lowerIsWorse[i] && v > lim) || (lowerIsWorse[i] && v < lim) {
				b.anomalous[i]++
				anomalies[i] = true
			}
		}
	}
	if x := s.Values[E2E]; !math.IsNaN(x) && !math.IsNaN(s.MeanLogprob) {
		b.co.add(x, s.MeanLogprob)
	}
	return anomalies
}

// Shared hands the monitor's series to the replica flusher, under the
// monitor's lock.
func (m *Monitor) Shared(f func(name string, s window.Sharer)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f("latency", m.buckets)
}

// Pin makes the current window the reference.
func (m *Monitor) Pin(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	view, _ := m.buckets.View()
	cur, _, _, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	m.pinned = cur
}

// Quantiles are a metric's quantiles in milliseconds (tokens per second
// for that metric).
type Quantiles struct {
	P50 stats.Num `json:"p50"`
	P95 stats.Num `json:"p95"`
	P99 stats.Num `json:"p99"`
}

// Stat describes one metric in the current window.
type Stat struct {
	Quantiles
	Mean stats.Num `json:"mean"`
	Std  stats.Num `json:"std"`
	// Limit is the anomaly threshold: reference mean ± k·σ.
	Limit stats.Num `json:"limit"`
	// Count is the number of values in the current window.
	Count int64 `json:"count"`
	// P95Lower is a one-sided 90% lower confidence bound of the P95: the
	// window's order statistic that the true P95 exceeds with probability
	// 0.9 (stats.QuantileLowerRank); null with too few values.
	P95Lower stats.Num `json:"p95_lower"`
	// AnomalousShare and RefAnomalousShare are the shares of checked
	// values beyond the limit in the current window and the reference.
	AnomalousShare    stats.Num `json:"anomalous_share"`
	RefAnomalousShare stats.Num `json:"reference_anomalous_share"`
	Anomalous         bool      `json:"anomalous"`
}

// Result is the latency signal, as /admin/signals shows it. Times are in
// milliseconds.
type Result struct {
	State     string          `json:"state"`
	TTFT      Quantiles       `json:"ttft_ms"`
	E2E       Quantiles       `json:"e2e_ms"`
	ITL       Quantiles       `json:"itl_ms"`     // of the responses' median gaps
	ITLP95    Quantiles       `json:"itl_p95_ms"` // of the responses' P95 gaps
	Stall     Quantiles       `json:"stall_ms"`   // of the responses' longest gaps
	TPS       Quantiles       `json:"tokens_per_second"`
	Metrics   map[string]Stat `json:"metrics"`
	Anomalies int64           `json:"anomalies"` // anomalous values in the current window, all metrics
	Responses int64           `json:"responses"`
	Reference string          `json:"reference"`
	// Correlation is Pearson's r between end-to-end latency and mean token
	// logprob in the current window (null without logprobs).
	Correlation stats.Num `json:"latency_confidence_correlation"`
	Streak      int       `json:"streak"`
	// Reason says why the state is "unknown"; empty otherwise.
	Reason string `json:"reason,omitempty"`
}

// Evaluate computes the signal as of now and refreshes the anomaly limits
// from the reference.
func (m *Monitor) Evaluate(now time.Time) Result { return m.evaluate(now, true) }

// Peek is Evaluate without counting the evaluation: the alarm streak
// (analyzers.consecutive evaluations in a row) neither grows nor resets,
// so that reading the signals more often than analyzers.interval (the
// admin API, evaluating on read) does not change when they alarm.
func (m *Monitor) Peek(now time.Time) Result { return m.evaluate(now, false) }

func (m *Monitor) evaluate(now time.Time, advance bool) Result {
	m.mu.Lock()
	view, _ := m.buckets.View()
	cur, _, ref, _ := view.Split(now, m.cfg.Window, m.cfg.Reference, int64(m.cfg.MinRequests), count)
	res := Result{Reference: "rolling", Metrics: map[string]Stat{}}
	if m.pinned != nil {
		*ref = *m.pinned
		res.Reference = "pinned"
	}
	k := m.cfg.Latency.K
	min := int64(m.cfg.MinRequests)
	haveRef := count(ref) >= min
	for i := range NumMetrics {
		if haveRef && ref.m[i].Count() >= 2 {
			sign := 1.0
			if lowerIsWorse[i] {
				sign = -1
			}
			m.limits[i] = ref.m[i].Mean() + sign*k*ref.m[i].SampleStd()
		}
	}
	limits := m.limits
	m.mu.Unlock()

	res.Responses = count(cur)
	anomalous := false
	for i := range NumMetrics {
		num := func(v float64) stats.Num { return stats.Num(v * scale[i]) }
		st := Stat{
			Quantiles: Quantiles{
				P50: num(cur.q[i].Quantile(0.5)),
				P95: num(cur.q[i].Quantile(0.95)),
				P99: num(cur.q[i].Quantile(0.99)),
			},
			Mean: num(cur.m[i].Mean()), Std: num(cur.m[i].SampleStd()), Limit: num(limits[i]), Count: cur.m[i].Count(),
			P95Lower:          num(p95Lower(&cur.q[i])),
			AnomalousShare:    stats.Num(share(cur.anomalous[i], cur.checked[i])),
			RefAnomalousShare: stats.Num(share(ref.anomalous[i], ref.checked[i])),
		}
		res.Anomalies += cur.anomalous[i]
		if cur.checked[i] >= min && ref.checked[i] >= min {
			st.Anomalous = risen(cur.anomalous[i], cur.checked[i], ref.anomalous[i], ref.checked[i], m.level(), m.cfg.Latency.MinRise)
		}
		anomalous = anomalous || st.Anomalous
		res.Metrics[Names[i]] = st
	}
	q := func(i int) Quantiles { return res.Metrics[Names[i]].Quantiles }
	res.E2E, res.TTFT, res.ITL, res.ITLP95, res.Stall, res.TPS = q(E2E), q(TTFT), q(ITL), q(ITLP95), q(Stall), q(TPS)
	res.Correlation = stats.Num(cur.co.r())
	switch {
	case res.Responses < min || !haveRef:
		res.State = StateUnknown
		res.Reason = fmt.Sprintf("%d responses in the current window and %d in the reference; %d needed in each", res.Responses, count(ref), min)
	default:
		res.State = StateOK
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	if advance {
		if anomalous {
			m.streak++
		} else {
			m.streak = 0
		}
	}
	res.Streak = m.streak
	if m.streak >= m.cfg.Consecutive && res.State != StateUnknown {
		res.State = StateAnomalous
	}
	return res
}

// p95Lower is the 90% lower confidence bound of the P95 of the values in
// q: its r-th smallest value (stats.QuantileLowerRank), NaN when there is
// none. 90% rather than 95%: measured on the simulated week
// (analyzers/week_test.go, 24 requests per period), 30 of 30 stationary
// weeks stay quiet, and a 1.5× TTFT step fires after 30 to 75 minutes
// (95%: up to 75; 80%: 1 false alert in 30 weeks).
func p95Lower(q *window.Sketch) float64 {
	n := q.Count()
	r := stats.QuantileLowerRank(n, 0.95, 0.9)
	if r == 0 {
		return math.NaN()
	}
	if n == 1 {
		return q.Quantile(0)
	}
	// Sketch ranks are 0-based, floor(q·(n−1)): aim at the middle of r−1.
	return q.Quantile((float64(r-1) + 0.5) / float64(n-1))
}

func share(k, n int64) float64 {
	if n == 0 {
		return math.NaN()
	}
	return float64(k) / float64(n)
}

// risen reports whether the current anomalous share kc/nc exceeds the
// reference's kr/nr by at least minRise, significantly (one-sided
// two-proportion z-test at alpha).
func risen(kc, nc, kr, nr int64, alpha, minRise float64) bool {
	pc, pr := float64(kc)/float64(nc), float64(kr)/float64(nr)
	if pc-pr < minRise {
		return false
	}
	pooled := float64(kc+kr) / float64(nc+nr)
	se := math.Sqrt(pooled * (1 - pooled) * (1/float64(nc) + 1/float64(nr)))
	if se == 0 {
		return true
	}
	return 0.5*math.Erfc((pc-pr)/se/math.Sqrt2) < alpha
}

// MarshalBinary encodes s (a window.Codec, for sharing across replicas).
func (s *summary) MarshalBinary() ([]byte, error) {
	parts := make([]encoding.BinaryMarshaler, 0, 2*NumMetrics+1)
	for i := range NumMetrics {
		parts = append(parts, &s.m[i], &s.q[i])
	}
	head, err := window.EncodeParts(parts...)
	if err != nil {
		return nil, err
	}
	for i := range NumMetrics {
		head = binary.AppendUvarint(head, uint64(s.checked[i]))
		head = binary.AppendUvarint(head, uint64(s.anomalous[i]))
	}
	for _, f := range []float64{s.co.n, s.co.sx, s.co.sy, s.co.sxx, s.co.syy, s.co.sxy} {
		head = binary.LittleEndian.AppendUint64(head, math.Float64bits(f))
	}
	return binary.AppendUvarint(head, uint64(len(parts))), nil
}

// UnmarshalBinary decodes s.
func (s *summary) UnmarshalBinary(b []byte) error {
	// The parts carry their lengths; the counters, co-moments and the
	// part count follow them.
	parts := make([]encoding.BinaryUnmarshaler, 0, 2*NumMetrics)
	for i := range NumMetrics {
		parts = append(parts, &s.m[i], &s.q[i])
	}
	rest := b
	for i, p := range parts {
		n, k := binary.Uvarint(rest)
		if k <= 0 || uint64(len(rest)-k) < n {
			return fmt.Errorf("latency summary: part %d: %w", i, window.ErrCorrupt)
		}
		if err := p.UnmarshalBinary(rest[k : k+int(n)]); err != nil {
			return err
		}
		rest = rest[k+int(n):]
	}
	for i := range NumMetrics {
		for _, dst := range []*int64{&s.checked[i], &s.anomalous[i]} {
			v, k := binary.Uvarint(rest)
			if k <= 0 {
				return fmt.Errorf("latency summary: counts: %w", window.ErrCorrupt)
			}
			*dst, rest = int64(v), rest[k:]
		}
	}
	for _, dst := range []*float64{&s.co.n, &s.co.sx, &s.co.sy, &s.co.sxx, &s.co.syy, &s.co.sxy} {
		if len(rest) < 8 {
			return fmt.Errorf("latency summary: co-moments: %w", window.ErrCorrupt)
		}
		*dst, rest = math.Float64frombits(binary.LittleEndian.Uint64(rest)), rest[8:]
	}
	if n, k := binary.Uvarint(rest); k <= 0 || int(n) != len(parts) || k != len(rest) {
		return fmt.Errorf("latency summary: trailer: %w", window.ErrCorrupt)
	}
	return nil
}
