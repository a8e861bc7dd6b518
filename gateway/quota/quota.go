// Package quota holds tenants to their limits (config.Quotas) across
// gateway replicas: an admission reserves a request and its estimated
// tokens in the shared store in one atomic step (state.Quotas), and the
// end of the request settles the reservation to what it used.
//
// The store is asked with a bound (quotas.timeout). When it does not
// answer, quotas.fail decides: closed refuses (503); open admits from
// the replica's own share of each limit, the limit divided by the live
// replicas, in its memory, and syncs what it admitted into the store once
// it answers again.
package quota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// ErrUnavailable is Admit's error while the store does not answer and
// quotas.fail is closed.
var ErrUnavailable = errors.New("quota store unavailable")

// hold is how long a concurrency slot lives without its settlement: a
// replica that died mid-request frees its slots after it.
const hold = 10 * time.Minute

// replicaTTL is how long a replica counts as live after its last
// heartbeat, sent every replicaTTL/3.
const replicaTTL = 15 * time.Second

// maxPending bounds the settlements waiting for the store; settlers is
// how many goroutines hand them to it.
const (
	maxPending = 8192
	settlers   = 8
)

// A Limiter admits requests under the tenants' limits. It is safe for
// concurrent use; Run does its background work.
type Limiter struct {
	cfg     atomic.Pointer[config.Quotas] // swapped whole by Update
	store   state.Quotas
	local   *state.Memory // the replica's own share while the store is down
	replica string
	log     *slog.Logger

	live    atomic.Int64 // replicas last seen live, at least 1
	down    atomic.Bool  // the store did not answer the last admission
	pending chan settlement
	m       metrics
	// episodes counts the store's outages; admitted the requests
	// admitted from the local share.
	episodes, localAdmits atomic.Int64
	outstanding           atomic.Int64 // settlements queued and not done
	open                  atomic.Int64 // tickets issued and not settled
	// tenants are the tenants admitted or refused so far (their labels
	// are bounded), with their refusals by reason.
	tenants sync.Map // string → *refusals
}

// refusals counts a tenant's refused requests by reason.
type refusals struct {
	requests, tokens, concurrency, unavailable atomic.Int64
}

func (l *Limiter) refusalsOf(tenant string) *refusals {
	if r, ok := l.tenants.Load(tenant); ok {
		return r.(*refusals)
	}
	r, _ := l.tenants.LoadOrStore(tenant, new(refusals))
	return r.(*refusals)
}

// refused counts a refusal of tenant for reason.
func (l *Limiter) refused(tenant, reason string) {
	l.m.rejections.WithLabelValues(tenant, reason).Inc()
	r := l.refusalsOf(tenant)
	switch reason {
	case state.QuotaRequests:
		r.requests.Add(1)
	case state.QuotaTokens:
		r.tokens.Add(1)
	case state.QuotaConcurrency:
		r.concurrency.Add(1)
	default:
		r.unavailable.Add(1)
	}
}

// settlement is what the store, or the local share, must hear of an
// ended request; each part is nil once done.
type settlement struct {
	// shared corrects a reservation in the store.
	shared *state.Settlement
	// local corrects one in the local share; sync is its use, charged to
	// the store once it answers, so that the shared counts are whole.
	local *state.Settlement
	sync  *state.Admission
}

type metrics struct {
	rejections  *prometheus.CounterVec
	storeErrors prometheus.Counter
	remaining   *prometheus.GaugeVec
	dropped     prometheus.Counter
}

// New returns a Limiter over store (nil: one process's memory), as
// replica, for cfg (validated).
func New(cfg config.Quotas, store state.Quotas, replica string, reg prometheus.Registerer, log *slog.Logger) *Limiter {
	if store == nil {
		store = state.NewMemory()
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Limiter{store: store, local: state.NewMemory(), replica: replica, log: log,
		pending: make(chan settlement, maxPending)}
	l.cfg.Store(&cfg)
	l.live.Store(1)
	l.m = metrics{
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_quota_rejections_total",
			Help: "Requests refused by a tenant quota, by tenant and reason (requests, tokens, concurrency, unavailable).",
		}, []string{"tenant", "reason"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_quota_store_errors_total",
			Help: "Quota admissions the shared store did not answer within quotas.timeout.",
		}),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "vigil_quota_remaining_tokens",
			Help: "Tokens a tenant may still use in the last 60 s, as of its latest admission.",
		}, []string{"tenant"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_quota_settlements_dropped_total",
			Help: "Settlements dropped because too many waited for the store: their reservations stand as estimated.",
		}),
	}
	if reg != nil {
		reg.MustRegister(l.m.rejections, l.m.storeErrors, l.m.remaining, l.m.dropped)
	}
	return l
}

