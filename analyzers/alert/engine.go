package alert

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/vigil-gw/vigil/analyzers/stats"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/state"
)

// Config are the alerting rules' parameters. A zero value takes the
// default of the matching alerts key in config.DefaultAlerts(): the
// engine has no defaults of its own.
type Config struct {
	// Period is the evaluation period: Observe is called once per Period.
	Period time.Duration
	// History is how far back the adaptive thresholds look (alerts.history).
	History time.Duration
	// Percentile of the history, in (0, 1].
	Percentile float64
	// Factor multiplies the percentile.
	Factor float64
	// MinHistory is the number of past periods a series needs before an
	// adaptive threshold applies (alerts.min_history).
	MinHistory int
	// Consecutive breaching periods fire an alert. Rules in
	// DefaultConsecutive (the perplexity band, whose signal already
	// requires its minutes outside the band) use their own count.
	Consecutive int
	// Silence is the quiet time after a notification for the same label
	// set.
	Silence time.Duration
	// Severity is the severity label. A value's own
	// "severity" label (e.g. from its service tier) wins.
	Severity string
	// Fixed maps rule names to fixed thresholds, used instead of adaptive
	// ones. Nil: DefaultFixed only.
	Fixed map[string]float64
	// Floor maps rule names to the least adaptive threshold: signals that
	// hover around zero (a relative confidence drop, an error rate) would
	// otherwise alert on noise, P95 × 1.1 being barely above their usual
	// spread. Nil: DefaultFloor; an empty non-nil map: no floors.
	Floor map[string]float64
	// DashboardURL goes into the dashboard annotation and generatorURL.
	// Empty: none.
	DashboardURL string
	// ColdStartErrorRate is the error-rate threshold while a series holds
	// fewer than MinHistory periods.
	ColdStartErrorRate float64
	// ColdStartLatencyFactor times the median of the periods a latency
	// series holds is its threshold while it holds fewer than MinHistory.
	ColdStartLatencyFactor float64
}

func (c Config) withDefaults() Config {
	d := config.DefaultAlerts()
	if c.Period <= 0 {
		c.Period = d.Period
	}
	if c.History <= 0 {
		c.History = d.History
	}
	if c.Percentile <= 0 {
		c.Percentile = d.Percentile
	}
	if c.Factor <= 0 {
		c.Factor = d.Factor
	}
	if c.MinHistory <= 0 {
		c.MinHistory = d.MinHistory
	}
	if c.Consecutive <= 0 {
		c.Consecutive = d.Consecutive
	}
	if c.Silence <= 0 {
		c.Silence = d.Silence
	}
	if c.Severity == "" {
		c.Severity = d.Severity
	}
	if c.ColdStartErrorRate <= 0 {
		c.ColdStartErrorRate = d.ColdStart.ErrorRate
	}
	if c.ColdStartLatencyFactor <= 0 {
		c.ColdStartLatencyFactor = d.ColdStart.LatencyFactor
	}
	return c
}

// Value is one rule's value for one period. Labels identify the series
// (backend, model…); nil: the whole gateway.
type Value struct {
	// Rule names the rule (ObserveValues; Observe takes it from the key).
	Rule   string
	V      float64
	Labels map[string]string
	// N is the number of trials when V is a proportion of them (the error
	// rate). A breach must then also be significant: at least V·N
	// successes must be unlikely, P < 0.05, under a binomial of N trials
	// at the threshold rate, so that one error among a few requests is no
	// breach however low the threshold. 0: V is not a proportion.
	N int64
	// Lower, when set, is a one-sided lower confidence bound of V (a
	// quantile of a small window): a breach needs it above the threshold
	// too, so that sampling noise alone does not breach.
	Lower *float64
	// Fixed, when set, is this value's own fixed threshold (an SLO burn
	// rate), in force over Config.Fixed and any adaptive one.
	Fixed *float64
	// Annotations, when set, say more of this period's value than the
	// rule does (what drifted, the terms that rose); the notification
	// carries the latest period's, beside summary and description.
	Annotations map[string]string
	// Verdict, when set, is the signal's own statistical verdict (drift,
	// decay, divergent). Under a cold-start threshold (a floor, not learnt
	// from this deployment) a breach needs it too: a deployment whose
	// normal level sits above the floor must not alert, nor be kept from
	// learning that level, for want of a history.
	Verdict *bool
	// Idle says that the series had nothing to measure this period (the
	// error rate of a backend that no request reached): V is ignored, a
	// firing alert resolves, a pending run ends, and the history learns
	// nothing from the period.
	Idle bool
}

