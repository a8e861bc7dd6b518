package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// The allowed values of the enumerated settings.
var (
	kinds      = []string{KindOpenAI, KindTGI}
	strategies = []string{StrategyPrefix, StrategyDynamic, StrategyRoundRobin, StrategyLeastRequest}
	levels     = []string{"debug", "info", "warn", "error"}
)

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// Validate reports every invalid value in c, joined, each naming its path. It does
// not require backends; [Config.ValidateServe] does.
func (c *Config) Validate() error {
	var l errList
	l.add("listen", checkListen(c.Listen))
	if (c.ListenTLS.CertFile == "") != (c.ListenTLS.KeyFile == "") {
		l.add("listen_tls", errors.New("cert_file and key_file go together: set both or neither"))
	}
	l.nest("backends", validateBackends(c.Backends))
	l.nest("balancer", c.Balancer.Validate())
	l.nest("state", c.State.Validate())
	l.nest("tracing", c.Tracing.Validate())
	l.nest("retrieval", c.Retrieval.Validate())
	l.nest("analyzers", c.Analyzers.Validate())
	l.nest("alerts", c.Alerts.Validate())
	l.nest("admin", c.Admin.Validate())
	l.nest("limits", c.Limits.Validate())
	l.nest("health", c.Health.Validate())
	l.nest("retries", c.Retries.Validate())
	l.nest("cache", c.Cache.Validate())
	l.nest("responses", c.Responses.Validate())
	l.nest("usage", c.Usage.Validate())
	l.nest("quotas", c.Quotas.Validate())
	l.nest("passthrough", c.Passthrough.Validate())
	l.nest("log", c.Log.Validate())
	if e := c.Analyzers.Drift.Text.Embeddings; e.On() {
		l.add("analyzers.drift.text.embeddings.backend", checkEmbeddingBackend(c.Backends, e))
	}
	for i, b := range c.Backends {
		if _, ok := c.Alerts.Tiers[b.Tier]; b.Tier != "" && !ok {
			l.add(indexPath("backends", i)+".tier", fmt.Errorf("tier %q is not in alerts.tiers (known: %s)",
				b.Tier, strings.Join(slices.Sorted(maps.Keys(c.Alerts.Tiers)), ", ")))
		}
	}
	return l.err()
}

// checkEmbeddingBackend checks that e's backend exists, speaks the
// OpenAI API and, when it lists its models, serves e's model.
func checkEmbeddingBackend(bs []Backend, e DriftEmbeddings) error {
	for i, b := range bs {
		name := b.Name
		if name == "" {
			name = fmt.Sprintf("b%d", i)
		}
		if name != e.Backend {
			continue
		}
		if b.Kind == KindTGI {
			return fmt.Errorf("backend %q is of kind tgi, which serves no /v1/embeddings", e.Backend)
		}
		if len(b.Models) > 0 && !slices.Contains(b.Models, e.Model) {
			return fmt.Errorf("backend %q does not serve model %q (its models: %s)", e.Backend, e.Model, strings.Join(b.Models, ", "))
		}
		return nil
	}
	return fmt.Errorf("no backend named %q", e.Backend)
}

// ValidateServe is [Config.Validate] for a gateway about to serve: it also requires
// at least one backend.
func (c *Config) ValidateServe() error {
	var l errList
	if len(c.Backends) == 0 {
		l.add("backends", errors.New("at least one backend is required"))
	}
	if c.Admin.Token == "" && !c.Admin.Open && checkListen(c.Listen) == nil && !loopback(c.Listen) {
		l.add("admin.token", fmt.Errorf("is empty and listen %q is not a loopback address: anyone who reaches it could "+
			"read and change the admin API; set admin.token (or VIGIL_ADMIN_TOKEN), listen on 127.0.0.1, "+
			"or set admin.open: true (VIGIL_ADMIN_OPEN=true) to serve it without a token", c.Listen))
	}
	l.nest("", c.Validate())
	return l.err()
}