// Enabled says whether limits are in force.
func (l *Limiter) Enabled() bool { return l != nil && l.cfg.Load().Enabled }

// Update puts cfg (validated) in force for the requests admitted from
// now on. The counts are the store's, kept by tenant and model, not by
// limit: a tenant's use so far counts against its new limits.
func (l *Limiter) Update(cfg config.Quotas) { l.cfg.Store(&cfg) }

// scopes returns the limits of cfg that hold tenant's use of model; none
// when no limit is set.
func scopes(cfg *config.Quotas, tenant, model string) []state.QuotaScope {
	lim, ok := cfg.Tenants[tenant]
	if !ok {
		lim = cfg.Default
	}
	var out []state.QuotaScope
	if !lim.Zero() {
		out = append(out, scope("t", lim))
	}
	if ml, ok := cfg.Models[model]; ok && !ml.Zero() {
		out = append(out, scope("m:"+model, ml))
	}
	return out
}

func scope(key string, l config.QuotaLimits) state.QuotaScope {
	return state.QuotaScope{Key: key, RequestsPerMinute: l.RequestsPerMinute, TokensPerMinute: l.TokensPerMinute,
		TokensPerDay: l.TokensPerDay, MaxConcurrent: l.MaxConcurrent}
}

// A Ticket is an admitted request's reservation.
type Ticket struct {
	adm     state.Admission
	verdict state.QuotaVerdict
	local   bool
	done    atomic.Bool
	charged int64 // what Settle charged, for the access log
}

// Local reports whether the ticket came from this replica's own share of
// the limits (the store did not answer and quotas.fail is open).
func (t *Ticket) Local() bool { return t.local }

// Charged is the tokens Settle charged (0 before it, or when the request
// was not charged).
func (t *Ticket) Charged() int64 { return t.charged }

// A Refusal is a request refused by a limit.
type Refusal struct {
	Tenant  string
	Reason  string // state.QuotaRequests, QuotaTokens or QuotaConcurrency
	Verdict state.QuotaVerdict
	Scopes  []state.QuotaScope
	Tokens  int64
}

// Estimate is the tokens reserved for a request: its prompt's (a token
// per 4 bytes of its body, an overestimate for most text) and its most
// completion tokens (maxTokens; the default when it set none).
func (l *Limiter) Estimate(bodyBytes int, maxTokens float64, set bool) int64 {
	out := l.cfg.Load().DefaultMaxTokens
	if set && maxTokens >= 0 && maxTokens < math.MaxInt32 {
		out = int64(maxTokens)
	}
	return PromptEstimate(bodyBytes) + out
}

// PromptEstimate is the tokens a prompt of bodyBytes bytes of request
// body is taken to hold: one per 4 bytes, JSON syntax included.
func PromptEstimate(bodyBytes int) int64 { return int64(bodyBytes+3) / 4 }

