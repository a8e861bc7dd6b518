// Package share replicates the pipeline's windows across the replicas of
// a deployment: every interval it exports the touched buckets of each
// series, writes them and reads the other replicas' in one
// state.Store.Exchange, and imports what it read; then it syncs the
// baseline pin and whatever else registered a sync (history, calibration).
package share

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// Config configures how a Pipeline shares its windows with the other
// replicas of a deployment through a state.Store.
type Config struct {
	Store state.Store
	// Replica names this process in the store. Empty: hostname plus a
	// random suffix.
	Replica string
	// Interval between flushes (state.redis.flush_interval). Zero:
	// config.DefaultRedis()'s.
	Interval time.Duration
}

// ReplicaID returns a name for this process: hostname-xxxxxx.
func ReplicaID() string {
	host, _ := os.Hostname()
	var b [3]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%s", host, hex.EncodeToString(b[:]))
}

// flushTimeout is the least time a flush gets. A flush is a few round
// trips (the windows of every series in one, then the baseline, history
// and calibration side by side), and a few more for the connections that
// a timed-out command made go-redis close: about 2 s against a Redis half
// a second away (test/faults TestRedisSlow), where a one-second bound
// failed every flush. Flushes do not overlap, and none is on a request's
// path; a dead Redis fails them at once, a silent one after go-redis's
// one-second read timeout.
const flushTimeout = 5 * time.Second

// fullEvery: every this many flushes, every live bucket is rewritten, so
// that a store that lost its data (a Redis restart between two flushes)
// is whole again within that many intervals.
const fullEvery = 30

// FullReadAfter bounds how long a late write of old buckets waits to be
// read. Most flushes read only the newest buckets of each series, those
// the other replicas' regular flushes can have written since the last
// read (readFrom): reading the whole span, 90 to 450 buckets per series,
// every second was a fifth of the gateway's allocations and kept Redis
// busy. Older buckets are written late by a replica back from a
// store outage (it writes everything it kept), by the rewrite every
// fullEvery flushes, and when a long request's sample is stamped with its
// start (drift) or a shadow's time (precision). Reading every series whole
// every 10 s (every 10th flush at the 1 s default interval) shows those
// within seconds, not minutes, next to windows that span minutes to hours,
// at a tenth of the former cost; a longer bound would save little, the
// newest buckets being read anyway.
const FullReadAfter = 10 * time.Second

// Sharer flushes the pipeline's windows to the store and imports the other
// replicas'. Its Run is owned by Pipeline.Run.
type Sharer struct {
	cfg      Config
	ttl      time.Duration
	monitors []Monitor
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
	// syncs share state of their own after the windows (AddSync).
	syncs   []Sync
	failing bool
	warned  atomic.Int64 // unix seconds of the last warning
	// readTo is, per series, the newest bucket number of its span at its
	// last successful read: the next read starts a few buckets before it
	// (readFrom). Bounded by the series of the latest export.
	readTo map[string]int64
}

// Monitor is a monitor whose series can be shared.
type Monitor interface {
	Shared(f func(name string, s window.Sharer))
}

// Policy is implemented by a Monitor whose series differ from the
// sharer's defaults: they span longer than its ttl, or change too slowly
// to be worth reading every flush.
type Policy interface {
	// Sharing returns how long the series' snapshots live in the store
	// (never less than the sharer's ttl) and every how many flushes the other
	// replicas' snapshots are read (zero or one: every flush; the first
	// flush, and the one after a failed flush, read always). A series read
	// less often than every FullReadAfter is read whole every time.
	Sharing(name string) (ttl time.Duration, readEvery int)
}