// validateBackends checks each backend and what needs them all: unique names and
// references to existing backends. Paths start with the index, "[1].url".
func validateBackends(bs []Backend) error {
	var l errList
	first := make(map[string]int, len(bs))
	for i, b := range bs {
		if _, dup := first[b.Name]; !dup && b.Name != "" {
			first[b.Name] = i
		}
	}
	for i, b := range bs {
		p := indexPath("", i)
		l.nest(p, b.Validate())
		if j := first[b.Name]; b.Name != "" && j != i {
			l.add(joinPath(p, "name"), fmt.Errorf("duplicate name %q (also backends[%d])", b.Name, j))
		}
		if b.Reference != "" {
			switch j, ok := first[b.Reference]; {
			case !ok:
				l.add(joinPath(p, "reference"), fmt.Errorf("no backend named %q", b.Reference))
			case j == i:
				l.add(joinPath(p, "reference"), errors.New("a backend cannot reference itself"))
			}
		}
	}
	return l.err()
}

// Validate checks b alone. Unique names and references to other backends are
// checked by [Config.Validate].
func (b *Backend) Validate() error {
	var l errList
	l.add("name", checkName(b.Name))
	l.add("url", checkHTTPURL(b.URL))
	l.add("kind", oneOf(b.Kind, kinds))
	for i, m := range b.Models {
		if strings.TrimSpace(m) == "" {
			l.add(indexPath("models", i), errors.New("must not be empty"))
		}
	}
	if !(b.Weight > 0) { // also rejects NaN
		l.add("weight", fmt.Errorf("must be > 0, got %v", b.Weight))
	}
	l.add("agent", checkOptionalHTTPURL(b.Agent))
	l.add("metrics", checkOptionalHTTPURL(b.Metrics))
	return l.err()
}

// Validate checks b.
func (b *Balancer) Validate() error {
	var l errList
	l.add("strategy", oneOf(b.Strategy, strategies))
	w := &b.LoadWeights
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"cpu", w.CPU}, {"mem", w.Mem}, {"gpu", w.GPU}, {"gpu_mem", w.GPUMem},
		{"queue", w.Queue}, {"kv_cache", w.KVCache},
	} {
		if !(f.v >= 0 && f.v <= 1e6) { // also rejects NaN and infinities
			l.add("load_weights."+f.name, fmt.Errorf("must be in [0, 1000000], got %v", f.v))
		}
	}
	// Exponents in the cost: beyond 4 one slow answer would rule a
	// backend out for minutes.
	for _, f := range []struct {
		name string
		v    float64
	}{{"latency", w.Latency}, {"errors", w.Errors}} {
		if !(f.v >= 0 && f.v <= 4) {
			l.add("load_weights."+f.name, fmt.Errorf("must be in [0, 4] (an exponent of the cost), got %v", f.v))
		}
	}
	if !(b.QueueSaturation > 0 && b.QueueSaturation <= 1e6) {
		l.add("queue_saturation", fmt.Errorf("must be in (0, 1000000], got %v", b.QueueSaturation))
	}
	l.add("stale_after", checkPositiveDuration(b.StaleAfter))
	l.add("scrape_interval", checkPositiveDuration(b.ScrapeInterval))
	l.add("latency_decay", checkPositiveDuration(b.LatencyDecay))
	if !(b.Floor > 0 && b.Floor <= 1) {
		l.add("floor", fmt.Errorf("must be in (0, 1], got %v", b.Floor))
	}
	l.nest("prefix", b.Prefix.Validate())
	return l.err()
}

// prefixMaxBlocks is prefix.MaxBlocks (config imports no gateway package):
// the most blocks of a prompt that are hashed.
const prefixMaxBlocks = 256