// Admit reserves a request of tokens for tenant's use of model. It
// returns a nil Ticket and nil Refusal when no limit applies, a Refusal
// when one is reached, and ErrUnavailable when the store does not answer
// and quotas.fail is closed.
func (l *Limiter) Admit(ctx context.Context, tenant, model string, tokens int64) (*Ticket, *Refusal, error) {
	if l == nil {
		return nil, nil, nil
	}
	cfg := l.cfg.Load()
	if !cfg.Enabled {
		return nil, nil, nil
	}
	if tenant == "" {
		tenant = "-" // the requests that name no tenant share one quota
	}
	scopes := scopes(cfg, tenant, model)
	if len(scopes) == 0 {
		return nil, nil, nil
	}
	adm := state.Admission{ID: newID(), Tenant: tenant, Scopes: scopes, Tokens: tokens, Hold: hold}
	actx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	v, err := l.store.Admit(actx, adm)
	cancel()
	local := false
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		l.m.storeErrors.Inc()
		if !l.down.Swap(true) {
			l.episodes.Add(1)
			l.log.Warn("quota store does not answer: admitting "+map[bool]string{true: "from this replica's share of each limit", false: "nothing (quotas.fail: closed)"}[cfg.Fail == config.QuotaFailOpen],
				"err", err, "live_replicas", l.live.Load())
		}
		if cfg.Fail != config.QuotaFailOpen {
			l.refused(tenant, "unavailable")
			return nil, nil, ErrUnavailable
		}
		share := adm
		share.Scopes = shares(scopes, l.live.Load())
		if v, err = l.local.Admit(ctx, share); err != nil {
			return nil, nil, err
		}
		local = true
		if v.Admitted {
			l.localAdmits.Add(1)
		}
	} else if l.down.Swap(false) {
		l.log.Info("quota store answers again")
	}
	if !v.Admitted {
		l.refused(tenant, v.Reason)
		return nil, &Refusal{Tenant: tenant, Reason: v.Reason, Verdict: v, Scopes: scopes, Tokens: tokens}, nil
	}
	l.refusalsOf(tenant) // known from now on, for QuotasJSON
	if len(v.Use) > 0 && scopes[0].TokensPerMinute > 0 {
		l.m.remaining.WithLabelValues(tenant).Set(float64(max(scopes[0].TokensPerMinute-v.Use[0].Tokens, 0)))
	}
	l.open.Add(1)
	return &Ticket{adm: adm, verdict: v, local: local}, nil, nil
}

// shares divides each limit by the live replicas (rounding up: a limit
// below the replicas' count still admits one each).
func shares(scopes []state.QuotaScope, live int64) []state.QuotaScope {
	live = max(live, 1)
	div := func(v int64) int64 {
		if v == 0 {
			return 0
		}
		return (v + live - 1) / live
	}
	out := make([]state.QuotaScope, len(scopes))
	for i, s := range scopes {
		out[i] = state.QuotaScope{Key: s.Key, RequestsPerMinute: div(s.RequestsPerMinute), TokensPerMinute: div(s.TokensPerMinute),
			TokensPerDay: div(s.TokensPerDay), MaxConcurrent: div(s.MaxConcurrent)}
	}
	return out
}

// Settle ends t's request: used tokens are what it used (negative:
// unknown, the estimate stands), charged says whether it counts at all (a
// request the backend failed with a 5xx, or that the gateway answered
// itself after admitting it, does not). It never waits: the store hears
// of it from Run. Settling twice is a no-op.
func (l *Limiter) Settle(t *Ticket, used int64, charged bool) {
	if t == nil || t.done.Swap(true) {
		return
	}
	if used < 0 {
		used = t.adm.Tokens
	}
	if charged {
		t.charged = used
	}
	st := state.Settlement{ID: t.adm.ID, Tenant: t.adm.Tenant, Second: t.verdict.Second, Day: t.verdict.Day,
		Tokens: used - t.adm.Tokens}
	for _, s := range t.adm.Scopes {
		st.Keys = append(st.Keys, s.Key)
	}
	if !charged {
		st.Tokens, st.Requests = -t.adm.Tokens, -1
	}
	var s settlement
	if !t.local {
		s.shared = &st
	} else {
		s.local = &st
		if charged {
			sync := state.Admission{ID: t.adm.ID + "-sync", Tenant: t.adm.Tenant, Tokens: used}
			for _, sc := range t.adm.Scopes {
				sync.Scopes = append(sync.Scopes, state.QuotaScope{Key: sc.Key})
			}
			s.sync = &sync
		}
	}
	l.outstanding.Add(1)
	l.open.Add(-1) // after: Pending never reads 0 in between
	select {
	case l.pending <- s:
	default:
		l.outstanding.Add(-1)
		l.m.dropped.Inc()
	}
}

// Pending returns how many admitted requests the store has yet to hear
// the end of: those still running, and those whose settlement waits.
func (l *Limiter) Pending() int { return int(l.open.Load() + l.outstanding.Load()) }