// ThresholdSource says which threshold is in force for a series.
type ThresholdSource string

// Threshold sources.
const (
	// Adaptive: Percentile × Factor of the series' history of
	// non-breaching periods (at least its floor).
	Adaptive ThresholdSource = "adaptive"
	// ColdStart: the history is still shorter than MinHistory periods.
	ColdStart ThresholdSource = "cold_start"
	// Fixed: configured, or the rule's own (the perplexity band, an SLO).
	Fixed ThresholdSource = "fixed"
)

// significance is the level at which a proportion's breach must be
// significant (Value.N).
const significance = 0.05

// Store keeps the histories; state.Store satisfies it. Get returns
// state.ErrNotFound for a missing key.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, error)
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
}

// State is an alert's state.
type State string

// Alert states.
const (
	Pending  State = "pending"  // breaching, fewer than Consecutive periods
	Firing   State = "firing"   // notified (or re-sent) and still breaching
	Silenced State = "silenced" // would fire, but the same label set was notified less than Silence ago
	Resolved State = "resolved" // back inside after firing or being silenced
)

// Alert is one series' alert, as /admin/alerts shows it.
type Alert struct {
	Name      string            `json:"name"`
	Rule      string            `json:"rule"`
	State     State             `json:"state"`
	Labels    map[string]string `json:"labels"`
	Since     time.Time         `json:"since"` // when State began
	Value     stats.Num         `json:"value"`
	Threshold stats.Num         `json:"threshold"` // null when no threshold applies yet
	// ThresholdSource says where Threshold comes from.
	ThresholdSource ThresholdSource `json:"threshold_source"`
}

// storeTimeout bounds each store call of Observe, so that a slow store
// delays an evaluation by a bounded time.
const storeTimeout = 2 * time.Second

// sendTimeout bounds the delivery of one batch, retries included.
const sendTimeout = time.Minute

// An Engine evaluates the rules and queues notifications. Observe must be
// called by one goroutine at a time; Alerts, Stats and Run may be called
// concurrently with it.
type Engine struct {
	cfg      Config
	store    Store // nil: histories in memory only
	now      func() time.Time
	notifier Notifier // nil: nothing is sent
	leader   *Leader
	log      *slog.Logger
	queue    chan []Notification

	obs    sync.Mutex
	series map[string]*series

	snapshot                          atomic.Pointer[[]Alert]
	thresholds                        atomic.Pointer[[]Threshold]
	deliveries                        deliveryLog
	sent, failed, dropped, storeFails atomic.Int64
	retried                           atomic.Int64
}

// series is the state of one rule and label set.
type series struct {
	rule     string
	labels   map[string]string // the alert's labels
	hist     history
	observed int64 // last period observed; -1: none
	// seen is when a value of the series last arrived, counted or not
	// (a second value in one period is not); zero: never.
	seen     time.Time
	streak   int
	state    State // "": inactive
	since    time.Time
	started  time.Time // first breaching period of the current run
	notified time.Time // last firing notification (sent by whichever replica led)
	// notifiedExcess is how far past its threshold the value was when
	// notified, relative to the threshold (excess); NaN when unknown.
	notifiedExcess float64
	episode        bool // the current episode notified: it needs a resolution
	value          float64
	notes          map[string]string // the latest value's Annotations
	thresh         float64
	source         ThresholdSource
	// held are the values of the current pending run, kept out of the
	// history until the run is known: noise (it ends before firing) joins
	// the history late, an incident (it fires) never does.
	held []heldValue
}

