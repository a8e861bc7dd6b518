package analyzers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/calibrate"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/state"
)

// Sharing configures how a Pipeline shares its windows with the other
// replicas of a deployment through a state.Store.
type Sharing struct {
	Store state.Store
	// Replica names this process in the store. Empty: hostname plus a
	// random suffix.
	Replica string
	// Interval between flushes. Zero: one second.
	Interval time.Duration
}

// ReplicaID returns a name for this process: hostname-xxxxxx.
func ReplicaID() string {
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%s", host, hex.EncodeToString(b[:]))
}

// fullEvery: every this many flushes, every live bucket is rewritten, so
// that a store that lost its data (a Redis restart between two flushes)
// is whole again within that many intervals.
const fullEvery = 30

// sharer flushes the pipeline's windows to the store and imports the other
// replicas'. Its Run is owned by Pipeline.Run.
type sharer struct {
	cfg      Sharing
	ttl      time.Duration
	monitors []sharedMonitor
	log      *slog.Logger
	m        *shareMetrics
	now      func() time.Time // the pipeline's clock

	mu      sync.Mutex // serializes flushes (Run and Pipeline.Flush)
	n       int
	lastSeq uint64
	dropped map[string]int64 // per series, as last seen
	// pinned is the latest baseline pin applied here; onPin applies one
	// that another replica made.
	pinned time.Time
	onPin  func(time.Time)
	// calib, when set, shares calibration: remembered responses and labels.
	calib    *Pipeline
	labelsAt int64 // labelVersion last written
	failing  bool
	warned   atomic.Int64 // unix seconds of the last warning
}

// sharedMonitor is a monitor whose series can be shared.
type sharedMonitor interface {
	Shared(f func(name string, s window.Sharer))
}

type shareMetrics struct {
	dropped  prometheus.Counter
	up       prometheus.Gauge
	flushes  prometheus.Counter
	failures prometheus.Counter
}

func newShareMetrics(reg prometheus.Registerer) *shareMetrics {
	m := &shareMetrics{
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_state_dropped_buckets_total",
			Help: "Window buckets that aged out before they could be written to the shared store."}),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "vigil_state_store_up",
			Help: "1 when the last flush to the shared state store succeeded."}),
		flushes: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_state_flushes_total",
			Help: "Flushes of the windows to the shared state store."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "vigil_state_flush_failures_total",
			Help: "Flushes that failed; their buckets are kept and sent again."}),
	}
	reg.MustRegister(m.dropped, m.up, m.flushes, m.failures)
	return m
}

// Run flushes every interval until ctx is done, then once more.
func (s *sharer) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			s.flush(fctx)
			cancel()
			return nil
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
			s.flush(fctx)
			cancel()
		}
	}
}

type batch struct {
	enc      []window.Encoded
	from, to int64
	put      bool
	remote   []state.ReplicaBucket
}

// flush writes the touched buckets of every series, reads the others'
// snapshots of the live span, and imports them. The monitors' locks are
// held only to export and import, never during I/O.
func (s *sharer) flush(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A flush never takes longer than the interval, whatever the store does.
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	s.n++
	full := s.failing || s.n%fullEvery == 0
	batches := map[string]*batch{}
	for _, m := range s.monitors {
		m.Shared(func(name string, sh window.Sharer) {
			// The span reaches now even without local traffic, so that
			// the other replicas' newest buckets are read.
			sh.Advance(s.now())
			if full {
				sh.Touch()
			}
			if d := sh.Dropped(); d > s.dropped[name] {
				s.m.dropped.Add(float64(d - s.dropped[name]))
				s.dropped[name] = d
			}
			enc, err := sh.Export()
			if err != nil {
				s.log.Error("encoding a window", "series", name, "err", err)
			}
			from, to := sh.Numbers()
			batches[name] = &batch{enc: enc, from: from, to: to}
		})
	}
	// Sequences only grow, also across restarts: a late, retried flush of
	// older snapshots is ignored by the store.
	seq := max(uint64(time.Now().UnixNano()), s.lastSeq+1)
	s.lastSeq = seq
	var failed error
	for name, b := range batches {
		if failed != nil {
			break // the store is failing: keep the rest for the next flush
		}
		bs := make([]state.Bucket, len(b.enc))
		for i, e := range b.enc {
			bs[i] = state.Bucket{Start: e.Start, Payload: e.Payload}
		}
		if err := s.cfg.Store.PutBuckets(ctx, name, s.cfg.Replica, seq, bs, s.ttl); err != nil {
			failed = err
			continue
		}
		b.put = true
		rb, err := s.cfg.Store.Buckets(ctx, name, b.from, b.to)
		if err != nil {
			failed = err
			continue
		}
		b.remote = rb
	}
	for _, m := range s.monitors {
		m.Shared(func(name string, sh window.Sharer) {
			b := batches[name]
			if b == nil {
				return
			}
			if !b.put {
				sh.Unexport(b.enc)
			}
			for _, r := range b.remote {
				if r.Replica == s.cfg.Replica {
					continue
				}
				if err := sh.Import(r.Replica, window.Encoded{Start: r.Start, Payload: r.Payload}); err != nil {
					s.log.Warn("importing a replica's window", "series", name, "replica", r.Replica, "err", err)
				}
			}
		})
	}
	if failed == nil {
		failed = s.syncBaseline(ctx)
	}
	if failed == nil && s.calib != nil {
		failed = s.syncCalibration(ctx)
	}
	s.m.flushes.Inc()
	s.failing = failed != nil
	if failed != nil {
		s.m.failures.Inc()
		s.m.up.Set(0)
		// At most one line a minute while the store is down.
		if now := time.Now().Unix(); now-s.warned.Load() >= 60 {
			s.warned.Store(now)
			s.log.Warn("shared state store unreachable; windows are kept locally and sent when it returns", "err", failed)
		}
		return
	}
	s.m.up.Set(1)
}