// Run sends settlements to the store and the replica's heartbeat, until
// ctx ends.
func (l *Limiter) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { l.heartbeat(ctx) })
	// Settlements are a store round trip each, as admissions are, but
	// admissions run on as many goroutines as requests arrive: one
	// settler fell behind two admitting cores (BenchmarkAdmit: 15 % of
	// the settlements dropped against a local Redis), several keep up.
	for range settlers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case s := <-l.pending:
					l.settle(ctx, s)
				}
			}
		})
	}
}

// settle applies one settlement; what the store does not take waits for
// a later try.
func (l *Limiter) settle(ctx context.Context, s settlement) {
	if s.local != nil {
		_ = l.local.Settle(ctx, *s.local)
		s.local = nil
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if s.sync != nil {
		if _, err := l.store.Admit(sctx, *s.sync); err != nil {
			l.requeue(ctx, s)
			return
		}
		s.sync = nil
	}
	if s.shared != nil {
		if err := l.store.Settle(sctx, *s.shared); err != nil {
			l.requeue(ctx, s)
			return
		}
	}
	l.outstanding.Add(-1)
}

// requeue puts s back for a later try after a pause, unless the queue is
// full: then the reservation stands as estimated (its concurrency slot
// lapses after hold).
func (l *Limiter) requeue(ctx context.Context, s settlement) {
	t := time.NewTimer(250 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	select {
	case l.pending <- s:
	default:
		l.outstanding.Add(-1)
		l.m.dropped.Inc()
	}
}

func (l *Limiter) heartbeat(ctx context.Context) {
	t := time.NewTicker(replicaTTL / 3)
	defer t.Stop()
	for {
		if l.Enabled() {
			hctx, cancel := context.WithTimeout(ctx, time.Second)
			if n, err := l.store.Replicas(hctx, l.replica, replicaTTL); err == nil && n > 0 {
				l.live.Store(int64(n))
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Headers sets OpenAI's rate-limit headers from t's admission: the limit,
// remaining and reset of requests and of tokens, each the tightest of
// t's scopes.
func (t *Ticket) Headers(h http.Header) {
	if t == nil {
		return
	}
	writeHeaders(h, t.adm.Scopes, t.verdict, 0)
}

// Headers sets the rate-limit headers and retry-after of a refusal.
func (r *Refusal) Headers(h http.Header) {
	writeHeaders(h, r.Scopes, r.Verdict, r.Tokens)
	if !r.Verdict.TooLarge {
		h.Set("Retry-After", strconv.FormatInt(int64(math.Ceil(r.Verdict.RetryAfter.Seconds())), 10))
	}
}

func writeHeaders(h http.Header, scopes []state.QuotaScope, v state.QuotaVerdict, _ int64) {
	type lim struct {
		limit, remaining int64
		reset            time.Duration
		set              bool
	}
	var rq, tk lim
	for i, s := range scopes {
		if i >= len(v.Use) {
			break
		}
		u := v.Use[i]
		if l := s.RequestsPerMinute; l > 0 {
			if r := max(l-u.Requests, 0); !rq.set || r < rq.remaining {
				rq = lim{l, r, u.ResetRequests, true}
			}
		}
		if l := s.TokensPerMinute; l > 0 {
			if r := max(l-u.Tokens, 0); !tk.set || r < tk.remaining {
				tk = lim{l, r, u.ResetTokens, true}
			}
		}
		if l := s.TokensPerDay; l > 0 {
			if r := max(l-u.TokensDay, 0); !tk.set || r < tk.remaining {
				tk = lim{l, r, u.DayReset, true}
			}
		}
	}
	if rq.set {
		h.Set("X-Ratelimit-Limit-Requests", strconv.FormatInt(rq.limit, 10))
		h.Set("X-Ratelimit-Remaining-Requests", strconv.FormatInt(rq.remaining, 10))
		h.Set("X-Ratelimit-Reset-Requests", resetString(rq.reset))
	}
	if tk.set {
		h.Set("X-Ratelimit-Limit-Tokens", strconv.FormatInt(tk.limit, 10))
		h.Set("X-Ratelimit-Remaining-Tokens", strconv.FormatInt(tk.remaining, 10))
		h.Set("X-Ratelimit-Reset-Tokens", resetString(tk.reset))
	}
}

// resetString writes d as OpenAI does: "1s", "6m0s", "20ms".
func resetString(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(max(d.Milliseconds(), 0), 10) + "ms"
	}
	return d.Round(time.Second).String()
}

// QuotasJSON describes the quotas in force for GET /admin/usage: the
// store's state and, for each tenant with limits that was configured or
// seen, its limits, its use in the last 60 s and the UTC day, what
// remains, its requests in flight and its refusals by reason.
func (l *Limiter) QuotasJSON(ctx context.Context) ([]byte, error) {
	cfg := l.cfg.Load()
	type limitsJSON struct {
		RequestsPerMinute int64 `json:"requests_per_minute"`
		TokensPerMinute   int64 `json:"tokens_per_minute"`
		TokensPerDay      int64 `json:"tokens_per_day"`
		MaxConcurrent     int64 `json:"max_concurrent"`
	}
	type useJSON struct {
		Requests  int64 `json:"requests_last_minute"`
		Tokens    int64 `json:"tokens_last_minute"`
		TokensDay int64 `json:"tokens_today"`
		InFlight  int64 `json:"in_flight"`
	}
	// remainingJSON is what a tenant may still use; null where it has
	// no limit.
	type remainingJSON struct {
		RequestsPerMinute *int64 `json:"requests_per_minute"`
		TokensPerMinute   *int64 `json:"tokens_per_minute"`
		TokensPerDay      *int64 `json:"tokens_per_day"`
		MaxConcurrent     *int64 `json:"max_concurrent"`
	}
	type tenantJSON struct {
		Tenant    string           `json:"tenant"`
		Limits    limitsJSON       `json:"limits"`
		Used      *useJSON         `json:"used,omitempty"`
		Remaining *remainingJSON   `json:"remaining,omitempty"`
		Rejected  map[string]int64 `json:"rejected"`
	}
	out := struct {
		Enabled        bool         `json:"enabled"`
		Fail           string       `json:"fail"`
		Store          string       `json:"store"`
		LiveReplicas   int64        `json:"live_replicas"`
		StoreOutages   int64        `json:"store_outages"`
		AdmittedLocal  int64        `json:"admitted_locally"`
		PendingSettles int          `json:"settlements_pending"`
		Tenants        []tenantJSON `json:"tenants"`
	}{Enabled: cfg.Enabled, Fail: cfg.Fail, Store: "ok", LiveReplicas: l.live.Load(), StoreOutages: l.episodes.Load(),
		AdmittedLocal: l.localAdmits.Load(), PendingSettles: int(l.outstanding.Load()), Tenants: []tenantJSON{}}
	if l.down.Load() {
		out.Store = "unreachable"
	}
	names := map[string]bool{}
	for name := range cfg.Tenants {
		names[name] = true
	}
	l.tenants.Range(func(k, _ any) bool { names[k.(string)] = true; return true })
	for _, name := range slices.Sorted(maps.Keys(names)) {
		sc := scopes(cfg, name, "")
		if len(sc) == 0 {
			continue
		}
		lim := sc[0]
		t := tenantJSON{Tenant: name, Limits: limitsJSON{lim.RequestsPerMinute, lim.TokensPerMinute, lim.TokensPerDay, lim.MaxConcurrent},
			Rejected: map[string]int64{}}
		r := l.refusalsOf(name)
		t.Rejected[state.QuotaRequests], t.Rejected[state.QuotaTokens] = r.requests.Load(), r.tokens.Load()
		t.Rejected[state.QuotaConcurrency], t.Rejected["unavailable"] = r.concurrency.Load(), r.unavailable.Load()
		if !l.down.Load() {
			pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
			v, err := l.store.Admit(pctx, state.Admission{Tenant: name, Scopes: sc[:1], Peek: true})
			cancel()
			if err == nil && len(v.Use) == 1 {
				u := v.Use[0]
				t.Used = &useJSON{u.Requests, u.Tokens, u.TokensDay, u.InFlight}
				rem := func(limit, used int64) *int64 {
					if limit == 0 {
						return nil
					}
					r := max(limit-used, 0)
					return &r
				}
				t.Remaining = &remainingJSON{rem(lim.RequestsPerMinute, u.Requests), rem(lim.TokensPerMinute, u.Tokens),
					rem(lim.TokensPerDay, u.TokensDay), rem(lim.MaxConcurrent, u.InFlight)}
			}
		}
		out.Tenants = append(out.Tenants, t)
	}
	return json.Marshal(out)
}