// New returns a sharer of no monitor yet, its metrics registered on reg.
// ttl is how long the series' snapshots live in the store, unless a
// Policy says longer; now is the pipeline's clock; onPin applies a
// baseline pin that another replica made. cfg's zero Replica and Interval
// take their defaults.
func New(cfg Config, ttl time.Duration, log *slog.Logger, now func() time.Time, reg prometheus.Registerer, onPin func(time.Time)) *Sharer {
	if cfg.Replica == "" {
		cfg.Replica = ReplicaID()
	}
	if cfg.Interval <= 0 {
		cfg.Interval = config.DefaultRedis().FlushInterval
	}
	return &Sharer{cfg: cfg, ttl: ttl, log: log, now: now, m: newShareMetrics(reg), dropped: map[string]int64{}, onPin: onPin}
}

// Sync shares state of its own, after a flush's windows were exchanged:
// seq is the flush's sequence, flush its number (the first is 1), for a
// state that needs not be read every flush. It keeps what it could not
// write for the next call.
type Sync func(ctx context.Context, seq uint64, flush int) error

// Add shares the series of the monitors. Call it before Run.
func (s *Sharer) Add(m ...Monitor) { s.monitors = append(s.monitors, m...) }

// AddSync runs f after each flush whose windows were exchanged, beside
// the baseline's sync and the other syncs. Call it before Run.
func (s *Sharer) AddSync(f Sync) { s.syncs = append(s.syncs, f) }

// Config returns the configuration in force, defaults applied.
func (s *Sharer) Config() Config { return s.cfg }

// Monitors returns the monitors whose series are shared.
func (s *Sharer) Monitors() []Monitor { return s.monitors }

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

// Run flushes every interval until ctx is done. The last flush is the
// owner's (Pipeline.Run), after its last evaluation.
func (s *Sharer) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Flush(ctx) // bounded by its own timeout
		}
	}
}

type batch struct {
	enc      []window.Encoded
	from, to int64 // the series' span, as bucket numbers
	readFrom int64 // the oldest bucket read: from, or a few before the last read's to
	ttl      time.Duration
	read     bool // read the other replicas' snapshots this time
	put      bool
	remote   []state.ReplicaBucket
}

// Flush writes the touched buckets of every series, reads the others'
// snapshots of the buckets they can have written since the last read (of
// the whole live span on the first flush, after a failed one, and every
// FullReadAfter), and imports them. The monitors' locks are held only to
// export and import, never during I/O.
func (s *Sharer) Flush(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// A flush never takes longer than the interval or flushTimeout,
	// whichever is longer, whatever the store does.
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.Interval, flushTimeout))
	defer cancel()
	s.n++
	batches := s.export(s.failing || s.n%fullEvery == 0)
	// Sequences only grow, also across restarts: a late, retried flush of
	// older snapshots is ignored by the store.
	seq := max(uint64(time.Now().UnixNano()), s.lastSeq+1)
	s.lastSeq = seq
	failed := s.exchange(ctx, seq, batches)
	s.importRemote(batches)
	if failed == nil {
		// The rest touch state of their own, each keeping what it could
		// not write for the next flush: their round trips overlap.
		var g errgroup.Group
		g.Go(func() error { return s.syncBaseline(ctx) })
		for _, f := range s.syncs {
			g.Go(func() error { return f(ctx, seq, s.n) })
		}
		failed = g.Wait()
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

// export takes the touched buckets of every series (every live one when
// full), under the monitors' locks. Callers hold s.mu.
func (s *Sharer) export(full bool) map[string]*batch {
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
			b := &batch{enc: enc, from: from, to: to, readFrom: from, ttl: s.ttl}
			every := 1
			if p, ok := m.(Policy); ok {
				var ttl time.Duration
				ttl, every = p.Sharing(name)
				b.ttl = max(b.ttl, ttl)
				every = max(every, 1)
			}
			b.read = every == 1 || s.failing || (s.n-1)%every == 0
			if b.read && !s.failing && (s.n-1)%s.fullReadPeriod(every) != 0 {
				b.readFrom = s.readFrom(name, sh, from, to)
			}
			batches[name] = b
		})
	}
	// Series come and go with the analyzers' segments: forget those gone.
	for name := range s.readTo {
		if batches[name] == nil {
			delete(s.readTo, name)
		}
	}
	for name := range s.dropped {
		if batches[name] == nil {
			delete(s.dropped, name)
		}
	}
	return batches
}