// baselineKey is the store document naming the time of the latest baseline
// pin, so that a pin made on one replica is made on all.
const baselineKey = "baseline"

// pin records a pin made on this replica.
func (s *sharer) pin(ctx context.Context, at time.Time) error {
	s.mu.Lock()
	s.pinned = at
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	return s.cfg.Store.Set(ctx, baselineKey, []byte(at.UTC().Format(time.RFC3339Nano)), 0)
}

// syncBaseline applies a newer pin made by another replica. Callers hold s.mu.
func (s *sharer) syncBaseline(ctx context.Context) error {
	v, err := s.cfg.Store.Get(ctx, baselineKey)
	if errors.Is(err, state.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, string(v))
	if err != nil || !at.After(s.pinned) {
		return nil
	}
	s.pinned = at
	if s.onPin != nil {
		s.onPin(at)
	}
	return nil
}

// respKey is the store document holding a remembered response's confidence.
func respKey(id string) string { return "resp:" + id }

// syncCalibration writes the responses remembered since the last flush,
// this replica's labels when they changed, and (every tenth flush) reads
// the other replicas' labels. Callers hold s.mu.
func (s *sharer) syncCalibration(ctx context.Context) error {
	p := s.calib
	if pend := p.takePending(); len(pend) > 0 {
		docs := make(map[string][]byte, len(pend))
		for id, conf := range pend {
			docs[respKey(id)] = strconv.AppendFloat(nil, conf, 'g', -1, 64)
		}
		if err := s.cfg.Store.SetMany(ctx, docs, p.cfg.Calibration.TTL); err != nil {
			p.pendMu.Lock()
			for id, conf := range pend { // try again next time
				if len(p.pending) < maxPendingShare {
					p.pending[id] = conf
				}
			}
			p.pendMu.Unlock()
			return err
		}
	}
	if v := p.labelVersion.Load(); v != s.labelsAt {
		b, err := json.Marshal(p.calib.Pairs())
		if err != nil {
			return err
		}
		if err := s.cfg.Store.PutBuckets(ctx, "labels", s.cfg.Replica, s.lastSeq, []state.Bucket{{Payload: b}}, p.cfg.Calibration.TTL); err != nil {
			return err
		}
		s.labelsAt = v
	}
	if s.n%10 != 1 {
		return nil
	}
	all, err := s.cfg.Store.Buckets(ctx, "labels", 0, 0)
	if err != nil {
		return err
	}
	var remote []calibrate.Pair
	for _, b := range all {
		if b.Replica == s.cfg.Replica {
			continue
		}
		var ps []calibrate.Pair
		if json.Unmarshal(b.Payload, &ps) == nil {
			remote = append(remote, ps...)
		}
	}
	p.remoteLabels.Store(&remote)
	return nil
}

// remembered looks a response up in the store, for feedback about a
// response another replica served.
func (s *sharer) remembered(ctx context.Context, id string) (float64, bool) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := s.cfg.Store.Get(ctx, respKey(id))
	if err != nil {
		return 0, false
	}
	conf, err := strconv.ParseFloat(string(v), 64)
	return conf, err == nil
}