// Validate checks p.
func (p *Prefix) Validate() error {
	var l errList
	if p.BlockChars <= 0 || p.BlockChars > 1<<20 {
		l.add("block_chars", fmt.Errorf("must be in [1, 1048576], got %d", p.BlockChars))
	} else if p.MaxChars < p.BlockChars || p.MaxChars/p.BlockChars > prefixMaxBlocks {
		l.add("max_chars", fmt.Errorf("must be between block_chars (%d) and %d × block_chars (%d), got %d",
			p.BlockChars, prefixMaxBlocks, prefixMaxBlocks*p.BlockChars, p.MaxChars))
	}
	if p.MinChars < 0 {
		l.add("min_chars", fmt.Errorf("must be >= 0, got %d", p.MinChars))
	}
	if p.IndexSize < 64 || p.IndexSize > 1<<28 {
		l.add("index_size", fmt.Errorf("must be in [64, 268435456], got %d", p.IndexSize))
	}
	l.add("hash", oneOf(p.Hash, []string{PrefixHashXXH, PrefixHashFNV}))
	if !(p.GuardAbs >= 0 && p.GuardAbs <= 1e6) {
		l.add("guard_abs", fmt.Errorf("must be in [0, 1000000], got %v", p.GuardAbs))
	}
	if !(p.HotGuardAbs >= 0 && p.HotGuardAbs <= 1e6) {
		l.add("hot_guard_abs", fmt.Errorf("must be in [0, 1000000], got %v", p.HotGuardAbs))
	}
	if !(p.GuardRel >= 1 && p.GuardRel <= 1e6) {
		l.add("guard_rel", fmt.Errorf("must be in [1, 1000000], got %v", p.GuardRel))
	}
	if !(p.HomeSlack >= 0 && p.HomeSlack <= 100) {
		l.add("home_slack", fmt.Errorf("must be in [0, 100], got %v", p.HomeSlack))
	}
	if p.HomeTTL <= 0 {
		l.add("home_ttl", fmt.Errorf("must be > 0, got %v", p.HomeTTL))
	}
	if p.SessionHeader != "" && !validHeaderName(p.SessionHeader) {
		l.add("session_header", fmt.Errorf("not a valid header name: %q", p.SessionHeader))
	}
	return l.err()
}

// Validate checks s.
func (s *State) Validate() error {
	var l errList
	l.nest("redis", s.Redis.Validate())
	return l.err()
}

// Validate checks r.
func (r *Redis) Validate() error {
	var l errList
	l.add("url", checkRedisURL(r.URL))
	l.add("flush_interval", checkPositiveDuration(r.FlushInterval))
	return l.err()
}

// Validate checks t.
func (t *Tracing) Validate() error {
	var l errList
	l.add("sample_ratio", checkRatio(t.SampleRatio))
	if t.MaxContentBytes < 1 {
		l.add("max_content_bytes", fmt.Errorf("must be >= 1, got %d", t.MaxContentBytes))
	}
	l.add("exporter", oneOf(t.Exporter, []string{"otlp", "none"}))
	return l.err()
}

// Validate checks r.
func (r *Retrieval) Validate() error {
	var l errList
	l.add("url", checkOptionalHTTPURL(r.URL))
	l.add("timeout", checkPositiveDuration(r.Timeout))
	if r.TopK < 1 || r.TopK > 100 {
		l.add("top_k", fmt.Errorf("must be in [1, 100], got %d", r.TopK))
	}
	l.add("inject", oneOf(r.Inject, []string{"system", "user"}))
	l.add("on_error", oneOf(r.OnError, []string{"skip", "fail"}))
	return l.err()
}

// Validate checks a.
func (a *Analyzers) Validate() error {
	var l errList
	if a.QueueSize <= 0 {
		l.add("queue_size", fmt.Errorf("must be > 0, got %d", a.QueueSize))
	}
	if a.MaxCaptureBytes < 0 {
		l.add("max_capture_bytes", fmt.Errorf("must be >= 0, got %d", a.MaxCaptureBytes))
	}
	l.add("interval", checkPositiveDuration(a.Interval))
	l.add("bucket", checkPositiveDuration(a.Bucket))
	l.add("window", checkPositiveDuration(a.Window))
	l.add("reference", checkPositiveDuration(a.Reference))
	if a.Bucket > 0 && a.Window > 0 && a.Window < a.Bucket {
		l.add("window", fmt.Errorf("must be at least one bucket (%v), got %v", a.Bucket, a.Window))
	}
	if a.Bucket > 0 && a.Reference > 0 && a.Reference < a.Bucket {
		l.add("reference", fmt.Errorf("must be at least one bucket (%v), got %v", a.Bucket, a.Reference))
	}
	if a.MinRequests < 10 {
		l.add("min_requests", fmt.Errorf("must be >= 10, got %d", a.MinRequests))
	}
	if !(a.Alpha > 0 && a.Alpha < 1) {
		l.add("alpha", fmt.Errorf("must be in (0, 1), got %v", a.Alpha))
	}
	if a.Consecutive < 1 {
		l.add("consecutive", fmt.Errorf("must be >= 1, got %d", a.Consecutive))
	}
	if a.Seed < 0 {
		l.add("seed", fmt.Errorf("must be >= 0, got %d", a.Seed))
	}
	l.nest("drift", a.Drift.Validate())
	l.nest("confidence", a.Confidence.Validate())
	l.nest("latency", a.Latency.Validate())
	l.nest("output", a.Output.Validate())
	l.nest("calibration", a.Calibration.Validate())
	l.nest("precision", a.Precision.Validate())
	l.nest("segments", a.Segments.Validate())
	return l.err()
}

