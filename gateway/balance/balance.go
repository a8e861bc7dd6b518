// Package balance chooses the backend of each request, in parts, after the
// Gateway API Inference Extension's endpoint picker:
//
//   - Filters narrow the pool to the candidates: the backend kind serves
//     the route, the backend serves the model or LoRA adapter, it is
//     healthy and not ejected, a retried request has not tried it
//     (filters.go).
//   - Scorers rate each backend's load signals in [0, 1] at every Update;
//     their blend is the node weight in the Snapshot that pickers read
//     (scorers.go).
//   - A Picker, the strategy, chooses among the candidates: prefix,
//     dynamic (power of two choices over a cost), round robin or least
//     request (pickers.go, prefix.go).
//   - Hooks learn where the request went once the gateway has chosen
//     ([Balancer.Picked]): the prefix strategy's index is written there,
//     not in the pick, so that a pick that only asks changes nothing.
//
// A new rule is a new type in one of those roles. The parts are called
// through interfaces with a pooled [Request], so that a pick does not
// allocate; none takes a lock but the prefix strategy's homes (one short
// one).
//
// # The prefix strategy
//
// The default, for model servers that reuse the KV cache of a prompt
// prefix they have computed (vLLM's automatic prefix caching): a request
// goes where its prompt's prefix already is, unless that backend is much
// busier than the others. See the prefixPicker type (prefix.go); package
// affinity hashes the prompt and keeps the index.
//
// # The dynamic strategy
//
// Two healthy candidates are drawn at random and the one with the lower
// cost (by more than tieBand; otherwise the first drawn) serves the request (the "power of two choices": Mitzenmacher, 2001;
// Finagle's and Linkerd's balancers, Envoy's least_request):
//
//	cost   = (inflight + q·waiting + 1) × ttfb^l × (1 / (1 − errors))^e / weight
//	weight = base × (1 − node load),  at least Floor × base
//
// inflight is the backend's requests in flight through this gateway (live);
// waiting the server's queue (vllm:num_requests_waiting, tgi_queue_size; 0
// when unknown or stale); ttfb the backend's peak-EWMA time to the first
// response byte (upstream.Backend.Latency: a slow answer raises it at once,
// fast ones bring it down over balancer.latency_decay, and while a backend
// gets no traffic it decays toward zero so that the backend is tried
// again); errors the EWMA of its failed attempts' share. q, l and e are
// balancer.load_weights.queue, .latency and .errors (0 leaves the term
// out). This is Finagle's and Linkerd's "peak EWMA" cost, (pending + 1) ×
// latency, with the server's own queue added and scaled by the node's
// capacity.
//
// The weight is the node factor: base is backends[].weight and the node
// load is the weighted mean of the node's fresh utilization signals (cpu,
// mem, gpu, gpu_mem from the agent, kv_cache from the server), with
// balancer.load_weights as the weights:
//
//	node load = Σ wᵢ·sᵢ / Σ wᵢ   over the signals i that are known and fresh
//
// These signals all say how full the node is, so averaging them does not
// dilute: a signal that is unknown or stale (older than
// balancer.stale_after) drops out of both sums; with none left the weight
// is the base weight. Queue, latency and errors are not averaged with them:
// they multiply the cost, so that one saturated signal is felt in full.
//
// Why this and not a weighted random over a blend (Vigil's first balancer):
// a blend averages a saturated signal with idle ones (latency 1 among five
// zeros moved a backend 10× slower from 33 % to 25 % of the traffic), and
// weights recomputed every scrape interval lag the queue they react to. The
// cost reads the in-flight count and the latency at each pick; two random
// candidates rather than the single cheapest keep replicas that share no
// state from herding onto the same backend.
//
// Weights and error factors are recomputed by [Balancer.Update] (the
// gateway calls it after every scrape) into an immutable [Snapshot] behind
// an atomic pointer; the pickers read it, the in-flight counts and the
// latency estimates without a lock of their own. Passive ejection and
// health changes take effect at once: a filter reads the backends' live
// health on every pick.
package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/balance/affinity"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Strategies, as config names them.
const (
	Dynamic      = config.StrategyDynamic
	RoundRobin   = config.StrategyRoundRobin
	LeastRequest = config.StrategyLeastRequest
	Prefix       = config.StrategyPrefix
)

