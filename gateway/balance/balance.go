// Package balance chooses the backend of each request: filter (healthy,
// serves the model and route kind, not already tried) → cost → picker
// (prefix, power of two choices, round robin or least request).
//
// # The prefix strategy
//
// The default, for model servers that reuse the KV cache of a prompt
// prefix they have computed (vLLM's automatic prefix caching): a request
// goes where its prompt's prefix already is, unless that backend is much
// busier than the others. See [Balancer.PickFor]; package affinity hashes
// the prompt and keeps the index.
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
// an atomic pointer; Pick reads it, the in-flight counts and the latency
// estimates without a lock of its own. Passive ejection and health changes
// take effect at once: the filter reads the backends' live health on every
// pick.
package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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
	// Exponents and factor of the cost's terms (load_weights.queue,
	// .latency, .errors).
	wQueue, wLatency, wErrors float64

	snap atomic.Pointer[Snapshot]
	next atomic.Uint64 // round robin position and tie breaker

	// The prefix strategy's: nil hasher and index for the others. names
	// holds the hash of each backend's name, in pool order, for
	// rendezvous placement.
	hasher             *affinity.Hasher
	index              *affinity.Index
	names              []uint64
	minChars           int
	guardAbs, guardRel float64
	hotGuardAbs        float64
	homes              *affinity.Homes
	homeSlack          float64
	homeTTL            time.Duration
	homeStore          HomeStore // nil: homes are this replica's own
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

const (
	stDynamic = iota
	stRoundRobin
	stLeastRequest
	stPrefix
)

var strategyNames = [...]string{stDynamic: Dynamic, stRoundRobin: RoundRobin, stLeastRequest: LeastRequest, stPrefix: Prefix}