// Validate checks s.
func (s *Segments) Validate() error {
	var l errList
	if s.MaxModels < 1 || s.MaxModels > 1024 {
		l.add("max_models", fmt.Errorf("must be in [1, 1024], got %d", s.MaxModels))
	}
	if s.Reservoir < 32 {
		l.add("reservoir", fmt.Errorf("must be >= 32, got %d", s.Reservoir))
	}
	return l.err()
}

// Validate checks p.
func (p *Precision) Validate() error {
	var l errList
	l.add("sample_ratio", checkRatio(p.SampleRatio))
	if p.TopLogprobs < 1 || p.TopLogprobs > 20 {
		l.add("top_logprobs", fmt.Errorf("must be in [1, 20], got %d", p.TopLogprobs))
	}
	if p.MaxTokens <= 0 {
		l.add("max_tokens", fmt.Errorf("must be > 0, got %d", p.MaxTokens))
	}
	if p.Concurrency <= 0 {
		l.add("concurrency", fmt.Errorf("must be > 0, got %d", p.Concurrency))
	}
	l.add("timeout", checkPositiveDuration(p.Timeout))
	if p.MinTokens <= 0 {
		l.add("min_tokens", fmt.Errorf("must be > 0, got %d", p.MinTokens))
	}
	if !(p.MaxKL > 0) {
		l.add("max_kl", fmt.Errorf("must be > 0, got %v", p.MaxKL))
	}
	l.add("min_top1_agreement", checkRatio(p.MinTop1Agreement))
	return l.err()
}

// Validate checks d.
func (d *Drift) Validate() error {
	var l errList
	seen := map[string]bool{}
	for i, f := range d.Features {
		switch {
		case !slices.Contains(DriftFeatures, f):
			l.add(indexPath("features", i), fmt.Errorf("unknown feature %q (known: %s)", f, strings.Join(DriftFeatures, ", ")))
		case seen[f]:
			l.add(indexPath("features", i), fmt.Errorf("duplicate feature %q", f))
		}
		seen[f] = true
	}
	if d.Reservoir < 10 || d.Reservoir > 1<<16 {
		l.add("reservoir", fmt.Errorf("must be in [10, 65536], got %d", d.Reservoir))
	}
	l.add("correction", oneOf(d.Correction, []string{"bh", "bonferroni"}))
	if d.PSIBins < 2 || d.PSIBins > 100 {
		l.add("psi_bins", fmt.Errorf("must be in [2, 100], got %d", d.PSIBins))
	}
	if !(d.MinPSI >= 0) {
		l.add("min_psi", fmt.Errorf("must be >= 0, got %v", d.MinPSI))
	}
	l.nest("text", d.Text.Validate())
	return l.err()
}

// Validate checks t.
func (t *DriftText) Validate() error {
	var l errList
	if !(t.MinAUC >= 0.5 && t.MinAUC <= 1) {
		l.add("min_auc", fmt.Errorf("must be in [0.5, 1], got %v", t.MinAUC))
	}
	if t.Terms < 1 || t.Terms > 4096 {
		l.add("terms", fmt.Errorf("must be in [1, 4096], got %d", t.Terms))
	}
	l.nest("embeddings", t.Embeddings.Validate())
	if t.Embeddings.On() && !t.Enabled {
		l.add("embeddings.backend", errors.New("needs analyzers.drift.text.enabled: the embedding test reads the prompts' text as the content test does"))
	}
	return l.err()
}

