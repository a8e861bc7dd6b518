// Package admin serves the gateway's admin API (/admin/*: backends,
// signals, alerts, notifications, history, usage, baseline), the dashboard
// that reads it, and the Go runtime's profiles (/debug/pprof), all behind
// the admin token. What it shows comes in through Options: the gateway's
// backends and balancer, and the analyzers' sources.
package admin

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// SignalsSource gives the analyzers' picture for GET /admin/signals, as
// JSON, and for ?model=NAME the segment that model's requests are counted
// in (ok false: none yet).
type SignalsSource interface {
	SignalsJSON(ctx context.Context) ([]byte, error)
	SegmentJSON(ctx context.Context, model string) (b []byte, ok bool, err error)
}

// AlertsSource gives the alerts for GET /admin/alerts, as a JSON array.
type AlertsSource interface {
	AlertsJSON(ctx context.Context) ([]byte, error)
}

// NotificationsSource gives the newest alert notifications and what
// became of each, for GET /admin/notifications, as a JSON array.
type NotificationsSource interface {
	NotificationsJSON(ctx context.Context) ([]byte, error)
}

// HistorySource gives the evaluations since since, at most one per step,
// for GET /admin/history, as JSON.
type HistorySource interface {
	HistoryJSON(ctx context.Context, since time.Time, step time.Duration) ([]byte, error)
}

// UsageSource gives token usage by tenant, model and backend over the
// last hour and day for GET /admin/usage, as a JSON object.
type UsageSource interface {
	UsageJSON(ctx context.Context) ([]byte, error)
}

// QuotasSource describes the tenant quotas in force, their use and
// refusals, for GET /admin/usage's "quotas", as a JSON object.
type QuotasSource interface {
	QuotasJSON(ctx context.Context) ([]byte, error)
}

// Baseliner pins the current window as the drift reference (POST /admin/baseline).
type Baseliner interface {
	PinBaseline(ctx context.Context) error
}

// Options configure an API. Pool and Balancer are required.
type Options struct {
	// Token is the bearer token the admin routes and the profiles ask
	// for (admin.token). Empty: they are open.
	Token string
	// Pprof serves /debug/pprof (admin.pprof).
	Pprof bool
	// StaleAfter is balancer.stale_after: an older error rate is unknown.
	StaleAfter time.Duration
	Pool       *upstream.Pool
	Balancer   *balance.Balancer
	// Signals, Alerts, Notifications, History, Usage and Baseline back
	// the admin routes. Nil: /admin/signals, /admin/history, /admin/usage
	// and /admin/baseline answer 501, the lists are empty.
	Signals       SignalsSource
	Alerts        AlertsSource
	Notifications NotificationsSource
	History       HistorySource
	Usage         UsageSource
	Baseline      Baseliner
	// Quotas adds "quotas" to /admin/usage. Nil: none.
	Quotas QuotasSource
}

// An API serves the admin routes, the dashboard and the profiles. It is
// safe for concurrent use.
type API struct {
	o Options
}

// New returns the API of o.
func New(o Options) *API { return &API{o: o} }

// SetQuotas sets Options.Quotas; call it before serving.
func (a *API) SetQuotas(q QuotasSource) { a.o.Quotas = q }

// Register adds the API's routes to e: the dashboard (public: its data
// comes from the admin routes), /admin/* behind the token, and
// /debug/pprof when Pprof is on.
func (a *API) Register(e *gin.Engine) {
	e.GET("/dashboard", a.dashboard)
	e.GET("/dashboard/assets/*file", a.dashboardAsset)
	g := e.Group("/admin", a.auth)
	g.GET("/backends", a.getBackends)
	g.GET("/signals", a.getSignals)
	g.GET("/alerts", a.getAlerts)
	g.GET("/notifications", a.getNotifications)
	g.GET("/history", a.getHistory)
	g.GET("/usage", a.getUsage)
	g.GET("/prefix_cache", a.getPrefixCache)
	g.POST("/baseline", a.postBaseline)
	if a.o.Pprof {
		a.pprofRoutes(e)
	}
}

