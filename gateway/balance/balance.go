// Package balance chooses the backend of each request: filter (healthy,
// serves the model and route kind, not already tried) → scorers (one per
// load signal, each in [0, 1], blended into a load off the request path) →
// picker (dynamic weighted random, round robin or least request).
//
// # Weights
//
// For the dynamic strategy a backend's weight is
//
//	weight = base × (1 − load),  at least Floor × base
//
// where base is backends[].weight and load is the weighted mean of the
// backend's fresh scores, with balancer.load_weights as the weights:
//
//	load = Σ wᵢ·sᵢ / Σ wᵢ   over the signals i that are known and fresh
//
// A signal that is unknown (no agent, no metrics endpoint, no GPU, no
// traffic yet) or stale (older than balancer.stale_after) drops out of both
// sums, so the others are renormalized; with none left the load is 0 and
// the weight is the base weight. The floor keeps a loaded backend receiving
// a trickle of requests, so Vigil keeps measuring it.
//
// The scores (see scorers.go): cpu, mem, gpu, gpu_mem straight from the
// node's agent; queue = waiting / (waiting + balancer.queue_saturation);
// kv_cache as the server reports it; latency = 1 − best/own over the
// backends' time-to-first-byte EWMAs; errors = the EWMA of the share of
// failed attempts.
//
// Weights are recomputed by [Balancer.Update] (the gateway calls it after
// every scrape) into an immutable [Snapshot] behind an atomic pointer; Pick
// reads it without a lock. Passive ejection and health changes take effect
// at once: the filter reads the backends' live health on every pick.
package balance

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Strategies, as config names them.
const (
	Dynamic      = config.StrategyDynamic
	RoundRobin   = config.StrategyRoundRobin
	LeastRequest = config.StrategyLeastRequest
)

// DefaultFloor is the smallest weight a backend gets, as a share of its base
// weight, when Options.Floor is zero.
const DefaultFloor = 0.01

// Options configure a Balancer.
type Options struct {
	// Strategy is Dynamic, RoundRobin or LeastRequest. Empty: Dynamic.
	Strategy string
	// Weights weigh the scores in the load blend.
	Weights config.LoadWeights
	// QueueSaturation is the waiting count at which the queue score is
	// 0.5 (balancer.queue_saturation), > 0.
	QueueSaturation float64
	// StaleAfter is the age past which a signal is ignored
	// (balancer.stale_after), > 0.
	StaleAfter time.Duration
	// Floor is the smallest weight as a share of the base weight, in (0, 1].
	// Zero: DefaultFloor.
	Floor float64
	// Store, if set, shares weights among gateway replicas. Nil: each
	// replica uses its own weights.
	Store Store
}

// A Store shares weights among gateway replicas: ShareWeights publishes this
// replica's weights (by backend name) and returns the weights to use, e.g.
// an average over the replicas that published recently (state.Weights does,
// over the Redis store). Missing names keep the local weight.
type Store interface {
	ShareWeights(ctx context.Context, local map[string]float64) (map[string]float64, error)
}

// A Balancer picks backends from a pool. It is safe for concurrent use:
// Pick takes no lock and does not allocate; Update is meant to be called
// from one goroutine.
type Balancer struct {
	pool       *upstream.Pool
	strategy   int
	scorers    []weighted
	staleAfter time.Duration
	floor      float64
	queueSat   float64
	store      Store

	snap atomic.Pointer[Snapshot]
	next atomic.Uint64 // round robin position and tie breaker
}

type weighted struct {
	Scorer
	w float64
}

const (
	stDynamic = iota
	stRoundRobin
	stLeastRequest
)