// Options configure a Balancer.
type Options struct {
	// Strategy is Prefix, Dynamic, RoundRobin or LeastRequest
	// (balancer.strategy).
	Strategy string
	// Prefix configures the Prefix strategy (balancer.prefix); other
	// strategies ignore it.
	Prefix config.Prefix
	// Weights weigh the node signals in the node load and set the queue,
	// latency and error terms of the cost.
	Weights config.LoadWeights
	// QueueSaturation is the waiting count at which the queue score is
	// 0.5 (balancer.queue_saturation), > 0.
	QueueSaturation float64
	// StaleAfter is the age past which a signal is ignored
	// (balancer.stale_after), > 0.
	StaleAfter time.Duration
	// Floor is the smallest weight as a share of the base weight
	// (balancer.floor), in (0, 1].
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

// A HomeStore shares the prefix strategy's homes among gateway replicas
// (a Store may be one): ClaimHomes stores each claim (anchor → backend
// name) unless the anchor has a home there already, keeps it for ttl from
// now, and returns the stored home of each anchor claimed.
type HomeStore interface {
	ClaimHomes(ctx context.Context, claims map[uint64]string, ttl time.Duration) (map[uint64]string, error)
}

// A Balancer picks backends from a pool: its filters narrow the pool to
// the candidates, its picker (the strategy) chooses one, and its hooks
// learn where the request went. It is safe for concurrent use: Pick,
// PickFor and Picked take no lock of their own and do not allocate (the
// prefix strategy's homes take one short lock); Update is meant to be
// called from one goroutine.
type Balancer struct {
	pool       *upstream.Pool
	strategy   string
	filters    []Filter
	picker     Picker
	hooks      []Hook
	reqs       sync.Pool // *Request
	scorers    []weighted
	staleAfter time.Duration
	floor      float64
	queueSat   float64
	store      Store
	// Exponents and factor of the cost's terms (load_weights.queue,
	// .latency, .errors).
	wQueue, wLatency, wErrors float64

	snap atomic.Pointer[Snapshot]

	// The prefix strategy's, which its picker and hook share and Update
	// publishes; nil for the others.
	hasher    *affinity.Hasher
	index     *affinity.Index
	homes     *affinity.Homes
	homeTTL   time.Duration
	homeStore HomeStore // nil: homes are this replica's own
}

// maxHomes is the most anchors the prefix strategy remembers homes for
// (about 100 bytes each): far more tenants, sessions and conversations
// than a fleet's prefix caches hold at once.
const maxHomes = 1 << 16

// maxClaims is the most homes one Update publishes; the rest wait for the
// next.
const maxClaims = 4096

type weighted struct {
	Scorer
	w float64
}

// New returns a Balancer over pool. Every backend starts at its base weight.
// An unknown strategy or a floor outside (0, 1] is an error: the settings
// come from config, which holds their defaults.
func New(pool *upstream.Pool, o Options) (*Balancer, error) {
	b := &Balancer{pool: pool, strategy: o.Strategy, filters: filters, staleAfter: o.StaleAfter, floor: o.Floor, queueSat: o.QueueSaturation, store: o.Store,
		wQueue: o.Weights.Queue, wLatency: o.Weights.Latency, wErrors: o.Weights.Errors}
	n := len(pool.Backends())
	b.reqs.New = func() any { return &Request{cands: make([]int32, 0, n)} }
	switch o.Strategy {
	case Dynamic:
		b.picker = &twoChoices{b: b}
	case RoundRobin:
		b.picker = new(roundRobin)
	case LeastRequest:
		b.picker = new(leastRequest)
	case Prefix:
		p := o.Prefix
		h, err := affinity.NewHasher(affinity.Options{BlockChars: p.BlockChars, MaxChars: p.MaxChars, Hash: p.Hash})
		if err != nil {
			return nil, fmt.Errorf("balancer.prefix.%w", err)
		}
		b.hasher, b.index = h, affinity.NewIndex(p.IndexSize)
		b.homes, b.homeTTL = affinity.NewHomes(maxHomes, n, p.HomeTTL), p.HomeTTL
		if hs, ok := o.Store.(HomeStore); ok {
			b.homeStore = hs
		}
		pp := &prefixPicker{b: b, dyn: twoChoices{b: b}, index: b.index, homes: b.homes, minChars: p.MinChars,
			guardAbs: p.GuardAbs, guardRel: p.GuardRel, hotGuardAbs: p.HotGuardAbs, homeSlack: p.HomeSlack}
		for _, be := range pool.Backends() {
			pp.names = append(pp.names, h.HashString(be.Name))
		}
		b.picker = pp
		b.hooks = append(b.hooks, &prefixRecorder{index: b.index, minChars: p.MinChars})
	default:
		return nil, fmt.Errorf("balancer.strategy: unknown strategy %q", o.Strategy)
	}
	if !(b.floor > 0 && b.floor <= 1) {
		return nil, fmt.Errorf("balancer.floor: must be in (0, 1], got %v", o.Floor)
	}
	// Only the node signals enter the node load; queue, latency and errors
	// are scored for display (weight 0) and enter the cost instead.
	w := o.Weights
	b.scorers = append(b.scorers, []weighted{
		{cpuScorer{}, w.CPU}, {memScorer{}, w.Mem}, {gpuScorer{}, w.GPU}, {gpuMemScorer{}, w.GPUMem},
		{queueScorer{}, 0}, {kvCacheScorer{}, w.KVCache}, {latencyScorer{}, 0}, {errorScorer{}, 0},
	}...)
	states := make([]State, len(pool.Backends()))
	for i, be := range pool.Backends() {
		states[i] = State{Weight: be.Weight, Scores: unknownScores(), Waiting: math.NaN(), Running: math.NaN(), ErrorFactor: 1}
	}
	b.snap.Store(&Snapshot{Backends: states})
	return b, nil
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
	// Weight is the node factor, base × (1 − Load), at least Floor × base
	// (used by the dynamic strategy only).
	Weight float64
	// Load is the node load: the blend of the fresh node signals, in [0, 1].
	Load float64
	// ErrorFactor is the cost's error term, (1 / (1 − error rate))^e, >= 1.
	ErrorFactor float64
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
		if lat, at := be.Latency(now); !math.IsNaN(lat) && b.fresh(at, now) {
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
	if b.homes != nil {
		b.homes.Sweep(now)
		if b.homeStore != nil {
			err = errors.Join(err, b.shareHomes(ctx, backends, now))
		}
	}
	return err
}

// shareHomes publishes the homes this replica placed or used since the
// last call and adopts the store's: the first replica to claim an anchor
// wins, and the others send its prompts there from then on. A replica
// that starts cold learns each anchor's home at its first Update after
// the anchor's first request.
func (b *Balancer) shareHomes(ctx context.Context, backends []*upstream.Backend, now time.Time) error {
	claims := b.homes.Drain(nil, maxClaims, now)
	if len(claims) == 0 {
		return nil
	}
	m := make(map[uint64]string, len(claims))
	for _, c := range claims {
		if c.Backend >= 0 && c.Backend < len(backends) {
			m[c.Anchor] = backends[c.Backend].Name
		}
	}
	won, err := b.homeStore.ClaimHomes(ctx, m, b.homeTTL)
	if err != nil {
		b.homes.Requeue(claims)
		return fmt.Errorf("sharing prefix homes: %w", err)
	}
	for anchor, name := range won {
		i := slices.IndexFunc(backends, func(be *upstream.Backend) bool { return be.Name == name })
		if i < 0 {
			continue // a backend this replica is not configured with: keep its own
		}
		if first, prev, changed := b.homes.Adopt(anchor, i); changed {
			b.index.Forget(first, prev)
		}
	}
	return nil
}

func (b *Balancer) fresh(at, now time.Time) bool {
	return !at.IsZero() && now.Sub(at) <= b.staleAfter
}

// weigh blends a backend's scores into its load and weight.
func (b *Balancer) weigh(v *View) State {
	st := State{Scores: unknownScores(), Waiting: math.NaN(), Running: math.NaN(), ErrorFactor: 1}
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
	if e := v.ErrorRate; b.wErrors > 0 && e > 0 {
		st.ErrorFactor = math.Pow(1/max(1-e, maxErrorShare), b.wErrors)
	}
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

// Pick chooses a backend for a request for model (empty: any) on a route
// served by the given kinds (empty: any), never one in exclude (the
// backends a retried request already tried). It returns
// upstream.ErrUnknownModel when no backend is configured for the model and
// kinds, and upstream.ErrNoHealthy when some are but none is healthy and
// not excluded. The prefix strategy, given no prompt here, picks as
// dynamic does (PickFor takes the prompt). Pick only asks: it runs no
// Hook, so a caller that probes whether some backend could take a request
// changes nothing.
func (b *Balancer) Pick(model string, kinds []string, exclude ...*upstream.Backend) (*upstream.Backend, error) {
	be, _, err := b.PickFor(model, kinds, nil, exclude...)
	return be, err
}

// Strategy returns the balancer's strategy, as config names it.
func (b *Balancer) Strategy() string { return b.strategy }

// Hasher returns the prefix strategy's hasher; nil for other strategies,
// which need no prompt key.
func (b *Balancer) Hasher() *affinity.Hasher { return b.hasher }

// Homes returns the prefix strategy's anchor homes (nil for other
// strategies), for tests and the admin API.
func (b *Balancer) Homes() *affinity.Homes { return b.homes }

// Index returns the prefix strategy's index (nil for other strategies),
// for tests and the admin API.
func (b *Balancer) Index() *affinity.Index { return b.index }

// PickFor is Pick given the request's prompt key (nil: none; only the
// prefix strategy reads it), and says how it chose: the filters, in
// order, narrow the pool to the candidates, and the strategy's Picker
// chooses among them (prefixPicker says how the prefix strategy does).
// It writes nothing to the prefix index: the caller that sends the
// request to the backend calls Picked. (The prefix picker does count the
// anchor's requests in its homes and place a new anchor, which is part of
// the choice.) It reads key only during the call.
func (b *Balancer) PickFor(model string, kinds []string, key *affinity.Key, exclude ...*upstream.Backend) (*upstream.Backend, Decision, error) {
	r := b.request(model, kinds, exclude)
	r.setKey(key)
	cands := r.cands[:0]
	for i := range r.Backends {
		cands = append(cands, int32(i))
	}
	for _, f := range b.filters {
		if cands = f.Filter(r, cands); len(cands) == 0 {
			d := r.Decision
			b.release(r)
			return nil, d, f.Err()
		}
	}
	i := b.picker.Pick(r, cands)
	be, d := r.Backends[i], r.Decision
	b.release(r)
	return be, d, nil
}

// A Hook learns where a request went, once the gateway has chosen its
// backend (Picked). State that later picks read is recorded here rather
// than by the Picker, so that a pick that only asks leaves no trace, and
// so that a part that learns from placements is a Hook of its own. Hooks
// are safe for concurrent use.
type Hook interface {
	// Picked is told of a request and the pool index of the backend it
	// was sent to. Of r.Decision only Strategy is set.
	Picked(r *Request, backend int32)
}

// Picked runs the strategy's hooks for a request with the prompt key (nil:
// none) that is sent to be, PickFor's choice: under the prefix strategy,
// be holds the prompt's chain from now on. The gateway calls it once per
// request it routes with PickFor, before sending it. It reads key only
// during the call, takes no lock of its own and does not allocate.
func (b *Balancer) Picked(be *upstream.Backend, key *affinity.Key) {
	if len(b.hooks) == 0 {
		return
	}
	i := slices.Index(b.pool.Backends(), be)
	if i < 0 {
		return
	}
	r := b.request("", nil, nil)
	r.setKey(key)
	for _, h := range b.hooks {
		h.Picked(r, int32(i))
	}
	b.release(r)
}