// auth lets a request through with the admin token, or any when none is
// set; others get a 401.
func (a *API) auth(c *gin.Context) {
	tok := a.o.Token
	if tok == "" {
		return
	}
	got, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
		c.Header("WWW-Authenticate", `Bearer realm="vigil-admin"`)
		apierror.Write(c.Writer, apierror.New(http.StatusUnauthorized, "invalid_request_error", "unauthorized", "admin routes need a valid bearer token", exchange.ClassBadRequest))
		c.Abort()
	}
}

// backendJSON is one entry of GET /admin/backends.
type backendJSON struct {
	Name     string   `json:"name"`
	URL      string   `json:"url"`
	Kind     string   `json:"kind"`
	Models   []string `json:"models,omitempty"`
	Healthy  bool     `json:"healthy"`
	Weight   float64  `json:"weight"`
	Base     float64  `json:"base_weight"`
	Inflight int64    `json:"inflight"`
	// Picks counts the requests (attempts) sent to the backend since start.
	Picks int64 `json:"picks"`
	// Load holds the node and server signals in [0, 1] (cpu, mem, gpu,
	// gpu_mem, queue, kv_cache); a signal is absent when unknown or stale.
	Load map[string]float64 `json:"load"`
	// LoadBlend is the node load, the weighted mean of the fresh node
	// signals (cpu, mem, gpu, gpu_mem, kv_cache): weight = base_weight ×
	// (1 − load_blend), at least 1 % of base_weight.
	LoadBlend float64 `json:"load_blend"`
	// Cost is what the dynamic strategy compares between two candidates
	// now: (inflight + waiting + 1) × ttfb × error factor / weight, a
	// backend not yet measured taking the measured ones' mean latency (see
	// gateway/balance).
	Cost     float64       `json:"cost"`
	Observed observedJSON  `json:"observed"`
	Requests *requestsJSON `json:"requests,omitempty"`
	Health   healthJSON    `json:"health"`
	// WeightShared reports a weight taken from the replicas' shared store.
	WeightShared bool `json:"weight_shared,omitempty"`
	// PrefixCache is how much of the prompts the backend served from its
	// prefix (KV) cache.
	PrefixCache prefixCacheJSON `json:"prefix_cache"`
	// DiscoveredModels is the model list read from the backend's
	// /v1/models (LoRA adapters included) while it is fresh; absent for
	// backends with a configured list, TGI backends, or before it is read.
	DiscoveredModels []string `json:"discovered_models,omitempty"`
}

// prefixCacheJSON is a backend's (or the fleet's) prefix-cache figures
// (gateway/upstream's prefixcache.go).
type prefixCacheJSON struct {
	// HitRate is hits/queries over the last window_seconds; null when the
	// window saw no prompt tokens.
	HitRate *float64 `json:"hit_rate"`
	// Source is where hit_rate, queries and hits come from: "server" (the
	// backend's vllm:prefix_cache_* counters) or "gateway" (the cached
	// tokens its answers reported); absent for the fleet, whose backends
	// each use their own.
	Source        string  `json:"source,omitempty"`
	WindowSeconds float64 `json:"window_seconds"`
	// WindowQueries and WindowHits are the prompt tokens looked up and
	// found in the cache over the window; Queries and Hits the totals
	// (the server's since the gateway first read them, a restart's reset
	// bridged).
	WindowQueries float64 `json:"window_queries"`
	WindowHits    float64 `json:"window_hits"`
	Queries       float64 `json:"queries"`
	Hits          float64 `json:"hits"`
	// PromptTokens and CachedTokens are what the backends' answers through
	// this gateway reported since it started: prompt tokens, and those
	// read from the cache.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// Homes is the number of prompt anchors (tenants, conversations,
	// affinity keys) in use whose home this backend is, as this replica
	// knows them; absent unless the strategy is prefix.
	Homes *int `json:"homes,omitempty"`
}