// Validate checks e; Config.Validate checks that its backend exists.
func (e *DriftEmbeddings) Validate() error {
	var l errList
	if e.On() && strings.TrimSpace(e.Model) == "" {
		l.add("model", errors.New("is required with backend: the embedding model to ask for"))
	}
	if !(e.SampleRatio > 0 && e.SampleRatio <= 1) {
		l.add("sample_ratio", fmt.Errorf("must be in (0, 1], got %v", e.SampleRatio))
	}
	if e.Concurrency < 1 || e.Concurrency > 64 {
		l.add("concurrency", fmt.Errorf("must be in [1, 64], got %d", e.Concurrency))
	}
	if e.Queue < 1 || e.Queue > 1<<16 {
		l.add("queue", fmt.Errorf("must be in [1, 65536], got %d", e.Queue))
	}
	if e.Batch < 1 || e.Batch > 2048 {
		l.add("batch", fmt.Errorf("must be in [1, 2048], got %d", e.Batch))
	}
	if e.MaxChars < 1 || e.MaxChars > 1<<20 {
		l.add("max_chars", fmt.Errorf("must be in [1, 1048576], got %d", e.MaxChars))
	}
	l.add("timeout", checkPositiveDuration(e.Timeout))
	return l.err()
}

// Validate checks c.
func (c *Confidence) Validate() error {
	var l errList
	if !(c.LowProb > 0 && c.LowProb <= 1) {
		l.add("low_prob", fmt.Errorf("must be in (0, 1], got %v", c.LowProb))
	}
	if !(c.MinDrop >= 0 && c.MinDrop < 1) {
		l.add("min_drop", fmt.Errorf("must be in [0, 1), got %v", c.MinDrop))
	}
	l.add("inject.sample_ratio", checkRatio(c.Inject.SampleRatio))
	if c.Inject.TopLogprobs < 0 || c.Inject.TopLogprobs > 20 {
		l.add("inject.top_logprobs", fmt.Errorf("must be in [0, 20], got %d", c.Inject.TopLogprobs))
	}
	return l.err()
}

// Validate checks lat.
func (lat *Latency) Validate() error {
	var l errList
	if !(lat.K > 0) {
		l.add("k", fmt.Errorf("must be > 0, got %v", lat.K))
	}
	if !(lat.MinRise >= 0 && lat.MinRise < 1) {
		l.add("min_rise", fmt.Errorf("must be in [0, 1), got %v", lat.MinRise))
	}
	return l.err()
}

// Validate checks o.
func (o *Output) Validate() error {
	var l errList
	if !(o.Sigma > 0) {
		l.add("sigma", fmt.Errorf("must be > 0, got %v", o.Sigma))
	}
	if o.Minutes < 1 {
		l.add("minutes", fmt.Errorf("must be >= 1, got %d", o.Minutes))
	}
	if o.MinBaselineMinutes < 2 {
		l.add("min_baseline_minutes", fmt.Errorf("must be >= 2, got %d", o.MinBaselineMinutes))
	}
	return l.err()
}

// Validate checks c.
func (c *Calibration) Validate() error {
	var l errList
	if c.Bins < 2 || c.Bins > 1000 {
		l.add("bins", fmt.Errorf("must be in [2, 1000], got %d", c.Bins))
	}
	if c.MaxPending < 1 {
		l.add("max_pending", fmt.Errorf("must be >= 1, got %d", c.MaxPending))
	}
	l.add("ttl", checkPositiveDuration(c.TTL))
	if c.MaxLabels < 1 {
		l.add("max_labels", fmt.Errorf("must be >= 1, got %d", c.MaxLabels))
	}
	return l.err()
}