// heldValue is a period value waiting for its run's outcome.
type heldValue struct {
	p int64
	v float64
}

// Option configures an Engine.
type Option func(*Engine)

// WithLeader makes the engine send only while it holds l's lease.
func WithLeader(l Leader) Option { return func(e *Engine) { e.leader = &l } }

// WithLogger sets the logger. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithQueue sets how many batches wait for delivery before new ones are
// dropped. Default: 64.
func WithQueue(n int) Option {
	return func(e *Engine) { e.queue = make(chan []Notification, max(n, 1)) }
}

// NewEngine returns an engine. store nil: histories live in memory only;
// clock nil: time.Now; n nil: nothing is sent (alerts are still
// evaluated and listed).
func NewEngine(cfg Config, store Store, clock func() time.Time, n Notifier, opts ...Option) *Engine {
	e := &Engine{cfg: cfg.withDefaults(), store: store, now: clock, notifier: n, series: map[string]*series{}}
	for _, o := range opts {
		o(e)
	}
	if e.now == nil {
		e.now = time.Now
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.queue == nil {
		e.queue = make(chan []Notification, 64)
	}
	if l := e.leader; l != nil {
		if l.Key == "" {
			l.Key = "alert/leader"
		}
		if l.TTL <= 0 {
			l.TTL = 3 * e.cfg.Period
		}
	}
	empty := []Alert{}
	e.snapshot.Store(&empty)
	return e
}

// Observe evaluates one period's values, keyed by rule name (one series
// per rule); see ObserveValues.
func (e *Engine) Observe(ctx context.Context, values map[string]Value) []Notification {
	vs := make([]Value, 0, len(values))
	for rule, v := range values {
		v.Rule = rule
		vs = append(vs, v)
	}
	return e.ObserveValues(ctx, vs)
}

// ObserveValues evaluates one period's values, several series of a rule
// told apart by their labels, and queues the notifications that this
// replica must send; it returns them. A series observed twice in one
// period counts once. Store errors are logged and counted; the engine goes
// on with the history it holds. ObserveValues waits for the store (each
// call bounded) but never for delivery.
func (e *Engine) ObserveValues(ctx context.Context, values []Value) []Notification {
	e.obs.Lock()
	defer e.obs.Unlock()
	now := e.now()
	p := now.UnixNano() / int64(e.cfg.Period)
	var out []Notification
	type keyed struct {
		key string
		s   *series
		v   Value
	}
	var todo []keyed
	for _, v := range values {
		if (!v.Idle && (math.IsNaN(v.V) || math.IsInf(v.V, 0))) || v.Rule == "" {
			continue
		}
		s := e.seriesOf(v.Rule, v.Labels)
		todo = append(todo, keyed{v.Rule + "\x00" + fingerprint(s.labels), s, v})
	}
	// A fixed order, so that notifications come out the same on every run.
	slices.SortFunc(todo, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for _, k := range todo {
		if k.s.observed == p {
			k.s.seen = now
			if n, ok := e.stillBreaching(ctx, k.s, now, k.v); ok {
				out = append(out, n)
			}
			continue
		}
		if n, ok := e.step(ctx, k.s, p, now, k.v); ok {
			out = append(out, n)
		}
		k.s.seen = now
	}
	e.lapse(ctx, now)
	e.publish()
	// The lease is renewed every period, not only when there is news, so
	// that the sender stays the same replica.
	if e.notifier == nil {
		if len(out) > 0 {
			e.deliveries.add(now, out, OutcomeNoReceiver, nil)
		}
		return nil
	}
	if !e.leads(ctx) || len(out) == 0 {
		return nil
	}
	select {
	case e.queue <- out:
	default:
		e.dropped.Add(int64(len(out)))
		e.deliveries.add(now, out, OutcomeDropped, nil)
		e.log.Warn("alert queue full: notifications dropped", "alerts", len(out))
	}
	return out
}

// seriesOf returns the series of rule and labels, creating it.
func (e *Engine) seriesOf(rule string, labels map[string]string) *series {
	ri := info(rule)
	l := map[string]string{"severity": e.cfg.Severity}
	maps.Copy(l, labels)
	l["alertname"], l["signal"], l["rule"] = ri.alertname, ri.signal, rule
	key := fingerprint(l)
	s := e.series[key]
	if s == nil {
		s = &series{rule: rule, labels: l, hist: history{last: -1}, observed: -1}
		e.series[key] = s
	}
	return s
}

// fingerprint is a label set's identity, also its history's store key.
func fingerprint(l map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(l)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(l[k])
	}
	return b.String()
}

func historyKey(s *series) string { return "alert/history/" + fingerprint(s.labels) }

// step runs one period of a series and returns the notification it needs.
func (e *Engine) step(ctx context.Context, s *series, p int64, now time.Time, val Value) (Notification, bool) {
	v := val.V
	e.load(ctx, s)
	if val.Idle {
		return e.idle(s, p, now)
	}
	if !s.seen.IsZero() && now.Sub(s.seen) > e.gap() && s.state != Firing && s.state != Silenced {
		s.streak = 0 // a gap breaks consecutiveness
	}
	s.observed = p
	s.value, s.notes = v, val.Annotations
	s.thresh, s.source = e.threshold(s, p, val)
	breach := v > s.thresh && significant(v, val.N, s.thresh) && (val.Lower == nil || *val.Lower > s.thresh) &&
		(s.source != ColdStart || val.Verdict == nil || *val.Verdict)
	// Only periods inside the threshold join the history the threshold is
	// computed from: an incident must not become its own P95 and resolve
	// itself while it lasts. Breaching periods are still shown
	// (Alert.Value). A pending run that ends without firing was noise: its
	// values join the history then, or the history would lose its upper
	// tail and its P95 sink below the series' own (seed 14 of the
	// stationary week fired drift_score five times that way).
	if !breach {
		capacity := max(int(e.cfg.History/e.cfg.Period), 1)
		if s.state == Pending {
			for _, h := range s.held {
				s.hist.add(h.p, h.v, capacity)
			}
		}
		s.held = s.held[:0]
		s.hist.add(p, v, capacity)
		e.save(ctx, s)
	}

	set := func(st State) {
		if s.state != st {
			s.state, s.since = st, now
		}
	}
	if !breach { // NaN threshold: never breaches
		s.streak = 0
		switch s.state {
		case Firing, Silenced:
			set(Resolved)
			if s.episode {
				s.episode = false
				return e.notification(s, now, true), true
			}
		case Pending:
			s.state, s.since = "", time.Time{}
		}
		return Notification{}, false
	}
	if s.streak == 0 {
		s.started = now
	}
	s.streak++
	if !e.due(s, now) {
		set(Pending)
		s.held = append(s.held, heldValue{p, v})
		return Notification{}, false
	}
	return e.fire(ctx, s, now, v)
}

// due reports whether a series' run has breached long enough to fire:
// consecutive periods observed, and as long in time. Evaluations come
// more often than once a period (every analyzers.interval): a run that
// began at the end of one period would otherwise reach its third period
// observed after little more than one period of breach. A tenth of a
// period absorbs the jitter of evaluations that come once a period.
func (e *Engine) due(s *series, now time.Time) bool {
	c := e.consecutive(s.rule)
	return s.streak >= c && now.Sub(s.started) >= time.Duration(c-1)*e.cfg.Period-e.cfg.Period/10
}

// stillBreaching runs a second value of a period for a pending series:
// when it breaches the period's threshold and the run has now lasted
// long enough, the alert fires on it (the period itself was counted by
// its first value). It returns the notification needed.
func (e *Engine) stillBreaching(ctx context.Context, s *series, now time.Time, val Value) (Notification, bool) {
	if s.state != Pending || val.Idle || !e.due(s, now) {
		return Notification{}, false
	}
	v := val.V
	if !(v > s.thresh && significant(v, val.N, s.thresh) && (val.Lower == nil || *val.Lower > s.thresh) &&
		(s.source != ColdStart || val.Verdict == nil || *val.Verdict)) {
		return Notification{}, false
	}
	s.value, s.notes = v, val.Annotations
	return e.fire(ctx, s, now, v)
}

// fire ends a run that breached long enough: notified, or silenced when
// the same alert was notified less than Silence ago.
func (e *Engine) fire(ctx context.Context, s *series, now time.Time, v float64) (Notification, bool) {
	set := func(st State) {
		if s.state != st {
			s.state, s.since = st, now
		}
	}
	s.held = s.held[:0] // an incident: never learnt
	if !s.notified.IsZero() && now.Sub(s.notified) < e.cfg.Silence && !farther(s) {
		switch {
		case !s.notified.Before(s.started):
			// Notified during this run, possibly by another replica: firing,
			// and whichever replica sends when it ends sends the resolution.
			set(Firing)
			s.episode = true
		case s.state != Firing:
			set(Silenced)
		}
		return Notification{}, false
	}
	set(Firing)
	s.notified, s.notifiedExcess, s.episode = now, excess(v, s.thresh), true
	e.saveNotified(ctx, s)
	return e.notification(s, now, false), true
}

// renotifyFactor: a new episode within the silence is notified anyway
// when it is past its threshold by more than this many times as far as
// the notified one was (farther).
const renotifyFactor = 2

// farther reports whether the series' current run, a new episode (it
// began after the last notification), is past its threshold by more than
// renotifyFactor times the notified episode's excess. The silence is
// meant to keep one cause from paging twice in half an hour; a breach
// twice as deep as the one that paged is not the same episode coming
// back, and a marginal false positive must not hide it. A run that was
// notified itself, or whose notified excess is unknown (a notification
// recorded by an older version), is not.
func farther(s *series) bool {
	if !s.notified.Before(s.started) {
		return false
	}
	x := excess(s.value, s.thresh)
	return x > renotifyFactor*s.notifiedExcess // false for NaN
}

// excess is how far v is past the threshold t, relative to t's size (the
// absolute excess when t is 0), so that excesses of one series compare
// across periods whose adaptive thresholds differ.
func excess(v, t float64) float64 {
	if t == 0 {
		return v
	}
	return (v - t) / math.Abs(t)
}

// idle runs a period with nothing to measure (Value.Idle): the alert, if
// any, ends; its resolution is notified as a value back inside the
// threshold would have it.
func (e *Engine) idle(s *series, p int64, now time.Time) (Notification, bool) {
	s.observed, s.streak = p, 0
	s.held = s.held[:0]
	switch s.state {
	case Firing, Silenced:
		s.state, s.since = Resolved, now
		if s.episode {
			s.episode = false
			return e.notification(s, now, true), true
		}
	case Pending:
		s.state, s.since = "", time.Time{}
	}
	return Notification{}, false
}

// gap is how long a series may go without a value and stay consecutive:
// one and a half periods, so that an evaluation a little late does not
// break a run and a missing one does.
func (e *Engine) gap() time.Duration { return e.cfg.Period * 3 / 2 }

// lapse ends the pending runs of series that have had no value for
// longer than gap: a series that stopped reporting (a backend that gets
// no traffic, a pair with nothing to compare) must not stay pending and
// fire on its next breach as if the run had gone on. The run was noise:
// its held values join the history, as when a value inside the threshold
// ends it.
func (e *Engine) lapse(ctx context.Context, now time.Time) {
	capacity := max(int(e.cfg.History/e.cfg.Period), 1)
	for _, s := range e.series {
		if s.state != Pending || s.seen.IsZero() || now.Sub(s.seen) <= e.gap() {
			continue
		}
		for _, h := range s.held {
			s.hist.add(h.p, h.v, capacity)
		}
		if len(s.held) > 0 {
			e.save(ctx, s)
		}
		s.held = s.held[:0]
		s.state, s.since, s.streak = "", time.Time{}, 0
	}
}

// consecutive is the number of breaching periods that fire rule.
func (e *Engine) consecutive(rule string) int {
	if c, ok := DefaultConsecutive[rule]; ok {
		return c
	}
	return e.cfg.Consecutive
}

// significant reports whether a proportion v of n trials is significantly
// above the rate thresh (Value.N); anything else is.
func significant(v float64, n int64, thresh float64) bool {
	if n <= 0 || !(thresh > 0 && thresh < 1) {
		return true
	}
	k := math.Round(v * float64(n))
	return distuv.Binomial{N: float64(n), P: thresh}.Survival(k-1) < significance
}

// threshold is the series' threshold for period p and where it comes
// from: fixed (the value's own, then configured, then the rule's); while
// the history of the periods before p is shorter than MinHistory, the
// rule's cold-start threshold; then the adaptive one. NaN: none applies
// yet (a latency series with no history, a rule without a cold start).
func (e *Engine) threshold(s *series, p int64, v Value) (float64, ThresholdSource) {
	if v.Fixed != nil {
		return *v.Fixed, Fixed
	}
	if t, ok := e.cfg.Fixed[s.rule]; ok {
		return t, Fixed
	}
	if t, ok := DefaultFixed[s.rule]; ok {
		return t, Fixed
	}
	past := s.hist.values
	if s.hist.last >= p && len(past) > 0 { // another replica recorded p already
		past = past[:len(past)-1]
	}
	floor := e.cfg.Floor
	if floor == nil {
		floor = DefaultFloor
	}
	if len(past) < e.cfg.MinHistory {
		switch s.rule {
		case RuleErrorRate:
			return e.cfg.ColdStartErrorRate, ColdStart
		case RuleTTFT, RuleE2E:
			if len(past) == 0 {
				return math.NaN(), ColdStart
			}
			return e.cfg.ColdStartLatencyFactor * Percentile(past, 0.5), ColdStart
		}
		if f, ok := floor[s.rule]; ok {
			return f, ColdStart
		}
		return math.NaN(), ColdStart
	}
	q := Percentile(past, e.cfg.Percentile)
	t := q + math.Abs(q)*(e.cfg.Factor-1)
	if f, ok := floor[s.rule]; ok {
		t = max(t, f)
	}
	return t, Adaptive
}

// load refreshes the series' history from the store: another replica may
// have recorded periods. On error the local history stands.
func (e *Engine) load(ctx context.Context, s *series) {
	if e.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	b, err := e.store.Get(ctx, historyKey(s))
	switch {
	case errors.Is(err, state.ErrNotFound):
	case err != nil:
		e.storeFails.Add(1)
		e.log.Warn("alert history not loaded", "rule", s.rule, "err", err)
	default:
		h, err := decodeHistory(b)
		if err != nil {
			e.storeFails.Add(1)
			e.log.Warn("alert history ignored", "rule", s.rule, "err", err)
			return
		}
		if h.last >= s.hist.last {
			s.hist = h
		}
	}
	// The last notification time is shared too, so that a replica that
	// restarts, or becomes the sender, keeps the silence.
	if b, err := e.store.Get(ctx, notifiedKey(s)); err == nil {
		at, x, _ := strings.Cut(string(b), " ")
		if t, err := time.Parse(time.RFC3339Nano, at); err == nil && t.After(s.notified) {
			s.notified, s.notifiedExcess = t, math.NaN()
			if f, err := strconv.ParseFloat(x, 64); err == nil {
				s.notifiedExcess = f
			}
		}
	}
}

func notifiedKey(s *series) string { return "alert/notified/" + fingerprint(s.labels) }

// saveNotified records the time of a firing notification in the store.
func (e *Engine) saveNotified(ctx context.Context, s *series) {
	if e.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	// "time excess": the excess lets a replica that takes over judge a
	// deeper episode as the sender would have (farther).
	doc := s.notified.UTC().Format(time.RFC3339Nano) + " " + strconv.FormatFloat(s.notifiedExcess, 'g', -1, 64)
	if err := e.store.Set(ctx, notifiedKey(s), []byte(doc), 2*e.cfg.Silence); err != nil {
		e.storeFails.Add(1)
	}
}

func (e *Engine) save(ctx context.Context, s *series) {
	if e.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := e.store.Set(ctx, historyKey(s), s.hist.encode(), e.cfg.History+e.cfg.Period); err != nil {
		e.storeFails.Add(1)
		e.log.Warn("alert history not saved", "rule", s.rule, "err", err)
	}
}

// notification describes s now. A firing alert's EndsAt leaves room for
// the next re-send (every Silence) so that Alertmanager does not resolve
// it by itself in between.
func (e *Engine) notification(s *series, now time.Time, resolved bool) Notification {
	ri := info(s.rule)
	n := Notification{
		Labels:       maps.Clone(s.labels),
		StartsAt:     s.started.UTC(),
		EndsAt:       now.Add(e.cfg.Silence + 2*e.cfg.Period).UTC(),
		GeneratorURL: e.cfg.DashboardURL,
		resolved:     resolved,
	}
	desc := fmt.Sprintf("%s = %.4g, threshold %.4g, for %d consecutive periods of %v", s.rule, s.value, s.thresh, s.streak, e.cfg.Period)
	if resolved {
		n.EndsAt = now.UTC()
		desc = fmt.Sprintf("%s = %.4g, back inside its threshold %.4g", s.rule, s.value, s.thresh)
	}
	n.Annotations = map[string]string{"summary": ri.summary, "description": desc}
	if !resolved {
		for k, v := range s.notes {
			if _, ok := n.Annotations[k]; !ok {
				n.Annotations[k] = v
			}
		}
	}
	if e.cfg.DashboardURL != "" {
		n.Annotations["dashboard"] = e.cfg.DashboardURL
	}
	return n
}

// publish makes the current alerts visible to Alerts.
func (e *Engine) publish() {
	out := []Alert{}
	ths := []Threshold{}
	for _, s := range e.series {
		ths = append(ths, Threshold{Rule: s.rule, Labels: maps.Clone(s.labels), Value: stats.Num(s.value),
			Threshold: stats.Num(s.thresh), Source: s.source})
		if s.state == "" {
			continue
		}
		out = append(out, Alert{Name: s.labels["alertname"], Rule: s.rule, State: s.state, Labels: maps.Clone(s.labels),
			Since: s.since.UTC(), Value: stats.Num(s.value), Threshold: stats.Num(s.thresh), ThresholdSource: s.source})
	}
	slices.SortFunc(out, func(a, b Alert) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(fingerprint(a.Labels), fingerprint(b.Labels)))
	})
	e.snapshot.Store(&out)
	slices.SortFunc(ths, func(a, b Threshold) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(fingerprint(a.Labels), fingerprint(b.Labels)))
	})
	e.thresholds.Store(&ths)
}

