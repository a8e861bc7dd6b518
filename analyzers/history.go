package analyzers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
)

// HistoryPoint is one evaluation's headline values, as GET /admin/history
// lists them: per signal its state and key statistics (nil: the signal is
// disabled), the alert thresholds in force for the gateway-wide series,
// the backends as the gateway saw them and the active alerts.
type HistoryPoint struct {
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

// history is the bounded record of evaluations. It is safe for concurrent
// use.
type history struct {
	mu       sync.Mutex
	interval time.Duration // the resolution of fine
	fine     []HistoryPoint
	coarse   []HistoryPoint // the first point of each minute
	unsent   []HistoryPoint // recorded since the last share, at most fineCap
}

func newHistory(interval time.Duration) *history { return &history{interval: interval} }

// add appends p to a ring of capacity n, dropping the oldest.
func add(ring []HistoryPoint, p HistoryPoint, n int) []HistoryPoint {
	ring = append(ring, p)
	if d := len(ring) - n; d > 0 {
		ring = slices.Delete(ring, 0, d)
	}
	return ring
}

func (h *history) record(p HistoryPoint) {
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
func (h *history) local(since time.Time) []HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HistoryPoint
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

// share writes the points recorded since the last call to the store (as
// replica, under seq), each in its fine bucket and, when it opens a
// minute, its minute bucket. On failure they are kept for the next call.
func (h *history) share(ctx context.Context, s state.Store, replica string, seq uint64) error {
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
func remote(ctx context.Context, s state.Store, replica, series string, res time.Duration, from, to time.Time) ([]HistoryPoint, error) {
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
	var out []HistoryPoint
	last := int64(math.MinInt64)
	for _, b := range bs {
		if b.Replica == replica || b.Start == last {
			continue
		}
		var p HistoryPoint
		if json.Unmarshal(b.Payload, &p) != nil || p.Time.Before(from) || !p.Time.Before(to) {
			continue
		}
		last = b.Start
		out = append(out, p)
	}
	return out, nil
}

// resample keeps the last point of each step (points oldest first).
func resample(pts []HistoryPoint, step time.Duration) []HistoryPoint {
	if step <= 0 || len(pts) == 0 {
		return pts
	}
	out := make([]HistoryPoint, 0, len(pts))
	for _, p := range pts {
		if n := len(out); n > 0 && out[n-1].Time.Truncate(step).Equal(p.Time.Truncate(step)) {
			out[n-1] = p
			continue
		}
		out = append(out, p)
	}
	return out
}

// History is GET /admin/history: the points since since, at most one per
// step (zero: every point kept), oldest first. With Sharing, a span this
// replica did not record (it started later) is filled from the other
// replicas' points in the store.
type History struct {
	// Resolution is the interval of the recent points; older ones are one
	// a minute.
	Resolution time.Duration
	Step       time.Duration
	Points     []HistoryPoint
}

// MarshalJSON writes durations as Go duration strings.
func (h History) MarshalJSON() ([]byte, error) {
	pts := h.Points
	if pts == nil {
		pts = []HistoryPoint{}
	}
	return json.Marshal(struct {
		Resolution string         `json:"resolution"`
		Step       string         `json:"step"`
		Points     []HistoryPoint `json:"points"`
	}{h.Resolution.String(), h.Step.String(), pts})
}

// ErrHistorySpan is returned for a since older than the history keeps.
var ErrHistorySpan = errors.New("the history keeps 24 hours")

// History returns the evaluations since since, at most one per step.
func (p *Pipeline) History(ctx context.Context, since time.Time, step time.Duration) (History, error) {
	now := p.now()
	if since.Before(now.Add(-24 * time.Hour)) {
		since = now.Add(-24 * time.Hour)
	}
	pts := p.hist.local(since)
	if p.share != nil {
		to := now
		if len(pts) > 0 {
			to = pts[0].Time
		}
		if to.Sub(since) > 2*p.cfg.Interval {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			st, rep := p.share.cfg.Store, p.share.cfg.Replica
			// Minute points for the span, fine ones for its recent part.
			fineFrom := later(since, now.Add(-p.cfg.Interval*fineCap))
			older, errC := remote(ctx, st, rep, historyCoarseSeries, coarseRes, since, earlier(fineFrom, to))
			recent, errF := remote(ctx, st, rep, historyFineSeries, p.cfg.Interval, fineFrom, to)
			if err := errors.Join(errC, errF); err != nil {
				p.log.Debug("shared history not read", "err", err)
			}
			pts = append(append(older, recent...), pts...)
		}
	}
	return History{Resolution: p.cfg.Interval, Step: step, Points: resample(pts, step)}, nil
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

// HistoryJSON is History as JSON, for GET /admin/history.
func (p *Pipeline) HistoryJSON(ctx context.Context, since time.Time, step time.Duration) ([]byte, error) {
	h, err := p.History(ctx, since, step)
	if err != nil {
		return nil, err
	}
	return json.Marshal(h)
}

// record adds an evaluation to the history, with the backends as the
// gateway sees them now and the alert engine's state.
func (p *Pipeline) record(_ context.Context, s *Signals) {
	pt := HistoryPoint{Time: s.Evaluated, Thresholds: map[string]ThresholdPoint{}, Alerts: []AlertPoint{}}
	if d := s.Drift; d != nil {
		dp := &DriftPoint{State: d.State, Score: stats.Num(d.Score), Reference: d.Reference, Features: map[string]stats.Num{}}
		for _, f := range d.Features {
			if v, ok := dp.Features[f.Name]; !ok || f.PSI > float64(v) {
				dp.Features[f.Name] = stats.Num(f.PSI)
			}
		}
		pt.Drift = dp
	}
	if c := s.Confidence; c != nil {
		pt.Confidence = &ConfidencePoint{State: c.State, Confidence: c.Confidence, MeanLogprob: c.MeanLogprob,
			Entropy: c.Entropy, LowShare: c.LowShare, Drop: c.Drop}
	}
	if o := s.Output; o != nil {
		pt.Output = &OutputPoint{State: o.State, Perplexity: o.Perplexity, Current: o.Current,
			BaselineMean: o.BaselineMean, BaselineStd: o.BaselineStd}
	}
	if l := s.Latency; l != nil {
		pt.Latency = &LatencyPoint{State: l.State, TTFTP95: l.TTFT.P95, E2EP95: l.E2E.P95, ITLP95: l.ITL.P95}
	}
	if pr := s.Precision; pr != nil {
		for _, x := range pr.Pairs {
			pt.Precision = append(pt.Precision, PrecisionPoint{Backend: x.Backend, Reference: x.Reference, State: x.State,
				KL: x.KL, Top1Agreement: x.Top1Agreement})
		}
	}
	for _, t := range s.Thresholds {
		key := t.Rule // a gateway-wide series; the others name their label
		switch {
		case t.Labels["backend"] != "":
			key += "{backend=" + t.Labels["backend"] + "}"
		case t.Labels["window"] != "":
			key += "{window=" + t.Labels["window"] + "}"
		case t.Rule == alert.RuleErrorRate && t.Labels["model"] != "":
			key += "{model=" + t.Labels["model"] + "}"
		}
		pt.Thresholds[key] = ThresholdPoint{Threshold: t.Threshold, Source: t.Source}
	}
	if p.backendStates != nil {
		pt.Backends = p.backendStates()
	}
	for _, a := range p.alerts.Alerts() {
		if a.State != alert.Resolved {
			pt.Alerts = append(pt.Alerts, AlertPoint{Name: a.Name, Rule: a.Rule, State: a.State, Labels: maps.Clone(a.Labels)})
		}
	}
	p.hist.record(pt)
}