// New returns a Balancer over pool. Every backend starts at its base weight.
// An unknown strategy or a floor outside (0, 1] is an error: the settings
// come from config, which holds their defaults.
func New(pool *upstream.Pool, o Options) (*Balancer, error) {
	b := &Balancer{pool: pool, staleAfter: o.StaleAfter, floor: o.Floor, queueSat: o.QueueSaturation, store: o.Store,
		wQueue: o.Weights.Queue, wLatency: o.Weights.Latency, wErrors: o.Weights.Errors}
	switch o.Strategy {
	case Dynamic:
		b.strategy = stDynamic
	case RoundRobin:
		b.strategy = stRoundRobin
	case LeastRequest:
		b.strategy = stLeastRequest
	case Prefix:
		b.strategy = stPrefix
		p := o.Prefix
		h, err := affinity.NewHasher(affinity.Options{BlockChars: p.BlockChars, MaxChars: p.MaxChars, Hash: p.Hash})
		if err != nil {
			return nil, fmt.Errorf("balancer.prefix.%w", err)
		}
		b.hasher, b.index = h, affinity.NewIndex(p.IndexSize)
		b.minChars, b.guardAbs, b.guardRel, b.hotGuardAbs = p.MinChars, p.GuardAbs, p.GuardRel, p.HotGuardAbs
		b.homes, b.homeSlack, b.homeTTL = affinity.NewHomes(maxHomes, len(pool.Backends()), p.HomeTTL), p.HomeSlack, p.HomeTTL
		if hs, ok := o.Store.(HomeStore); ok {
			b.homeStore = hs
		}
		for _, be := range pool.Backends() {
			b.names = append(b.names, h.HashString(be.Name))
		}
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

// maxErrorShare caps the error term: a backend that failed every recent
// attempt costs 100^e times as much, not infinitely more (passive ejection,
// not the balancer, takes a dead backend out).
const maxErrorShare = 0.01

// maxStack is the number of candidates Pick keeps on the stack; larger
// pools still work, with one allocation per pick.
const maxStack = 64

// Pick chooses a backend for a request for model (empty: any) on a route
// served by the given kinds (empty: any), never one in exclude (the
// backends a retried request already tried). It returns
// upstream.ErrUnknownModel when no backend is configured for the model and
// kinds, and upstream.ErrNoHealthy when some are but none is healthy and
// not excluded. The prefix strategy, given no prompt here, picks as
// dynamic does (PickFor takes the prompt).
//
// The filter and the pickers are plain functions rather than interfaces:
// a dynamic call would make the candidate buffer escape to the heap, and
// Pick must not allocate.
func (b *Balancer) Pick(model string, kinds []string, exclude ...*upstream.Backend) (*upstream.Backend, error) {
	be, _, err := b.PickFor(model, kinds, nil, exclude...)
	return be, err
}

// Reason says why the prefix strategy chose a backend.
type Reason uint8

// The reasons of a Decision.
const (
	// ReasonNone: not the prefix strategy, or a single candidate.
	ReasonNone Reason = iota
	// ReasonMatch: the backend holds the longest prefix of the prompt.
	ReasonMatch
	// ReasonPlacement: no candidate holds any of it; the backend is the
	// anchor's rendezvous choice.
	ReasonPlacement
	// ReasonLoad: the preferred backend was much busier than the least
	// busy (the load guard); chosen as dynamic does.
	ReasonLoad
	// ReasonShort: the prompt is shorter than min_chars, has no full
	// block or could not be read; chosen as dynamic does.
	ReasonShort
)

var reasonNames = [...]string{"", "match", "placement", "load", "short"}

// String returns the reason's name as spans and the access log record it
// ("" for ReasonNone).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// A Decision says how PickFor chose. It is small and holds no prompt data.
type Decision struct {
	// Strategy is the balancer's strategy (balancer.strategy).
	Strategy string
	// Blocks is the number of full blocks of the prompt hashed; Matched
	// the number of leading ones the preferred backend held.
	Blocks, Matched int
	// Preferred is the backend the prefix chose (by match or placement)
	// before the load guard; nil when none was preferred.
	Preferred *upstream.Backend
	// GuardOverride: the load guard passed over Preferred.
	GuardOverride bool
	// Hot: the prompt's anchor sent more than one backend's even share
	// of the requests; its holders shared them by load, and the guard
	// spilled at balancer.prefix.hot_guard_abs.
	Hot bool
	// Reason says why the chosen backend was chosen.
	Reason Reason
}

// Strategy returns the balancer's strategy, as config names it.
func (b *Balancer) Strategy() string { return strategyNames[b.strategy] }

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
// prefix strategy reads it), and says how it chose.
//
// The prefix strategy: a prompt below balancer.prefix.min_chars or
// without a full block goes as dynamic sends it (ReasonShort). Otherwise
// the preferred backend is the candidate that served the longest leading
// run of the prompt's blocks (ReasonMatch; ties go to the lower cost, then
// to the higher rendezvous score), or, when none served any, the
// rendezvous choice for the prompt's anchor (ReasonPlacement), which every
// replica computes alike. The load guard, after SGLang's cache-aware
// router: with load = requests in flight through this gateway + the
// server's queue (when fresh), the preferred backend is passed over when
//
//	load(preferred) − min load > guard_abs  and  load(preferred) > guard_rel × min load
//
// for the dynamic choice among the other candidates (ReasonLoad,
// GuardOverride). The chain is then recorded for the chosen backend,
// which from now on holds it, whichever way it was chosen.
func (b *Balancer) PickFor(model string, kinds []string, key *affinity.Key, exclude ...*upstream.Backend) (*upstream.Backend, Decision, error) {
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
	d := Decision{Strategy: strategyNames[b.strategy]}
	if len(cands) == 0 {
		if !known {
			return nil, d, upstream.ErrUnknownModel
		}
		return nil, d, upstream.ErrNoHealthy
	}
	if len(cands) == 1 {
		if b.strategy == stPrefix && key != nil && key.Chars >= b.minChars {
			// No choice to make, but the backend now holds the prompt.
			d.Blocks = key.N
			b.index.Record(key.Chain(), int(cands[0]))
		}
		return backends[cands[0]], d, nil
	}
	var i int32
	switch b.strategy {
	case stRoundRobin:
		i = cands[b.next.Add(1)%uint64(len(cands))]
	case stLeastRequest:
		i = b.leastRequest(backends, cands)
	case stPrefix:
		i = b.pickPrefix(backends, cands, key, &d, time.Now())
	default:
		i = b.twoChoices(backends, cands, time.Now())
	}
	return backends[i], d, nil
}

// pickPrefix is the prefix strategy's picker (PickFor).
func (b *Balancer) pickPrefix(backends []*upstream.Backend, cands []int32, key *affinity.Key, d *Decision, now time.Time) int32 {
	if key == nil || key.N == 0 || key.Chars < b.minChars {
		d.Reason = ReasonShort
		if key != nil {
			d.Blocks = key.N
		}
		return b.twoChoices(backends, cands, now)
	}
	d.Blocks = key.N
	var heldBuf [maxStack]int
	var okBuf [maxStack]bool
	held, ok := heldBuf[:], okBuf[:]
	if len(cands) > maxStack {
		held, ok = make([]int, len(cands)), make([]bool, len(cands))
	}
	held, ok = held[:len(cands)], ok[:len(cands)]
	b.index.Match(key.Chain(), cands, held)
	home, share, hasHome := b.homes.Lookup(key.Anchor, now)
	pref, most := b.best(backends, cands, held, nil, key.Anchor, home)
	d.Reason, d.Matched = ReasonPlacement, most
	if most > 0 {
		d.Reason = ReasonMatch
	} else if !hasHome {
		pref = b.homes.Place(key.Anchor, key.Blocks[0], cands, b.homeSlack,
			func(c int32) float64 { return backends[c].Weight },
			func(c int32) float64 { return affinity.Score(key.Anchor, b.names[c], backends[c].Weight) }, now)
	}
	states := b.snap.Load().Backends
	var loadBuf [maxStack]float64
	loads := loadBuf[:]
	if len(cands) > maxStack {
		loads = make([]float64, len(cands))
	}
	loads = loads[:len(cands)]
	minLoad, prefLoad := math.Inf(1), 0.0
	for k, c := range cands {
		loads[k] = b.load(backends[c], &states[c])
		minLoad = min(minLoad, loads[k])
		if c == pref {
			prefLoad = loads[k]
		}
	}
	// A hot anchor sends more requests than one backend's even share of
	// the fleet's: more than one server may have to take them. Its
	// holders share them by load (they hold the prefix alike, so no cache
	// is spent), and the guard spills to a new holder at hotGuardAbs
	// rather than guard_abs: a copy of a prefix this busy pays for
	// itself, and the holder's queue is what its requests would wait in.
	guardAbs := b.guardAbs
	if share*float64(len(cands)) > 1 {
		guardAbs = min(guardAbs, b.hotGuardAbs)
		if most > 0 {
			for k, c := range cands {
				if held[k] == most && loads[k] < prefLoad {
					pref, prefLoad = c, loads[k]
				}
			}
		}
		d.Hot = true
	}
	d.Preferred = backends[pref]
	chosen := pref
	over := func(l float64) bool {
		return l-minLoad > guardAbs && l > b.guardRel*minLoad
	}
	if over(prefLoad) {
		// Spill: to the best of the backends within the guard's bounds
		// (the least loaded always is), a copy of the prefix first: a hot
		// tenant then spreads over as many backends as its load needs
		// and no more, each holding its prefix. None holds any: the
		// dynamic choice among them.
		var obuf [maxStack]int32
		others := obuf[:0]
		for k, c := range cands {
			ok[k] = !over(loads[k])
			if ok[k] {
				others = append(others, c)
			}
		}
		if alt, n := b.best(backends, cands, held, ok, key.Anchor, home); n > 0 {
			chosen = alt
		} else if chosen = others[0]; len(others) > 1 {
			chosen = b.twoChoices(backends, others, now)
		}
		d.Reason, d.GuardOverride = ReasonLoad, true
	}
	b.index.Record(key.Chain(), int(chosen))
	return chosen
}

// best returns the candidate (among those ok allows; nil: all) that holds
// the most leading blocks of the prompt, and how many. Ties go to the
// anchor's home (pool index; -1: none), then to the higher rendezvous
// score for the anchor, not to the lower load: every replica breaks them
// alike, and once the guard has spilled a tenant to a second backend
// (which the index then records as a holder too) its requests go back to
// the first as soon as the guard allows, rather than alternating between
// the two and filling both caches with it. With no holder at all the
// result is the anchor's home, else its rendezvous choice.
func (b *Balancer) best(backends []*upstream.Backend, cands []int32, held []int, ok []bool, anchor uint64, home int) (int32, int) {
	pick, most, score := int32(-1), -1, math.Inf(-1)
	isHome := false
	for k, c := range cands {
		if ok != nil && !ok[k] {
			continue
		}
		h := int(c) == home
		sc := affinity.Score(anchor, b.names[c], backends[c].Weight)
		if held[k] > most || held[k] == most && (h && !isHome || h == isHome && sc > score) {
			pick, most, score, isHome = c, held[k], sc, h
		}
	}
	return pick, most
}

// load is the load the prefix strategy's guard compares: requests in
// flight through this gateway plus the server's queue when known and
// fresh.
func (b *Balancer) load(be *upstream.Backend, st *State) float64 {
	l := float64(be.Inflight())
	if w := st.Waiting; w > 0 { // false for NaN
		l += w
	}
	return l
}

// twoChoices draws two distinct candidates at random and returns the
// cheaper; costs within tieBand of each other are a tie, which goes to the
// first drawn (at random). math/rand/v2's global source is per-thread in
// the runtime: no lock, no allocation.
func (b *Balancer) twoChoices(backends []*upstream.Backend, cands []int32, now time.Time) int32 {
	n := len(cands)
	x := rand.IntN(n)
	y := rand.IntN(n - 1)
	if y >= x {
		y++
	}
	i, j := cands[x], cands[y]
	states := b.snap.Load().Backends
	li, lj := b.latencies(backends[i], backends[j], now)
	if b.cost(backends[j], &states[j], lj) < (1-tieBand)*b.cost(backends[i], &states[i], li) {
		return j
	}
	return i
}

// tieBand is the relative difference of cost below which two candidates
// are equal. Equal backends' latency estimates differ by noise (the
// scheduling of a shared host, a batch that ran long): without the band,
// light sequential traffic would stick to whichever looked a little faster
// until the others' estimates decayed, and equal backends would split by
// noise. One request more in flight, a queue, a 10× slower backend are far
// outside it.
const tieBand = 0.1

// latencies returns the latency terms of two candidates: their peak-EWMA
// times to the first byte, a backend never measured taking the other's
// (neither favoured nor shunned until it is), 1 for both when neither was.
func (b *Balancer) latencies(x, y *upstream.Backend, now time.Time) (lx, ly float64) {
	if b.wLatency <= 0 {
		return 1, 1
	}
	lx, _ = x.Latency(now)
	ly, _ = y.Latency(now)
	switch {
	case math.IsNaN(lx) && math.IsNaN(ly):
		return 1, 1
	case math.IsNaN(lx):
		lx = ly
	case math.IsNaN(ly):
		ly = lx
	}
	// Below a millisecond (or decayed toward zero after long idleness) the
	// latency is network and scheduling noise, not the model server; the
	// in-flight counts decide.
	return max(lx, minLatency), max(ly, minLatency)
}

// minLatency is the smallest latency term, in seconds.
const minLatency = 1e-3

// Cost returns the dynamic strategy's cost of sending one more request to
// the backend at index i of the pool, as of now (see the package comment).
// A backend never measured is given the mean latency of those that were
// (Pick gives it its rival's: neither favoured nor shunned), 1 s when none
// was. For the admin API and tests.
func (b *Balancer) Cost(i int, now time.Time) float64 {
	backends := b.pool.Backends()
	l := 1.0
	if b.wLatency > 0 {
		if v, _ := backends[i].Latency(now); !math.IsNaN(v) {
			l = max(v, minLatency)
		} else {
			var sum float64
			var n int
			for _, be := range backends {
				if v, _ := be.Latency(now); !math.IsNaN(v) {
					sum += max(v, minLatency)
					n++
				}
			}
			if n > 0 {
				l = sum / float64(n)
			}
		}
	}
	return b.cost(backends[i], &b.snap.Load().Backends[i], l)
}

func (b *Balancer) cost(be *upstream.Backend, st *State, latency float64) float64 {
	q := float64(be.Inflight()) + 1
	if w := st.Waiting; b.wQueue > 0 && w > 0 { // false for NaN
		q += b.wQueue * w
	}
	switch {
	case b.wLatency == 1:
		q *= latency
	case b.wLatency > 0:
		q *= math.Pow(latency, b.wLatency)
	}
	return q * st.ErrorFactor / st.Weight
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