// fullReadPeriod returns every how many flushes a series read every every
// flushes is read whole: a multiple of every, so that whole reads fall on
// the series' reads, at least FullReadAfter apart in flushes. Every read
// of a series read less often than that is whole.
func (s *Sharer) fullReadPeriod(every int) int {
	per := time.Duration(every) * s.cfg.Interval
	if per <= 0 {
		return every
	}
	reads := max(1, int((FullReadAfter+per-1)/per))
	return every * reads
}

// readFrom returns the oldest bucket of series name that another replica
// can have written since this one last read it, its span being from..to.
// A write that lands after the last read carries samples since the
// writer's previous export, at most two intervals before that read (one
// between exports, one for the write, bounded by the flush timeout), and
// stamped by the writer's clock: one bucket more for clock skew. It is
// from (read everything) for a series never read, or whose bucket width
// is unknown. Callers hold s.mu.
func (s *Sharer) readFrom(name string, sh window.Sharer, from, to int64) int64 {
	last, ok := s.readTo[name]
	w, hasWidth := sh.(interface{ Width() time.Duration }) // every window.Shared
	if !ok || !hasWidth || w.Width() <= 0 {
		return from
	}
	width := w.Width()
	lag := int64((2*s.cfg.Interval+width-1)/width) + 1
	return max(from, min(last, to)-lag)
}

// exchange writes every batch to the store and reads the replicas'
// buckets readFrom..to of those that say so, in one Store.Exchange (one
// round trip to Redis, whatever the number of series), holding no monitor
// lock. After a failure no batch counts as written: all are exported
// again next time (a snapshot written twice is applied once, by its
// sequence), and the next flush reads every span whole.
func (s *Sharer) exchange(ctx context.Context, seq uint64, batches map[string]*batch) error {
	puts := make([]state.SeriesBuckets, 0, len(batches))
	var reads []state.SeriesSpan
	var readNames []string
	for name, b := range batches {
		bs := make([]state.Bucket, len(b.enc))
		for i, e := range b.enc {
			bs[i] = state.Bucket{Start: e.Start, Payload: e.Payload}
		}
		puts = append(puts, state.SeriesBuckets{Signal: name, Buckets: bs, TTL: b.ttl})
		if b.read {
			reads = append(reads, state.SeriesSpan{Signal: name, From: b.readFrom, To: b.to})
			readNames = append(readNames, name)
		}
	}
	remote, err := s.cfg.Store.Exchange(ctx, s.cfg.Replica, seq, puts, reads)
	if err != nil {
		return err
	}
	for _, b := range batches {
		b.put = true
	}
	if s.readTo == nil {
		s.readTo = map[string]int64{}
	}
	for i, name := range readNames {
		b := batches[name]
		b.remote = remote[i]
		s.readTo[name] = b.to
	}
	return nil
}

// importRemote gives back to each series the buckets that were not
// written and imports the other replicas' snapshots, under the monitors'
// locks. Importing a snapshot again is harmless: the store keeps each
// replica's latest (by sequence) and Import replaces the replica's previous
// one, so buckets read by overlapping reads count once.
func (s *Sharer) importRemote(batches map[string]*batch) {
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
}

// baselineKey is the store document naming the time of the latest baseline
// pin, so that a pin made on one replica is made on all.
const baselineKey = "baseline"

// Pin records a pin made on this replica, for the others to apply.
func (s *Sharer) Pin(ctx context.Context, at time.Time) error {
	s.mu.Lock()
	s.pinned = at
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Interval)
	defer cancel()
	return s.cfg.Store.Set(ctx, baselineKey, []byte(at.UTC().Format(time.RFC3339Nano)), 0)
}

// syncBaseline applies a newer pin made by another replica. Callers hold s.mu.
func (s *Sharer) syncBaseline(ctx context.Context) error {
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