// Validate checks a.
func (a *Alerts) Validate() error {
	var l errList
	l.add("alertmanager_url", checkOptionalHTTPURL(a.AlertmanagerURL))
	l.add("webhook_url", checkOptionalHTTPURL(a.WebhookURL))
	if a.Period <= 0 {
		l.add("period", fmt.Errorf("must be > 0, got %v", a.Period))
	}
	if !(a.Percentile > 0 && a.Percentile <= 1) {
		l.add("percentile", fmt.Errorf("must be in (0, 1], got %v", a.Percentile))
	}
	if !(a.Factor > 0) {
		l.add("factor", fmt.Errorf("must be > 0, got %v", a.Factor))
	}
	l.add("history", checkPositiveDuration(a.History))
	if a.MinHistory < 1 {
		l.add("min_history", fmt.Errorf("must be >= 1, got %d", a.MinHistory))
	}
	if a.Consecutive < 1 {
		l.add("consecutive", fmt.Errorf("must be >= 1, got %d", a.Consecutive))
	}
	l.add("silence", checkPositiveDuration(a.Silence))
	if a.Severity == "" {
		l.add("severity", errors.New("must not be empty"))
	}
	l.add("dashboard_url", checkOptionalHTTPURL(a.DashboardURL))
	for tier, sev := range a.Tiers {
		if tier == "" {
			l.add("tiers", errors.New("a tier name must not be empty"))
		}
		if sev == "" {
			l.add("tiers."+tier, errors.New("severity must not be empty"))
		}
	}
	for rule := range a.Fixed {
		if !slices.Contains(AlertRules, rule) {
			l.add("fixed."+rule, fmt.Errorf("unknown rule (known: %s)", strings.Join(AlertRules, ", ")))
		}
	}
	if r := a.ColdStart.ErrorRate; !(r > 0 && r < 1) {
		l.add("cold_start.error_rate", fmt.Errorf("must be in (0, 1), got %v", r))
	}
	if f := a.ColdStart.LatencyFactor; !(f > 1) {
		l.add("cold_start.latency_factor", fmt.Errorf("must be > 1, got %v", f))
	}
	l.nest("slo", a.SLO.Validate())
	return l.err()
}

// Validate checks s.
func (s *SLO) Validate() error {
	var l errList
	if r := s.ErrorRate; r != 0 && !(r > 0 && r < 1) {
		l.add("error_rate", fmt.Errorf("must be in (0, 1) (e.g. 0.999), or 0 for no error-budget alerts, got %v", r))
	}
	for i, w := range s.Windows {
		at := "windows[" + strconv.Itoa(i) + "]"
		l.add(at+".long", checkPositiveDuration(w.Long))
		l.add(at+".short", checkPositiveDuration(w.Short))
		if w.Short > 0 && w.Long > 0 && w.Short >= w.Long {
			l.add(at+".short", fmt.Errorf("must be shorter than long (%v), got %v", w.Long, w.Short))
		}
		if !(w.Burn > 0) {
			l.add(at+".burn", fmt.Errorf("must be > 0, got %v", w.Burn))
		}
		if s.ErrorRate > 0 && w.Burn*(1-s.ErrorRate) >= 1 {
			l.add(at+".burn", fmt.Errorf("%v × the budget (1 − %v) is 100 %% errors or more: such a window can never fire", w.Burn, s.ErrorRate))
		}
		if w.Severity == "" {
			l.add(at+".severity", errors.New("must not be empty"))
		}
	}
	return l.err()
}

// Validate checks a.
func (a *Admin) Validate() error {
	var l errList
	l.add("token", checkToken(a.Token))
	return l.err()
}

// Validate checks u.
func (u *Usage) Validate() error {
	var l errList
	if u.TenantHeader != "" && !headerNameRE.MatchString(u.TenantHeader) {
		l.add("tenant_header", fmt.Errorf("must be an HTTP header name (letters, digits, '-' and the like), got %q", u.TenantHeader))
	}
	return l.err()
}

// Validate checks q.
func (q *Quotas) Validate() error {
	var l errList
	l.add("fail", oneOf(q.Fail, []string{QuotaFailOpen, QuotaFailClosed}))
	if q.Timeout <= 0 || q.Timeout > 10*time.Second {
		l.add("timeout", fmt.Errorf("must be in (0, 10s], got %v", q.Timeout))
	}
	if q.DefaultMaxTokens < 1 {
		l.add("default_max_tokens", fmt.Errorf("must be >= 1, got %d", q.DefaultMaxTokens))
	}
	l.nest("default", q.Default.Validate())
	for _, name := range slices.Sorted(maps.Keys(q.Tenants)) {
		lim := q.Tenants[name]
		if name == "" {
			l.add("tenants", errors.New("a tenant name is empty"))
		}
		l.nest("tenants."+name, lim.Validate())
	}
	for _, name := range slices.Sorted(maps.Keys(q.Models)) {
		lim := q.Models[name]
		if name == "" {
			l.add("models", errors.New("a model name is empty"))
		}
		l.nest("models."+name, lim.Validate())
	}
	return l.err()
}