// Threshold is the threshold in force for one series, and the series'
// latest value, alerting or not.
type Threshold struct {
	Rule      string            `json:"rule"`
	Labels    map[string]string `json:"labels"`
	Value     stats.Num         `json:"value"`
	Threshold stats.Num         `json:"threshold"` // null when none applies yet
	Source    ThresholdSource   `json:"source"`
}

// Thresholds returns every series' threshold, by rule and labels.
func (e *Engine) Thresholds() []Threshold {
	if t := e.thresholds.Load(); t != nil {
		return slices.Clone(*t)
	}
	return []Threshold{}
}

// Alerts returns the pending, firing, silenced and resolved alerts, by name
// and labels. A resolved alert stays listed until its series breaches
// again.
func (e *Engine) Alerts() []Alert { return slices.Clone(*e.snapshot.Load()) }

// Stats are the engine's delivery counters, in notifications: Sent
// delivered; Failed given up on (a permanent error, or still failing after
// Silence or at shutdown); Dropped not queued (the queue was full);
// Retried failed deliveries that were tried again, once per attempt.
type Stats struct {
	Sent, Failed, Dropped, Retried int64
	StoreErrors                    int64
}

// Stats returns the delivery counters.
func (e *Engine) Stats() Stats {
	return Stats{Sent: e.sent.Load(), Failed: e.failed.Load(), Dropped: e.dropped.Load(), Retried: e.retried.Load(),
		StoreErrors: e.storeFails.Load()}
}