// prefixCacheOf is b's prefix-cache figures: the last scrape's window and
// totals, and the gateway's live counters.
func prefixCacheOf(b *upstream.Backend) prefixCacheJSON {
	j := prefixCacheJSON{Source: upstream.PrefixSourceGateway, WindowSeconds: upstream.PrefixWindow.Seconds(),
		PromptTokens: b.PromptTokens(), CachedTokens: b.CachedTokens()}
	j.Queries, j.Hits = float64(j.PromptTokens), float64(j.CachedTokens)
	if pc := b.PrefixCache(); pc != nil {
		j.Source, j.WindowQueries, j.WindowHits = pc.Source, pc.WindowQueries, pc.WindowHits
		if pc.Source == upstream.PrefixSourceServer {
			j.Queries, j.Hits = pc.Queries, pc.Hits
		}
		if !math.IsNaN(pc.HitRate) {
			v := pc.HitRate
			j.HitRate = &v
		}
	}
	return j
}

// observedJSON is what the gateway itself measures of a backend; absent
// fields are unknown or stale.
type observedJSON struct {
	// TTFBMs is the peak-EWMA time to the first response byte, decayed to
	// now (absent before the first answer).
	TTFBMs *float64 `json:"ttfb_ms,omitempty"`
	// ErrorRate is the EWMA of the share of failed attempts.
	ErrorRate *float64 `json:"error_rate,omitempty"`
	// Latency (1 − fastest/own ttfb) and Errors (the error rate) are
	// scores in [0, 1], shown for comparison; the cost uses the raw values.
	Latency *float64 `json:"latency,omitempty"`
	Errors  *float64 `json:"errors,omitempty"`
}

// requestsJSON holds the server's own request counts, when fresh.
type requestsJSON struct {
	Waiting float64 `json:"waiting"`
	Running float64 `json:"running"`
}