// Validate checks l.
func (q *QuotaLimits) Validate() error {
	var l errList
	for _, f := range []struct {
		key string
		v   int64
	}{{"requests_per_minute", q.RequestsPerMinute}, {"tokens_per_minute", q.TokensPerMinute},
		{"tokens_per_day", q.TokensPerDay}, {"max_concurrent", q.MaxConcurrent}} {
		if f.v < 0 {
			l.add(f.key, fmt.Errorf("must be >= 0 (0: no limit), got %d", f.v))
		}
	}
	return l.err()
}

// Validate checks p.
func (p *Passthrough) Validate() error {
	var l errList
	for i, path := range p.AllowAdminPaths {
		if !slices.Contains(AdminPaths, path) {
			l.add(indexPath("allow_admin_paths", i), fmt.Errorf("%q is not an admin path (known: %s)", path, strings.Join(AdminPaths, ", ")))
		}
	}
	l.add("max_upload_bytes", checkPositiveInt(p.MaxUploadBytes))
	return l.err()
}

// headerNameRE matches an HTTP header name (RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")

// Validate checks lim.
func (lim *Limits) Validate() error {
	var l errList
	l.add("max_body_bytes", checkPositiveInt(lim.MaxBodyBytes))
	l.add("upstream_timeout", checkPositiveDuration(lim.UpstreamTimeout))
	if lim.StreamIdleTimeout < 0 {
		l.add("stream_idle_timeout", fmt.Errorf("must be >= 0 (0: no bound), got %v", lim.StreamIdleTimeout))
	}
	l.add("read_header_timeout", checkPositiveDuration(lim.ReadHeaderTimeout))
	l.add("read_timeout", checkPositiveDuration(lim.ReadTimeout))
	l.add("write_timeout", checkPositiveDuration(lim.WriteTimeout))
	l.add("idle_timeout", checkPositiveDuration(lim.IdleTimeout))
	l.add("max_header_bytes", checkPositiveInt(int64(lim.MaxHeaderBytes)))
	if lim.MaxConnections < 0 {
		l.add("max_connections", fmt.Errorf("must be >= 0 (0: no bound), got %d", lim.MaxConnections))
	}
	if lim.MemoryLimit < -1 {
		l.add("memory_limit", fmt.Errorf("must be > 0 (bytes), 0 (derived from max_connections and the container's limit) or -1 (none), got %d", lim.MemoryLimit))
	}
	if lim.ShutdownDelay < 0 {
		l.add("shutdown_delay", fmt.Errorf("must be >= 0, got %v", lim.ShutdownDelay))
	}
	l.add("shutdown_grace", checkPositiveDuration(lim.ShutdownGrace))
	l.add("max_idle_conns", checkPositiveInt(int64(lim.MaxIdleConns)))
	l.add("max_idle_conns_per_host", checkPositiveInt(int64(lim.MaxIdleConnsPerHost)))
	l.add("side_timeout", checkPositiveDuration(lim.SideTimeout))
	return l.err()
}

// Validate checks h.
func (h *Health) Validate() error {
	var l errList
	if !strings.HasPrefix(h.Path, "/") {
		l.add("path", fmt.Errorf("must start with \"/\", got %q", h.Path))
	}
	if h.Interval < 0 {
		l.add("interval", fmt.Errorf("must be >= 0, got %v", h.Interval))
	}
	l.add("timeout", checkPositiveDuration(h.Timeout))
	if h.Failures < 0 {
		l.add("failures", fmt.Errorf("must be >= 0 (0 disables passive ejection), got %d", h.Failures))
	}
	l.add("backoff", checkPositiveDuration(h.Backoff))
	if h.Backoff > 0 && h.MaxBackoff < h.Backoff {
		l.add("max_backoff", fmt.Errorf("must be >= health.backoff (%v), got %v", h.Backoff, h.MaxBackoff))
	}
	return l.err()
}

