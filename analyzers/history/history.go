// Package history is the bounded record of the pipeline's evaluations
// behind GET /admin/history: a ring at the evaluation interval and one
// point a minute for a day, shared with the other replicas through the
// store so that a replica fills the span it did not record.
package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
)

// Point is one evaluation's headline values, as GET /admin/history
// lists them: per signal its state and key statistics (nil: the signal is
// disabled), the alert thresholds in force for the gateway-wide series,
// the backends as the gateway saw them and the active alerts.
type Point struct {
	Time       time.Time                 `json:"t"`
	Drift      *DriftPoint               `json:"drift,omitempty"`
	Confidence *ConfidencePoint          `json:"confidence,omitempty"`
	Output     *OutputPoint              `json:"output,omitempty"`
	Latency    *LatencyPoint             `json:"latency,omitempty"`
	Precision  []PrecisionPoint          `json:"precision,omitempty"`
	Thresholds map[string]ThresholdPoint `json:"thresholds"`
	Backends   []exchange.BackendState   `json:"backends"`
	Alerts     []AlertPoint              `json:"alerts"`
}

// DriftPoint is the input-drift signal at one point: its score and each
// feature's PSI (the largest of its tests).
type DriftPoint struct {
	State     string               `json:"state"`
	Score     stats.Num            `json:"score"`
	Reference string               `json:"reference"`
	Features  map[string]stats.Num `json:"features"`
}

// ConfidencePoint is the confidence signal at one point.
type ConfidencePoint struct {
	State       string    `json:"state"`
	Confidence  stats.Num `json:"confidence"`
	MeanLogprob stats.Num `json:"mean_logprob"`
	Entropy     stats.Num `json:"entropy"`
	LowShare    stats.Num `json:"low_share"`
	Drop        stats.Num `json:"drop"`
}

// OutputPoint is the output-drift signal at one point: the last complete
// minute's perplexity, the current minute's, and the baseline band.
type OutputPoint struct {
	State        string    `json:"state"`
	Perplexity   stats.Num `json:"perplexity"`
	Current      stats.Num `json:"current_perplexity"`
	BaselineMean stats.Num `json:"baseline_mean"`
	BaselineStd  stats.Num `json:"baseline_std"`
}

// LatencyPoint is the latency signal at one point: window P95s, in ms.
type LatencyPoint struct {
	State   string    `json:"state"`
	TTFTP95 stats.Num `json:"ttft_p95"`
	E2EP95  stats.Num `json:"e2e_p95"`
	ITLP95  stats.Num `json:"itl_p95"`
}

// PrecisionPoint is one compared pair at one point.
type PrecisionPoint struct {
	Backend       string    `json:"backend"`
	Reference     string    `json:"reference"`
	State         string    `json:"state"`
	KL            stats.Num `json:"kl"`
	Top1Agreement stats.Num `json:"top1_agreement"`
}

// ThresholdPoint is a rule's threshold in force and where it comes from.
type ThresholdPoint struct {
	Threshold stats.Num             `json:"threshold"`
	Source    alert.ThresholdSource `json:"source"`
}

// AlertPoint is an active (pending, firing or silenced) alert at one point.
type AlertPoint struct {
	Name   string            `json:"name"`
	Rule   string            `json:"rule"`
	State  alert.State       `json:"state"`
	Labels map[string]string `json:"labels"`
}

// The history keeps fineCap points at the evaluation interval and one a
// minute for a day; both are bounded whatever the traffic.
const (
	fineCap   = 1800 // 30 minutes at 1 s, 7.5 hours at 15 s
	coarseCap = 24 * 60
	coarseRes = time.Minute
)

// Ring is the bounded record of evaluations. It is safe for concurrent
// use.
type Ring struct {
	mu       sync.Mutex
	interval time.Duration // the resolution of fine
	fine     []Point
	coarse   []Point // the first point of each minute
	unsent   []Point // recorded since the last share, at most fineCap
}

// NewRing returns an empty ring whose recent points are interval apart.
func NewRing(interval time.Duration) *Ring { return &Ring{interval: interval} }

// add appends p to a ring of capacity n, dropping the oldest.
func add(ring []Point, p Point, n int) []Point {
	ring = append(ring, p)
	if d := len(ring) - n; d > 0 {
		ring = slices.Delete(ring, 0, d)
	}
	return ring
}

// Record adds a point, the newest.
func (h *Ring) Record(p Point) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fine = add(h.fine, p, fineCap)
	if n := len(h.coarse); n == 0 || p.Time.Truncate(coarseRes).After(h.coarse[n-1].Time.Truncate(coarseRes)) {
		h.coarse = add(h.coarse, p, coarseCap)
	}
	h.unsent = add(h.unsent, p, fineCap)
}

// local returns the points since since, oldest first: the minute points
// older than the fine ring, then the fine ring.
func (h *Ring) local(since time.Time) []Point {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Point
	fineFrom := time.Time{}
	if len(h.fine) > 0 {
		fineFrom = h.fine[0].Time
	}
	for _, p := range h.coarse {
		if !p.Time.Before(since) && (fineFrom.IsZero() || p.Time.Before(fineFrom)) {
			out = append(out, p)
		}
	}
	for _, p := range h.fine {
		if !p.Time.Before(since) {
			out = append(out, p)
		}
	}
	return out
}