// New returns a Balancer over pool. Every backend starts at its base weight.
func New(pool *upstream.Pool, o Options) *Balancer {
	b := &Balancer{pool: pool, staleAfter: o.StaleAfter, floor: o.Floor, queueSat: o.QueueSaturation, store: o.Store}
	switch o.Strategy {
	case RoundRobin:
		b.strategy = stRoundRobin
	case LeastRequest:
		b.strategy = stLeastRequest
	}
	if !(b.floor > 0 && b.floor <= 1) {
		b.floor = DefaultFloor
	}
	w := o.Weights
	b.scorers = append(b.scorers, []weighted{
		{cpuScorer{}, w.CPU}, {memScorer{}, w.Mem}, {gpuScorer{}, w.GPU}, {gpuMemScorer{}, w.GPUMem},
		{queueScorer{}, w.Queue}, {kvCacheScorer{}, w.KVCache}, {latencyScorer{}, w.Latency}, {errorScorer{}, w.Errors},
	}...)
	states := make([]State, len(pool.Backends()))
	for i, be := range pool.Backends() {
		states[i] = State{Weight: be.Weight, Scores: unknownScores()}
	}
	b.snap.Store(&Snapshot{Backends: states})
	return b
}

// A Snapshot is the balancer's view of every backend at one time. It is
// immutable.
type Snapshot struct {
	// At is when it was computed; zero for the initial snapshot.
	At time.Time
	// Backends is in pool order.
	Backends []State
}

// State is one backend's weighting.
type State struct {
	// Weight is the dynamic weight (used by the dynamic strategy only).
	Weight float64
	// Load is the blend of the fresh scores, in [0, 1].
	Load float64
	// Scores holds each signal's score in [0, 1], by Signal; NaN when the
	// signal is unknown or stale.
	Scores [NumSignals]float64
	// Waiting and Running are the server's request counts when fresh; NaN
	// otherwise.
	Waiting, Running float64
	// Shared reports that Weight came from the Store.
	Shared bool
}

