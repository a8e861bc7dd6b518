package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// SignalsSource gives the analyzers' picture for GET /admin/signals, as
// JSON.
type SignalsSource interface {
	SignalsJSON(ctx context.Context) ([]byte, error)
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

// Baseliner pins the current window as the drift reference (POST /admin/baseline).
type Baseliner interface {
	PinBaseline(ctx context.Context) error
}

// FeedbackSink takes calibration labels from POST /v1/feedback. It returns
// ErrUnknownResponse for an id it does not know.
type FeedbackSink interface {
	Feedback(ctx context.Context, id string, correct bool) error
}

// ErrUnknownResponse is returned by a FeedbackSink for an unknown response id.
var ErrUnknownResponse = exchange.ErrUnknownResponse

func (s *Server) adminAuth(c *gin.Context) {
	tok := s.cfg.Admin.Token
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
	Active              bool       `json:"active"`
	ConsecutiveFailures int64      `json:"consecutive_failures"`
	EjectedUntil        *time.Time `json:"ejected_until,omitempty"`
}

func (s *Server) getBackends(c *gin.Context) {
	snap := s.balancer.Snapshot()
	staleAfter := s.cfg.Balancer.StaleAfter
	now := time.Now()
	known := func(v float64) *float64 {
		if math.IsNaN(v) {
			return nil
		}
		return &v
	}
	out := make([]backendJSON, 0, len(s.pool.Backends()))
	for i, b := range s.pool.Backends() {
		st := &snap.Backends[i]
		j := backendJSON{
			Name: b.Name, URL: b.URL.String(), Kind: b.Kind, Models: b.Models(),
			Healthy: b.Healthy(), Weight: st.Weight, Base: b.Weight, Inflight: b.Inflight(), Picks: b.Picks(),
			Load: map[string]float64{}, LoadBlend: st.Load, Cost: s.balancer.Cost(i, now), WeightShared: st.Shared,
			Health: healthJSON{Active: b.ActiveHealthy(), ConsecutiveFailures: b.ConsecutiveFailures()},
		}
		j.Load = loadOf(st)
		j.Observed.Latency, j.Observed.Errors = known(st.Scores[balance.Latency]), known(st.Scores[balance.Errors])
		j.Observed.TTFBMs, j.Observed.ErrorRate = observed(b, now, staleAfter)
		if !math.IsNaN(st.Waiting) || !math.IsNaN(st.Running) {
			j.Requests = &requestsJSON{Waiting: zeroNaN(st.Waiting), Running: zeroNaN(st.Running)}
		}
		if until := b.EjectedUntil(); !until.IsZero() {
			u := until.UTC()
			j.Health.EjectedUntil = &u
		}
		out = append(out, j)
	}
	c.JSON(http.StatusOK, out)
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
// analyzers' history. Safe for concurrent use.
func (s *Server) BackendStates() []exchange.BackendState {
	snap := s.balancer.Snapshot()
	now := time.Now()
	out := make([]exchange.BackendState, 0, len(s.pool.Backends()))
	for i, b := range s.pool.Backends() {
		st := &snap.Backends[i]
		bs := exchange.BackendState{Name: b.Name, Healthy: b.Healthy(), Weight: st.Weight, Inflight: b.Inflight(), Picks: b.Picks(),
			Load: loadOf(st), LoadBlend: st.Load}
		bs.TTFBMs, bs.ErrorRate = observed(b, now, s.cfg.Balancer.StaleAfter)
		out = append(out, bs)
	}
	return out
}

func (s *Server) getHistory(c *gin.Context) {
	if s.history == nil {
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
	s.writeSource(c, func(ctx context.Context) ([]byte, error) { return s.history.HistoryJSON(ctx, since, step) })
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

func (s *Server) getSignals(c *gin.Context) {
	if s.signals == nil {
		apierror.Write(c.Writer, notEnabled("signal analysis"))
		return
	}
	s.writeSource(c, s.signals.SignalsJSON)
}

func (s *Server) getAlerts(c *gin.Context) {
	if s.alerts == nil {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte("[]"))
		return
	}
	s.writeSource(c, s.alerts.AlertsJSON)
}

func (s *Server) getNotifications(c *gin.Context) {
	if s.notifications == nil {
		c.Data(http.StatusOK, "application/json; charset=utf-8", []byte("[]"))
		return
	}
	s.writeSource(c, s.notifications.NotificationsJSON)
}

func (s *Server) getUsage(c *gin.Context) {
	if s.usage == nil {
		apierror.Write(c.Writer, notEnabled("usage accounting"))
		return
	}
	s.writeSource(c, s.usage.UsageJSON)
}

func (s *Server) writeSource(c *gin.Context, get func(context.Context) ([]byte, error)) {
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

func (s *Server) postBaseline(c *gin.Context) {
	if s.baseline == nil {
		apierror.Write(c.Writer, notEnabled("drift analysis"))
		return
	}
	if err := s.baseline.PinBaseline(c.Request.Context()); err != nil {
		apierror.Write(c.Writer, apierror.New(http.StatusConflict, "invalid_request_error", "baseline_failed", err.Error(), exchange.ClassNone))
		return
	}
	c.JSON(http.StatusOK, gin.H{"pinned": true})
}

func (s *Server) postFeedback(c *gin.Context) {
	body, aerr := request.ReadBody(c.Request, c.Writer, deadlinesOf(c.Writer, c.Request), 64<<10, s.cfg.Limits.ReadTimeout)
	if aerr != nil {
		apierror.Write(c.Writer, aerr)
		return
	}
	var f struct {
		ID      string `json:"id"`
		Correct *bool  `json:"correct"`
	}
	if err := json.Unmarshal(body, &f); err != nil || f.ID == "" || f.Correct == nil {
		apierror.Write(c.Writer, apierror.BadRequest(`expected {"id": "<response id>", "correct": true|false}`))
		return
	}
	if s.feedback == nil {
		apierror.Write(c.Writer, notEnabled("calibration feedback"))
		return
	}
	switch err := s.feedback.Feedback(c.Request.Context(), f.ID, *f.Correct); {
	case errors.Is(err, ErrUnknownResponse):
		apierror.Write(c.Writer, apierror.New(http.StatusNotFound, "invalid_request_error", "unknown_response", "no response with id "+f.ID+" is known", exchange.ClassNone))
	case err != nil:
		apierror.Write(c.Writer, apierror.New(http.StatusInternalServerError, "server_error", "internal_error", err.Error(), exchange.ClassNone))
	default:
		c.JSON(http.StatusOK, gin.H{"recorded": true})
	}
}

// listModels answers GET /v1/models with the union of the healthy
// backends' model lists, in backend order, first occurrence winning.
func (s *Server) listModels(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
	defer cancel()
	backends := slices.DeleteFunc(slices.Clone(s.pool.Backends()), func(b *upstream.Backend) bool { return !b.Healthy() })
	if len(backends) == 0 {
		apierror.Write(c.Writer, pickError(upstream.ErrNoHealthy, "", nil))
		return
	}
	lists := make([][]json.RawMessage, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { lists[i] = s.fetchModels(ctx, b) })
	}
	wg.Wait()
	seen := map[string]bool{}
	data := []json.RawMessage{}
	answered := false
	for _, l := range lists {
		if l != nil {
			answered = true
		}
		for _, m := range l {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(m, &id) != nil || seen[id.ID] {
				continue
			}
			seen[id.ID] = true
			data = append(data, m)
		}
	}
	if !answered {
		apierror.Write(c.Writer, apierror.New(http.StatusBadGateway, "upstream_error", "upstream_unavailable", "no backend answered its model list", exchange.ClassUpstream5xx))
		return
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": data})
}

// fetchModels returns a backend's model objects, nil when it did not answer.
// Models outside a backend's configured list are left out.
func (s *Server) fetchModels(ctx context.Context, b *upstream.Backend) []json.RawMessage {
	get := func(path string) ([]byte, bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.URL.JoinPath(path).String(), nil)
		if err != nil {
			return nil, false
		}
		resp, err := s.client.Do(req)
		if err != nil {
			return nil, false
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return body, err == nil && resp.StatusCode == http.StatusOK
	}
	if body, ok := get("/v1/models"); ok {
		var l struct {
			Data []json.RawMessage `json:"data"`
		}
		if json.Unmarshal(body, &l) == nil {
			return slices.DeleteFunc(l.Data, func(m json.RawMessage) bool {
				var id struct {
					ID string `json:"id"`
				}
				return json.Unmarshal(m, &id) != nil || !b.Serves(id.ID)
			})
		}
	}
	if b.Kind == upstream.KindTGI { // older TGI has only /info
		if body, ok := get("/info"); ok {
			var info struct {
				ModelID string `json:"model_id"`
			}
			if json.Unmarshal(body, &info) == nil && info.ModelID != "" {
				m, _ := json.Marshal(gin.H{"id": info.ModelID, "object": "model", "owned_by": b.Name})
				return []json.RawMessage{m}
			}
		}
	}
	return nil
}