// Validate checks r.
func (r *Retries) Validate() error {
	var l errList
	if r.Attempts < 1 || r.Attempts > 10 {
		l.add("attempts", fmt.Errorf("must be in [1, 10], got %d", r.Attempts))
	}
	return l.err()
}

// Validate checks lg.
func (lg *Log) Validate() error {
	var l errList
	l.add("level", oneOf(lg.Level, levels))
	return l.err()
}

// The checks below return an error that names no path; the caller adds it.

func oneOf(s string, allowed []string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return fmt.Errorf("%q is not one of %s", s, strings.Join(allowed, ", "))
}

// loopback reports whether the listen address s (host:port) accepts
// connections from this machine only: localhost or a loopback IP. An
// empty host listens on every interface.
func loopback(s string) bool {
	host, _, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func checkListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("must be host:port, got %q", s)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("invalid port %q in %q", port, s)
	}
	return nil
}

func checkName(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if !nameRE.MatchString(s) {
		return fmt.Errorf("invalid name %q: use letters, digits, '_', '.' and '-'", s)
	}
	return nil
}

// parseURL parses s, keeping the URL itself out of the error: it may hold a password.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		if ue, ok := err.(*url.Error); ok {
			err = ue.Err
		}
		return nil, fmt.Errorf("invalid URL: %w", err)
	}
	return u, nil
}

func checkHTTPURL(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	u, err := parseURL(s)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("must be an absolute http or https URL, got %q", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("missing host in %q", u.Redacted())
	}
	return nil
}

func checkOptionalHTTPURL(s string) error {
	if s == "" {
		return nil
	}
	return checkHTTPURL(s)
}

func checkRedisURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := parseURL(s)
	if err != nil {
		return err
	}
	switch u.Scheme {
	case "redis", "rediss":
		if db := strings.TrimPrefix(u.Path, "/"); db != "" {
			if _, err := strconv.ParseUint(db, 10, 31); err != nil {
				return fmt.Errorf("invalid database %q: want redis://host:port/N", db)
			}
		}
	case "unix":
		if u.Path == "" {
			return errors.New("missing socket path: want unix:///path/to/socket")
		}
	default:
		return fmt.Errorf("scheme must be redis, rediss or unix, got %q", u.Scheme)
	}
	return nil
}

func checkRatio(r float64) error {
	if !(r >= 0 && r <= 1) { // also rejects NaN
		return fmt.Errorf("must be in [0, 1], got %v", r)
	}
	return nil
}

func checkPositiveInt(n int64) error {
	if n <= 0 {
		return fmt.Errorf("must be > 0, got %d", n)
	}
	return nil
}

func checkPositiveDuration(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("must be > 0, got %v", d)
	}
	return nil
}

// checkToken rejects whitespace, which a bearer token cannot carry and which usually
// means a stray newline from a file.
func checkToken(s string) error {
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return errors.New("must not contain whitespace or control characters")
	}
	return nil
}

// Validate checks c.
// Validate checks the responses section.
func (c *Responses) Validate() error {
	var l errList
	l.add("owner_ttl", checkPositiveDuration(c.OwnerTTL))
	if c.MaxOwners < 1 {
		l.add("max_owners", fmt.Errorf("must be >= 1, got %d", c.MaxOwners))
	}
	l.add("lookup_timeout", checkPositiveDuration(c.LookupTimeout))
	return l.err()
}

func (c *Cache) Validate() error {
	var l errList
	l.add("ttl", checkPositiveDuration(c.TTL))
	if !(c.Jitter >= 0 && c.Jitter < 1) {
		l.add("jitter", fmt.Errorf("must be in [0, 1), got %v", c.Jitter))
	}
	if c.MaxEntries < 1 {
		l.add("max_entries", fmt.Errorf("must be >= 1, got %d", c.MaxEntries))
	}
	if c.MaxBodyBytes < 1 {
		l.add("max_body_bytes", fmt.Errorf("must be >= 1, got %d", c.MaxBodyBytes))
	}
	l.add("lock_ttl", checkPositiveDuration(c.LockTTL))
	return l.err()
}

// validHeaderName reports whether s is an HTTP field name: one or more
// token characters (RFC 9110, section 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