func unknownScores() [NumSignals]float64 {
	var s [NumSignals]float64
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// Snapshot returns the current weights.
func (b *Balancer) Snapshot() *Snapshot { return b.snap.Load() }

// Weight returns the current dynamic weight of the backend at index i of the pool.
func (b *Balancer) Weight(i int) float64 { return b.snap.Load().Backends[i].Weight }

// Update recomputes every backend's scores and weight from the signals
// stored on the backends, as of now, and publishes them. With a Store, the
// weights are shared first (bounded by ctx); an error keeps the local ones
// and is returned.
func (b *Balancer) Update(ctx context.Context, now time.Time) error {
	backends := b.pool.Backends()
	views := make([]View, len(backends))
	best := math.Inf(1)
	for i, be := range backends {
		v := &views[i]
		v.Backend, v.QueueSaturation = be, b.queueSat
		v.Latency, v.ErrorRate = math.NaN(), math.NaN()
		if l := be.AgentLoad(); l != nil && b.fresh(l.AsOf, now) {
			v.Agent = l
		}
		if l := be.ServerLoad(); l != nil && b.fresh(l.AsOf, now) {
			v.Server = l
		}
		if lat, at := be.Latency(); !math.IsNaN(lat) && b.fresh(at, now) {
			v.Latency = lat
			best = min(best, lat)
		}
		if e, at := be.ErrorRate(); !math.IsNaN(e) && b.fresh(at, now) {
			v.ErrorRate = e
		}
	}
	states := make([]State, len(backends))
	for i := range views {
		v := &views[i]
		if !math.IsInf(best, 1) {
			v.BestLatency = best
		}
		states[i] = b.weigh(v)
	}
	var err error
	if b.store != nil {
		err = b.share(ctx, backends, states)
	}
	b.snap.Store(&Snapshot{At: now, Backends: states})
	return err
}

func (b *Balancer) fresh(at, now time.Time) bool {
	return !at.IsZero() && now.Sub(at) <= b.staleAfter
}

// weigh blends a backend's scores into its load and weight.
func (b *Balancer) weigh(v *View) State {
	st := State{Scores: unknownScores(), Waiting: math.NaN(), Running: math.NaN()}
	if v.Server != nil {
		st.Waiting, st.Running = v.Server.Waiting, v.Server.Running
	}
	var sum, wsum float64
	for _, s := range b.scorers {
		score, ok := s.Score(v)
		if !ok || math.IsNaN(score) {
			continue
		}
		score = min(max(score, 0), 1)
		st.Scores[s.Signal()] = score
		if s.w > 0 {
			sum += s.w * score
			wsum += s.w
		}
	}
	if wsum > 0 {
		st.Load = sum / wsum
	}
	base := v.Backend.Weight
	st.Weight = max(base*(1-st.Load), base*b.floor)
	return st
}

func (b *Balancer) share(ctx context.Context, backends []*upstream.Backend, states []State) error {
	local := make(map[string]float64, len(backends))
	for i, be := range backends {
		local[be.Name] = states[i].Weight
	}
	shared, err := b.store.ShareWeights(ctx, local)
	if err != nil {
		return err
	}
	for i, be := range backends {
		if w, ok := shared[be.Name]; ok && !math.IsNaN(w) {
			states[i].Weight = min(max(w, be.Weight*b.floor), be.Weight)
			states[i].Shared = true
		}
	}
	return nil
}

// maxStack is the number of candidates Pick keeps on the stack; larger
// pools still work, with one allocation per pick.
const maxStack = 64

// Pick chooses a backend for a request for model (empty: any) on a route
// served by the given kinds (empty: any), never one in exclude (the
// backends a retried request already tried). It returns
// upstream.ErrUnknownModel when no backend is configured for the model and
// kinds, and upstream.ErrNoHealthy when some are but none is healthy and
// not excluded.
//
// The filter and the pickers are plain functions rather than interfaces:
// a dynamic call would make the candidate buffer escape to the heap, and
// Pick must not allocate.
func (b *Balancer) Pick(model string, kinds []string, exclude ...*upstream.Backend) (*upstream.Backend, error) {
	backends := b.pool.Backends()
	var buf [maxStack]int32
	cands := buf[:0]
	known := false
	for i, be := range backends {
		if len(kinds) > 0 && !slices.Contains(kinds, be.Kind) {
			continue
		}
		if !be.Serves(model) {
			continue
		}
		known = true
		if !be.Healthy() || slices.Contains(exclude, be) {
			continue
		}
		cands = append(cands, int32(i))
	}
	if len(cands) == 0 {
		if !known {
			return nil, upstream.ErrUnknownModel
		}
		return nil, upstream.ErrNoHealthy
	}
	if len(cands) == 1 {
		return backends[cands[0]], nil
	}
	var i int32
	switch b.strategy {
	case stRoundRobin:
		i = cands[b.next.Add(1)%uint64(len(cands))]
	case stLeastRequest:
		i = b.leastRequest(backends, cands)
	default:
		i = b.weightedRandom(cands)
	}
	return backends[i], nil
}

// weightedRandom picks among cands with probability proportional to their
// weights in the current snapshot. rand.Float64 (math/rand/v2's global
// source) is per-thread in the runtime: no lock, no allocation.
func (b *Balancer) weightedRandom(cands []int32) int32 {
	states := b.snap.Load().Backends
	var total float64
	for _, i := range cands {
		total += states[i].Weight
	}
	r := rand.Float64() * total
	for _, i := range cands {
		if r -= states[i].Weight; r < 0 {
			return i
		}
	}
	return cands[len(cands)-1] // rounding
}

// leastRequest picks the candidate with the fewest requests in flight
// through this gateway; ties go round robin, so that an idle pool is
// spread evenly.
func (b *Balancer) leastRequest(backends []*upstream.Backend, cands []int32) int32 {
	start := int(b.next.Add(1) % uint64(len(cands)))
	best, bestN := int32(-1), int64(math.MaxInt64)
	for k := range cands {
		i := cands[(start+k)%len(cands)]
		if n := backends[i].Inflight(); n < bestN {
			best, bestN = i, n
		}
	}
	return best
}