// Store series of the shared history.
const (
	historyFineSeries   = "history/fine"
	historyCoarseSeries = "history/coarse"
)

// Share writes the points recorded since the last call to the store (as
// replica, under seq), each in its fine bucket and, when it opens a
// minute, its minute bucket. On failure they are kept for the next call.
func (h *Ring) Share(ctx context.Context, s state.Store, replica string, seq uint64) error {
	h.mu.Lock()
	pts := h.unsent
	h.unsent = nil
	h.mu.Unlock()
	if len(pts) == 0 {
		return nil
	}
	var fine, coarse []state.Bucket
	for _, p := range pts {
		b, err := json.Marshal(p)
		if err != nil {
			return err
		}
		fine = append(fine, state.Bucket{Start: p.Time.UnixNano() / int64(h.interval), Payload: b})
		coarse = append(coarse, state.Bucket{Start: p.Time.UnixNano() / int64(coarseRes), Payload: b})
	}
	err := s.PutBuckets(ctx, historyFineSeries, replica, seq, fine, h.interval*fineCap)
	if err == nil {
		// A later point of the same minute never replaces its first.
		coarse = slices.CompactFunc(coarse, func(a, b state.Bucket) bool { return a.Start == b.Start })
		err = putFirst(ctx, s, replica, coarse)
	}
	if err != nil {
		h.mu.Lock()
		h.unsent = append(pts, h.unsent...)
		if d := len(h.unsent) - fineCap; d > 0 {
			h.unsent = slices.Delete(h.unsent, 0, d)
		}
		h.mu.Unlock()
	}
	return err
}

// putFirst writes the minute buckets, each with its minute number as its
// sequence: the store ignores a write whose sequence is not newer than
// the stored one, so a minute keeps its first point whichever flush
// writes later points of it.
func putFirst(ctx context.Context, s state.Store, replica string, bs []state.Bucket) error {
	for _, b := range bs {
		if err := s.PutBuckets(ctx, historyCoarseSeries, replica, uint64(b.Start), []state.Bucket{b}, 24*time.Hour); err != nil {
			return err
		}
	}
	return nil
}

// remote reads the other replicas' points of series (resolution res)
// in [from, to), one per bucket (the replica first in name order).
func remote(ctx context.Context, s state.Store, replica, series string, res time.Duration, from, to time.Time) ([]Point, error) {
	if !from.Before(to) {
		return nil, nil
	}
	bs, err := s.Buckets(ctx, series, from.UnixNano()/int64(res), (to.UnixNano()-1)/int64(res))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(bs, func(a, b state.ReplicaBucket) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.Replica, b.Replica))
	})
	var out []Point
	last := int64(math.MinInt64)
	for _, b := range bs {
		if b.Replica == replica || b.Start == last {
			continue
		}
		var p Point
		if json.Unmarshal(b.Payload, &p) != nil || p.Time.Before(from) || !p.Time.Before(to) {
			continue
		}
		last = b.Start
		out = append(out, p)
	}
	return out, nil
}

// Resample keeps the last point of each step (points oldest first).
func Resample(pts []Point, step time.Duration) []Point {
	if step <= 0 || len(pts) == 0 {
		return pts
	}
	out := make([]Point, 0, len(pts))
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].Time.Truncate(step).Equal(p.Time.Truncate(step)) {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// Result is GET /admin/history: the points since since, at most one per
// step (zero: every point kept), oldest first. With sharing, a span this
// replica did not record (it started later) is filled from the other
// replicas' points in the store.
type Result struct {
	// Resolution is the interval of the recent points; older ones are one
	// a minute.
	Resolution time.Duration
	Step       time.Duration
	Points     []Point
}

// MarshalJSON writes durations as Go duration strings.
func (h Result) MarshalJSON() ([]byte, error) {
	pts := h.Points
	if pts == nil {
		pts = []Point{}
	}
	return json.Marshal(struct {
		Resolution string  `json:"resolution"`
		Step       string  `json:"step"`
		Points     []Point `json:"points"`
	}{h.Resolution.String(), h.Step.String(), pts})
}

// ErrSpan is returned for a since older than the history keeps.
var ErrSpan = errors.New("the history keeps 24 hours")

// Points returns the points since since, oldest first: the minute points
// older than the fine ring, then the fine ring. With a store (st not nil),
// when this replica's own points start more than two intervals after
// since (it started later), the span before them is filled from the other
// replicas' points: minute points for the span, fine ones for its recent
// part. The error tells what could not be read of them; the points are
// returned whatever it is.
func (h *Ring) Points(ctx context.Context, st state.Store, replica string, since, now time.Time) ([]Point, error) {
	pts := h.local(since)
	if st == nil {
		return pts, nil
	}
	to := now
	if len(pts) > 0 {
		to = pts[0].Time
	}
	if to.Sub(since) <= 2*h.interval {
		return pts, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	fineFrom := later(since, now.Add(-h.interval*fineCap))
	older, errC := remote(ctx, st, replica, historyCoarseSeries, coarseRes, since, earlier(fineFrom, to))
	recent, errF := remote(ctx, st, replica, historyFineSeries, h.interval, fineFrom, to)
	return append(append(older, recent...), pts...), errors.Join(errC, errF)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