// Redelivery of a batch whose delivery failed with an error that may pass
// (Alertmanager down, answering 5xx or not answering): the first wait, and
// the longest. A firing notification is sent once per Silence, so a batch
// dropped after one failed delivery lost its alert for half an hour (issue
// 18: Alertmanager answering 500 for a few seconds). Variables for the
// tests.
var (
	redeliverWait    = time.Second
	redeliverMaxWait = 30 * time.Second
)

// pending is a batch being delivered and the notifiers that have not taken
// it yet (each member of a Multi on its own, so that the ones that took it
// do not get it twice).
type pending struct {
	ns    []Notification
	to    []Notifier
	first time.Time // of the first attempt
}

// Run delivers the queued notifications, in order, until ctx is done, then
// tries what is left for a short while. Each delivery, retries included,
// is bounded (sendTimeout). A batch that failed with an error that may
// pass is sent again to the notifiers that did not take it, after a wait
// that doubles from redeliverWait to redeliverMaxWait, until it goes
// through or is Silence old (by then a firing alert is notified afresh);
// the batches behind it wait in the queue, so that a firing notification
// never follows its resolution, and beyond the queue's bound are dropped
// and counted. A batch that failed for good (PermanentError) is logged,
// counted and dropped.
func (e *Engine) Run(ctx context.Context) error {
	var p *pending
	wait := redeliverWait
	for {
		if p == nil {
			select {
			case b := <-e.queue:
				p = e.pending(b)
			case <-ctx.Done():
				return e.drain(p)
			}
		}
		if e.deliver(ctx, p, false) {
			p, wait = nil, redeliverWait
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return e.drain(p)
		}
		wait = min(2*wait, redeliverMaxWait)
	}
}