type healthJSON struct {
	// Active is the last active check's result (true before any).
	Active              bool  `json:"active"`
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	// Ejected: passively ejected; EjectedUntil is then the end of the
	// current back-off, before which no readmission probe is sent (past
	// while one is due), and FailedProbes the readmission probes failed
	// since the ejection (kept after the readmission until the next one).
	Ejected      bool       `json:"ejected"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	FailedProbes int64      `json:"failed_probes"`
}

func (a *API) getBackends(c *gin.Context) {
	snap := a.o.Balancer.Snapshot()
	staleAfter := a.o.StaleAfter
	now := time.Now()
	known := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	homes := a.homes()
	out := make([]backendJSON, 0, len(a.o.Pool.Backends()))
	for i, b := range a.o.Pool.Backends() {
		st := &snap.Backends[i]
		j := backendJSON{
			Name: b.Name, URL: b.URL.String(), Kind: b.Kind, Models: b.Models(),
			Healthy: b.Healthy(), Weight: st.Weight, Base: b.Weight, Inflight: b.Inflight(), Picks: b.Picks(),
			Load: map[string]float64{}, LoadBlend: st.Load, Cost: a.o.Balancer.Cost(i, now), WeightShared: st.Shared,
			Health: healthJSON{Active: b.ActiveHealthy(), ConsecutiveFailures: b.ConsecutiveFailures(), FailedProbes: b.FailedProbes()},
		}
		j.Load = loadOf(st)
		j.PrefixCache = prefixCacheOf(b)
		if homes != nil {
			j.PrefixCache.Homes = &homes[i]
		}
		if m := b.DiscoveredModels(); m != nil {
			j.DiscoveredModels = m.IDs()
		}
		j.Observed.Latency, j.Observed.Errors = known(st.Scores[balance.Latency]), known(st.Scores[balance.Errors])
		j.Observed.TTFBMs, j.Observed.ErrorRate = observed(b, now, staleAfter)
		if !math.IsNaN(st.Waiting) || !math.IsNaN(st.Running) {
			j.Requests = &requestsJSON{Waiting: zeroNaN(st.Waiting), Running: zeroNaN(st.Running)}
		}
		if until := b.EjectedUntil(); !until.IsZero() {
			u := until.UTC()
			j.Health.Ejected, j.Health.EjectedUntil = true, &u
		}
		out = append(out, j)
	}
	c.JSON(http.StatusOK, out)
}

// getPrefixCache answers GET /admin/prefix_cache: the fleet's prefix-cache
// figures, Σ hits / Σ queries over the backends (each counted from its
// own source), and each backend's by name.
func (a *API) getPrefixCache(c *gin.Context) {
	f := a.o.Pool.FleetPrefixCache()
	fleet := prefixCacheJSON{WindowSeconds: upstream.PrefixWindow.Seconds(), WindowQueries: f.WindowQueries, WindowHits: f.WindowHits,
		Queries: f.Queries, Hits: f.Hits}
	if !math.IsNaN(f.HitRate) {
		fleet.HitRate = &f.HitRate
	}
	backends := map[string]prefixCacheJSON{}
	homes := a.homes()
	if homes != nil {
		fleet.Homes = new(int)
	}
	for i, b := range a.o.Pool.Backends() {
		j := prefixCacheOf(b)
		if homes != nil {
			j.Homes = &homes[i]
			*fleet.Homes += homes[i]
		}
		fleet.PromptTokens += j.PromptTokens
		fleet.CachedTokens += j.CachedTokens
		backends[b.Name] = j
	}
	c.JSON(http.StatusOK, struct {
		prefixCacheJSON
		Backends map[string]prefixCacheJSON `json:"backends"`
	}{fleet, backends})
}

// homes is the prefix strategy's home count per backend (pool order), nil
// for other strategies.
func (a *API) homes() []int {
	if h := a.o.Balancer.Homes(); h != nil {
		return h.Counts()
	}
	return nil
}

// loadOf is a backend's fresh load signals in [0, 1], by name.
func loadOf(st *balance.State) map[string]float64 {
	load := map[string]float64{}
	for _, sig := range []balance.Signal{balance.CPU, balance.Mem, balance.GPU, balance.GPUMem, balance.Queue, balance.KVCache} {
		if v := st.Scores[sig]; !math.IsNaN(v) {
			load[sig.String()] = v
		}
	}
	return load
}

// observed is what the gateway measured of b: the peak-EWMA time to the
// first byte in ms (decayed to now; nil before any answer) and the EWMA of
// the error rate (nil when unknown or older than staleAfter).
func observed(b *upstream.Backend, now time.Time, staleAfter time.Duration) (ttfbMs, errorRate *float64) {
	if v, _ := b.Latency(now); !math.IsNaN(v) {
		ms := v * 1000
		ttfbMs = &ms
	}
	if v, at := b.ErrorRate(); !math.IsNaN(v) && now.Sub(at) <= staleAfter {
		errorRate = &v
	}
	return ttfbMs, errorRate
}

// BackendStates returns the backends as the gateway sees them now, for the
// analyzers' history.
func (a *API) BackendStates() []exchange.BackendState {
	snap := a.o.Balancer.Snapshot()
	now := time.Now()
	out := make([]exchange.BackendState, 0, len(a.o.Pool.Backends()))
	for i, b := range a.o.Pool.Backends() {
		st := &snap.Backends[i]
		bs := exchange.BackendState{Name: b.Name, Healthy: b.Healthy(), Weight: st.Weight, Inflight: b.Inflight(), Picks: b.Picks(),
			Load: loadOf(st), LoadBlend: st.Load}
		bs.TTFBMs, bs.ErrorRate = observed(b, now, a.o.StaleAfter)
		if pc := b.PrefixCache(); pc != nil {
			bs.PrefixWindowQueries, bs.PrefixWindowHits = pc.WindowQueries, pc.WindowHits
			if !math.IsNaN(pc.HitRate) {
				v := pc.HitRate
				bs.PrefixHitRate = &v
			}
		}
		out = append(out, bs)
	}
	return out
}

func (a *API) getHistory(c *gin.Context) {
	if a.o.History == nil {
		apierror.Write(c.Writer, notEnabled("signal history"))
		return
	}
	now := time.Now()
	since, step := now.Add(-time.Hour), time.Duration(0)
	if v := c.Query("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			since = now.Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			since = t
		} else {
			apierror.Write(c.Writer, apierror.BadRequest(`since: want an RFC 3339 time or a duration ago such as "15m", got `+strconv.Quote(v)))
			return
		}
	}
	if v := c.Query("step"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			apierror.Write(c.Writer, apierror.BadRequest(`step: want a duration such as "10s", got `+strconv.Quote(v)))
			return
		}
		step = d
	}
	writeSource(c, func(ctx context.Context) ([]byte, error) { return a.o.History.HistoryJSON(ctx, since, step) })
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func (a *API) getSignals(c *gin.Context) {
	if a.o.Signals == nil {
		apierror.Write(c.Writer, notEnabled("signal analysis"))
		return
	}
	model, one := c.GetQuery("model")
	if !one {
		writeSource(c, a.o.Signals.SignalsJSON)
		return
	}
	b, ok, err := a.o.Signals.SegmentJSON(c.Request.Context(), model)
	switch {
	case err != nil:
		apierror.Write(c.Writer, apierror.New(http.StatusInternalServerError, "server_error", "internal_error", err.Error(), exchange.ClassNone))
	case !ok:
		apierror.Write(c.Writer, apierror.New(http.StatusNotFound, "invalid_request_error", "model_not_found",
			fmt.Sprintf("no request of model %q (nor of any model without a segment of its own) was seen yet", model), exchange.ClassNone))
	default:
		c.Data(http.StatusOK, "application/json; charset=utf-8", b)
	}
}

func (a *API) getAlerts(c *gin.Context) {
	if a.o.Alerts == nil {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte("[]"))
		return
	}
	writeSource(c, a.o.Alerts.AlertsJSON)
}

func (a *API) getNotifications(c *gin.Context) {
	if a.o.Notifications == nil {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte("[]"))
		return
	}
	writeSource(c, a.o.Notifications.NotificationsJSON)
}

func (a *API) getUsage(c *gin.Context) {
	if a.o.Usage == nil && a.o.Quotas == nil {
		apierror.Write(c.Writer, notEnabled("usage accounting"))
		return
	}
	writeSource(c, func(ctx context.Context) ([]byte, error) {
		// Without the analyzers, the quotas alone.
		usage, err := []byte("{}"), error(nil)
		if a.o.Usage != nil {
			usage, err = a.o.Usage.UsageJSON(ctx)
		}
		if err != nil || a.o.Quotas == nil {
			return usage, err
		}
		q, err := a.o.Quotas.QuotasJSON(ctx)
		if err != nil {
			return nil, err
		}
		// The usage object, its last brace replaced by the quotas member.
		usage = bytes.TrimSpace(usage)
		if len(usage) < 2 || usage[len(usage)-1] != '}' {
			return nil, errors.New("usage is not a JSON object")
		}
		out := append([]byte(nil), usage[:len(usage)-1]...)
		if len(bytes.TrimSpace(out)) > 1 {
			out = append(out, ',')
		}
		out = append(append(append(out, `"quotas":`...), q...), '}')
		return out, nil
	})
}

func writeSource(c *gin.Context, get func(context.Context) ([]byte, error)) {
	body, err := get(c.Request.Context())
	if err != nil {
		apierror.Write(c.Writer, apierror.New(http.StatusInternalServerError, "server_error", "internal_error", err.Error(), exchange.ClassNone))
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", body)
}

func notEnabled(what string) *apierror.Error {
	return apierror.New(http.StatusNotImplemented, "invalid_request_error", "not_enabled", what+" is not enabled in this gateway", exchange.ClassNone)
}

func (a *API) postBaseline(c *gin.Context) {
	if a.o.Baseline == nil {
		apierror.Write(c.Writer, notEnabled("drift analysis"))
		return
	}
	if err := a.o.Baseline.PinBaseline(c.Request.Context()); err != nil {
		apierror.Write(c.Writer, apierror.New(http.StatusConflict, "invalid_request_error", "baseline_failed", err.Error(), exchange.ClassNone))
		return
	}
	c.JSON(http.StatusOK, gin.H{"pinned": true})
}