// drain tries p (if any) and the queued batches once more, for at most two
// seconds in all; what fails is counted as failed.
func (e *Engine) drain(p *pending) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p != nil {
		e.deliver(ctx, p, true)
	}
	for {
		select {
		case b := <-e.queue:
			e.deliver(ctx, e.pending(b), true)
		default:
			return nil
		}
	}
}

func (e *Engine) pending(b []Notification) *pending {
	to := []Notifier{e.notifier}
	if m, ok := e.notifier.(Multi); ok {
		to = slices.Clone(m)
	}
	return &pending{ns: b, to: to, first: time.Now()}
}

// deliver sends p to the notifiers that have not taken it and reports
// whether p is done with: taken by all, or failed for good (a permanent
// error, p older than Silence, or final).
func (e *Engine) deliver(parent context.Context, p *pending, final bool) bool {
	ctx, cancel := context.WithTimeout(parent, sendTimeout)
	defer cancel()
	var left []Notifier
	var errs []error
	for _, n := range p.to {
		err := n.Notify(ctx, p.ns)
		if err != nil {
			errs = append(errs, err)
			if !permanent(err) {
				left = append(left, n)
			}
		}
	}
	p.to = left
	// The wall clock: e.now belongs to the goroutine that observes.
	now := time.Now()
	err := errors.Join(errs...)
	switch {
	case err == nil:
		e.sent.Add(int64(len(p.ns)))
		e.deliveries.add(now, p.ns, OutcomeSent, nil)
		return true
	case len(left) > 0 && !final && parent.Err() != nil:
		return false // shutting down: drain tries once more and counts the outcome
	case len(left) > 0 && !final && now.Sub(p.first) < e.cfg.Silence:
		e.retried.Add(int64(len(p.ns)))
		e.deliveries.add(now, p.ns, OutcomeRetrying, err)
		e.log.Warn("alert notification failed; sending again", "alerts", len(p.ns), "err", err)
		return false
	default:
		e.failed.Add(int64(len(p.ns)))
		e.deliveries.add(now, p.ns, OutcomeFailed, err)
		e.log.Warn("alert notification failed", "alerts", len(p.ns), "err", err)
		return true
	}
}
