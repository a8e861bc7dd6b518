package config_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

// valid returns a configuration that passes ValidateServe, with two backends.
func valid() config.Config {
	c := config.Default()
	c.Backends = []config.Backend{
		{Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai", Weight: 100, Reference: "b"},
		{Name: "b", URL: "https://10.0.0.2:8080/v1", Kind: "tgi", Weight: 1, Models: []string{"m"},
			Agent: "http://10.0.0.2:9400", Metrics: "http://10.0.0.2:8080/metrics"},
	}
	c.State.Redis.URL = "redis://:pw@127.0.0.1:6379/0"
	c.Alerts.AlertmanagerURL = "http://127.0.0.1:9093"
	c.Alerts.WebhookURL = "https://hooks.example.com/T1/B2"
	c.Admin.Token = "s3cret"
	return c
}

func TestValidateValid(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
	}{
		{"two backends", func(*config.Config) {}},
		{"listen on all interfaces", func(c *config.Config) { c.Listen = "0.0.0.0:80" }},
		{"listen on ipv6 loopback, any port", func(c *config.Config) { c.Listen = "[::1]:0" }},
		{"rediss", func(c *config.Config) { c.State.Redis.URL = "rediss://user:pw@redis.internal:6380" }},
		{"unix socket", func(c *config.Config) { c.State.Redis.URL = "unix:///run/redis.sock" }},
		{"ratio bounds", func(c *config.Config) { c.Tracing.SampleRatio = 0 }},
		{"no capture", func(c *config.Config) { c.Analyzers.MaxCaptureBytes = 0 }},
		{"no health checks", func(c *config.Config) { c.Health.Interval = 0 }},
		{"no passive ejection, no retries", func(c *config.Config) { c.Health.Failures, c.Retries.Attempts = 0, 1 }},
		{"static weights", func(c *config.Config) { c.Balancer.LoadWeights = config.LoadWeights{} }},
		{"no alert targets", func(c *config.Config) { c.Alerts.AlertmanagerURL, c.Alerts.WebhookURL = "", "" }},
		{"names with punctuation", func(c *config.Config) {
			c.Backends[0].Name, c.Backends[1].Name, c.Backends[0].Reference = "gpu-0.a_1", "Q4", "Q4"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			if err := c.ValidateServe(); err != nil {
				t.Errorf("ValidateServe() = %v, want nil", err)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*config.Config)
		want   string
	}{
		{"tenant header with a space", func(c *config.Config) { c.Usage.TenantHeader = "X Tenant" },
			`usage.tenant_header: must be an HTTP header name (letters, digits, '-' and the like), got "X Tenant"`},
		{"allowed admin path that is not one", func(c *config.Config) { c.Passthrough.AllowAdminPaths = []string{"/sleep", "/v1/chat/completions"} },
			`passthrough.allow_admin_paths[1]: "/v1/chat/completions" is not an admin path (known: /v1/load_lora_adapter, /v1/unload_lora_adapter, /sleep, /wake_up, /reset_prefix_cache, /reset_mm_cache, /collective_rpc, /start_profile, /stop_profile, /scale_elastic_ep, /pause, /resume)`},
		{"zero upload bound", func(c *config.Config) { c.Passthrough.MaxUploadBytes = 0 },
			`passthrough.max_upload_bytes: must be > 0, got 0`},
		{"listen without port", func(c *config.Config) { c.Listen = "8080" },
			`listen: must be host:port, got "8080"`},
		{"listen port out of range", func(c *config.Config) { c.Listen = ":99999" },
			`listen: invalid port "99999" in ":99999"`},
		{"listen named port", func(c *config.Config) { c.Listen = "localhost:http" },
			`listen: invalid port "http" in "localhost:http"`},
		{"backend url empty", func(c *config.Config) { c.Backends[1].URL = "" },
			`backends[1].url: must not be empty`},
		{"backend url relative", func(c *config.Config) { c.Backends[0].URL = "/v1" },
			`backends[0].url: must be an absolute http or https URL, got "/v1"`},
		{"backend url scheme", func(c *config.Config) { c.Backends[0].URL = "ftp://u:pw@h/" },
			`backends[0].url: must be an absolute http or https URL, got "ftp://u:xxxxx@h/"`},
		{"backend url without host", func(c *config.Config) { c.Backends[0].URL = "http:///v1" },
			`backends[0].url: missing host in "http:///v1"`},
		{"backend url unparsable", func(c *config.Config) { c.Backends[0].URL = "http://h:port" },
			`backends[0].url: invalid URL: invalid port ":port" after host`},
		{"backend kind", func(c *config.Config) { c.Backends[1].Kind = "vllm" },
			`backends[1].kind: "vllm" is not one of openai, tgi`},
		{"backend weight zero", func(c *config.Config) { c.Backends[0].Weight = 0 },
			`backends[0].weight: must be > 0, got 0`},
		{"backend weight negative", func(c *config.Config) { c.Backends[0].Weight = -1 },
			`backends[0].weight: must be > 0, got -1`},
		{"backend weight NaN", func(c *config.Config) { c.Backends[0].Weight = math.NaN() },
			`backends[0].weight: must be > 0, got NaN`},
		{"backend name empty", func(c *config.Config) { c.Backends[0].Name = "" },
			`backends[0].name: must not be empty`},
		{"backend name with space", func(c *config.Config) { c.Backends[1].Name, c.Backends[0].Reference = "b 2", "b 2" },
			`backends[1].name: invalid name "b 2": use letters, digits, '_', '.' and '-'`},
		{"backend names duplicate", func(c *config.Config) { c.Backends[1].Name = "a"; c.Backends[0].Reference = "" },
			`backends[1].name: duplicate name "a" (also backends[0])`},
		{"backend model empty", func(c *config.Config) { c.Backends[1].Models = []string{"m", " "} },
			`backends[1].models[1]: must not be empty`},
		{"backend reference missing", func(c *config.Config) { c.Backends[0].Reference = "zz" },
			`backends[0].reference: no backend named "zz"`},
		{"backend reference itself", func(c *config.Config) { c.Backends[0].Reference = "a" },
			`backends[0].reference: a backend cannot reference itself`},
		{"backend agent", func(c *config.Config) { c.Backends[1].Agent = "10.0.0.2:9400" },
			`backends[1].agent: invalid URL: first path segment in URL cannot contain colon`},
		{"backend metrics", func(c *config.Config) { c.Backends[1].Metrics = "tcp://h:1" },
			`backends[1].metrics: must be an absolute http or https URL, got "tcp://h:1"`},
		{"balancer strategy", func(c *config.Config) { c.Balancer.Strategy = "random" },
			`balancer.strategy: "random" is not one of prefix, dynamic, round_robin, least_request`},
		{"prefix block_chars", func(c *config.Config) { c.Balancer.Prefix.BlockChars = 0 },
			`balancer.prefix.block_chars: must be in [1, 1048576], got 0`},
		{"prefix max_chars below a block", func(c *config.Config) { c.Balancer.Prefix.MaxChars = 100 },
			`balancer.prefix.max_chars: must be between block_chars (256) and 256 × block_chars (65536), got 100`},
		{"prefix max_chars above the blocks", func(c *config.Config) { c.Balancer.Prefix.MaxChars = 65537 + 255 },
			`balancer.prefix.max_chars: must be between block_chars (256) and 256 × block_chars (65536), got 65792`},
		{"prefix min_chars", func(c *config.Config) { c.Balancer.Prefix.MinChars = -1 },
			`balancer.prefix.min_chars: must be >= 0, got -1`},
		{"prefix index_size", func(c *config.Config) { c.Balancer.Prefix.IndexSize = 10 },
			`balancer.prefix.index_size: must be in [64, 268435456], got 10`},
		{"prefix hash", func(c *config.Config) { c.Balancer.Prefix.Hash = "md5" },
			`balancer.prefix.hash: "md5" is not one of xxhash, fnv`},
		{"prefix guard_abs", func(c *config.Config) { c.Balancer.Prefix.GuardAbs = math.NaN() },
			`balancer.prefix.guard_abs: must be in [0, 1000000], got NaN`},
		{"prefix hot_guard_abs", func(c *config.Config) { c.Balancer.Prefix.HotGuardAbs = -1 },
			`balancer.prefix.hot_guard_abs: must be in [0, 1000000], got -1`},
		{"prefix guard_rel", func(c *config.Config) { c.Balancer.Prefix.GuardRel = 0.5 },
			`balancer.prefix.guard_rel: must be in [1, 1000000], got 0.5`},
		{"prefix home_slack", func(c *config.Config) { c.Balancer.Prefix.HomeSlack = -1 },
			`balancer.prefix.home_slack: must be in [0, 100], got -1`},
		{"prefix home_ttl", func(c *config.Config) { c.Balancer.Prefix.HomeTTL = 0 },
			`balancer.prefix.home_ttl: must be > 0, got 0s`},
		{"prefix session_header", func(c *config.Config) { c.Balancer.Prefix.SessionHeader = "X Session" },
			`balancer.prefix.session_header: not a valid header name: "X Session"`},
		{"redis scheme", func(c *config.Config) { c.State.Redis.URL = "http://h:6379" },
			`state.redis.url: scheme must be redis, rediss or unix, got "http"`},
		{"redis database", func(c *config.Config) { c.State.Redis.URL = "redis://h:6379/zero" },
			`state.redis.url: invalid database "zero": want redis://host:port/N`},
		{"redis socket", func(c *config.Config) { c.State.Redis.URL = "unix://" },
			`state.redis.url: missing socket path: want unix:///path/to/socket`},
		{"sample ratio above 1", func(c *config.Config) { c.Tracing.SampleRatio = 1.5 },
			`tracing.sample_ratio: must be in [0, 1], got 1.5`},
		{"sample ratio below 0", func(c *config.Config) { c.Tracing.SampleRatio = -0.1 },
			`tracing.sample_ratio: must be in [0, 1], got -0.1`},
		{"queue size", func(c *config.Config) { c.Analyzers.QueueSize = 0 },
			`analyzers.queue_size: must be > 0, got 0`},
		{"max capture bytes", func(c *config.Config) { c.Analyzers.MaxCaptureBytes = -1 },
			`analyzers.max_capture_bytes: must be >= 0, got -1`},
		{"alertmanager url", func(c *config.Config) { c.Alerts.AlertmanagerURL = "alertmanager" },
			`alerts.alertmanager_url: must be an absolute http or https URL, got "alertmanager"`},
		{"webhook url", func(c *config.Config) { c.Alerts.WebhookURL = "mailto:ops@example.com" },
			`alerts.webhook_url: must be an absolute http or https URL, got "mailto:ops@example.com"`},
		{"alert period", func(c *config.Config) { c.Alerts.Period = 0 },
			`alerts.period: must be > 0, got 0s`},
		{"admin token", func(c *config.Config) { c.Admin.Token = "s3cret\n" },
			`admin.token: must not contain whitespace or control characters`},
		{"max body bytes", func(c *config.Config) { c.Limits.MaxBodyBytes = 0 },
			`limits.max_body_bytes: must be > 0, got 0`},
		{"upstream timeout", func(c *config.Config) { c.Limits.UpstreamTimeout = -1 },
			`limits.upstream_timeout: must be > 0, got -1ns`},
		{"listen tls half", func(c *config.Config) { c.ListenTLS.CertFile = "/etc/tls.crt" },
			`listen_tls: cert_file and key_file go together: set both or neither`},
		{"read header timeout", func(c *config.Config) { c.Limits.ReadHeaderTimeout = 0 },
			`limits.read_header_timeout: must be > 0, got 0s`},
		{"read timeout", func(c *config.Config) { c.Limits.ReadTimeout = 0 },
			`limits.read_timeout: must be > 0, got 0s`},
		{"write timeout", func(c *config.Config) { c.Limits.WriteTimeout = -time.Second },
			`limits.write_timeout: must be > 0, got -1s`},
		{"stream idle timeout", func(c *config.Config) { c.Limits.StreamIdleTimeout = -time.Second },
			`limits.stream_idle_timeout: must be >= 0 (0: no bound), got -1s`},
		{"idle timeout", func(c *config.Config) { c.Limits.IdleTimeout = 0 },
			`limits.idle_timeout: must be > 0, got 0s`},
		{"max header bytes", func(c *config.Config) { c.Limits.MaxHeaderBytes = 0 },
			`limits.max_header_bytes: must be > 0, got 0`},
		{"max connections", func(c *config.Config) { c.Limits.MaxConnections = -1 },
			`limits.max_connections: must be >= 0 (0: no bound), got -1`},
		{"shutdown delay", func(c *config.Config) { c.Limits.ShutdownDelay = -time.Second },
			`limits.shutdown_delay: must be >= 0, got -1s`},
		{"shutdown grace", func(c *config.Config) { c.Limits.ShutdownGrace = 0 },
			`limits.shutdown_grace: must be > 0, got 0s`},
		{"health path", func(c *config.Config) { c.Health.Path = "health" },
			`health.path: must start with "/", got "health"`},
		{"health interval", func(c *config.Config) { c.Health.Interval = -1 },
			`health.interval: must be >= 0, got -1ns`},
		{"health timeout", func(c *config.Config) { c.Health.Timeout = 0 },
			`health.timeout: must be > 0, got 0s`},
		{"health failures", func(c *config.Config) { c.Health.Failures = -1 },
			`health.failures: must be >= 0 (0 disables passive ejection), got -1`},
		{"health backoff", func(c *config.Config) { c.Health.Backoff = 0 },
			`health.backoff: must be > 0, got 0s`},
		{"health max backoff", func(c *config.Config) { c.Health.MaxBackoff = 500 * time.Millisecond },
			`health.max_backoff: must be >= health.backoff (1s), got 500ms`},
		{"retries attempts", func(c *config.Config) { c.Retries.Attempts = 0 },
			`retries.attempts: must be in [1, 10], got 0`},
		{"retries attempts high", func(c *config.Config) { c.Retries.Attempts = 11 },
			`retries.attempts: must be in [1, 10], got 11`},
		{"load weight negative", func(c *config.Config) { c.Balancer.LoadWeights.GPUMem = -1 },
			`balancer.load_weights.gpu_mem: must be in [0, 1000000], got -1`},
		{"load weight NaN", func(c *config.Config) { c.Balancer.LoadWeights.Queue = math.NaN() },
			`balancer.load_weights.queue: must be in [0, 1000000], got NaN`},
		{"queue saturation", func(c *config.Config) { c.Balancer.QueueSaturation = 0 },
			`balancer.queue_saturation: must be in (0, 1000000], got 0`},
		{"stale after", func(c *config.Config) { c.Balancer.StaleAfter = 0 },
			`balancer.stale_after: must be > 0, got 0s`},
		{"scrape interval", func(c *config.Config) { c.Balancer.ScrapeInterval = -time.Second },
			`balancer.scrape_interval: must be > 0, got -1s`},
		{"drift feature", func(c *config.Config) { c.Analyzers.Drift.Features = []string{"prompt_chars", "colour"} },
			`analyzers.drift.features[1]: unknown feature "colour" (known: prompt_chars, prompt_tokens, message_count, script_latin, script_cjk, script_cyrillic, script_digits, script_punct, script_space, max_tokens, temperature, top_p, system_prompt, code_block, model)`},
		{"drift duplicate feature", func(c *config.Config) { c.Analyzers.Drift.Features = []string{"model", "model"} },
			`analyzers.drift.features[1]: duplicate feature "model"`},
		{"window below bucket", func(c *config.Config) { c.Analyzers.Window = time.Second },
			`analyzers.window: must be at least one bucket (10s), got 1s`},
		{"alpha", func(c *config.Config) { c.Analyzers.Alpha = 1 },
			`analyzers.alpha: must be in (0, 1), got 1`},
		{"inject ratio", func(c *config.Config) { c.Analyzers.Confidence.Inject.SampleRatio = 2 },
			`analyzers.confidence.inject.sample_ratio: must be in [0, 1], got 2`},
		{"latency k", func(c *config.Config) { c.Analyzers.Latency.K = 0 },
			`analyzers.latency.k: must be > 0, got 0`},
		{"output minutes", func(c *config.Config) { c.Analyzers.Output.Minutes = 0 },
			`analyzers.output.minutes: must be >= 1, got 0`},
		{"calibration bins", func(c *config.Config) { c.Analyzers.Calibration.Bins = 1 },
			`analyzers.calibration.bins: must be in [2, 1000], got 1`},
		{"drift correction", func(c *config.Config) { c.Analyzers.Drift.Correction = "holm" },
			`analyzers.drift.correction: "holm" is not one of bh, bonferroni`},
		{"drift text min_auc", func(c *config.Config) { c.Analyzers.Drift.Text.MinAUC = 0.4 },
			`analyzers.drift.text.min_auc: must be in [0.5, 1], got 0.4`},
		{"drift text terms", func(c *config.Config) { c.Analyzers.Drift.Text.Terms = -1 },
			`analyzers.drift.text.terms: must be in [1, 4096], got -1`},
		{"embeddings model", func(c *config.Config) {
			c.Backends = []config.Backend{{Name: "emb", URL: "http://127.0.0.1:1", Kind: "openai", Weight: 1}}
			c.Analyzers.Drift.Text.Embeddings.Backend = "emb"
		}, `analyzers.drift.text.embeddings.model: is required with backend: the embedding model to ask for`},
		{"embeddings backend", func(c *config.Config) {
			c.Analyzers.Drift.Text.Embeddings.Backend, c.Analyzers.Drift.Text.Embeddings.Model = "emb", "e5"
		}, `analyzers.drift.text.embeddings.backend: no backend named "emb"`},
		{"embeddings tgi backend", func(c *config.Config) {
			c.Backends = []config.Backend{{Name: "emb", URL: "http://127.0.0.1:1", Kind: "tgi", Weight: 1}}
			c.Analyzers.Drift.Text.Embeddings.Backend, c.Analyzers.Drift.Text.Embeddings.Model = "emb", "e5"
		}, `analyzers.drift.text.embeddings.backend: backend "emb" is of kind tgi, which serves no /v1/embeddings`},
		{"embeddings model not served", func(c *config.Config) {
			c.Backends = []config.Backend{{Name: "emb", URL: "http://127.0.0.1:1", Kind: "openai", Weight: 1, Models: []string{"llama"}}}
			c.Analyzers.Drift.Text.Embeddings.Backend, c.Analyzers.Drift.Text.Embeddings.Model = "emb", "e5"
		}, `analyzers.drift.text.embeddings.backend: backend "emb" does not serve model "e5" (its models: llama)`},
		{"quota fail", func(c *config.Config) { c.Quotas.Fail = "maybe" },
			`quotas.fail: "maybe" is not one of open, closed`},
		{"quota negative", func(c *config.Config) {
			c.Quotas.Tenants = map[string]config.QuotaLimits{"team-a": {TokensPerMinute: -5}}
		}, `quotas.tenants.team-a.tokens_per_minute: must be >= 0 (0: no limit), got -5`},
		{"quota model negative", func(c *config.Config) {
			c.Quotas.Models = map[string]config.QuotaLimits{"llama": {MaxConcurrent: -1}}
		}, `quotas.models.llama.max_concurrent: must be >= 0 (0: no limit), got -1`},
		{"quota timeout", func(c *config.Config) { c.Quotas.Timeout = 0 },
			`quotas.timeout: must be in (0, 10s], got 0s`},
		{"embeddings without text", func(c *config.Config) {
			c.Backends = []config.Backend{{Name: "emb", URL: "http://127.0.0.1:1", Kind: "openai", Weight: 1}}
			c.Analyzers.Drift.Text.Enabled = false
			c.Analyzers.Drift.Text.Embeddings.Backend, c.Analyzers.Drift.Text.Embeddings.Model = "emb", "e5"
		}, `analyzers.drift.text.embeddings.backend: needs analyzers.drift.text.enabled: the embedding test reads the prompts' text as the content test does`},
		{"embeddings sample ratio", func(c *config.Config) { c.Analyzers.Drift.Text.Embeddings.SampleRatio = 0 },
			`analyzers.drift.text.embeddings.sample_ratio: must be in (0, 1], got 0`},
		{"embeddings queue", func(c *config.Config) { c.Analyzers.Drift.Text.Embeddings.Queue = -1 },
			`analyzers.drift.text.embeddings.queue: must be in [1, 65536], got -1`},
		{"embeddings timeout", func(c *config.Config) { c.Analyzers.Drift.Text.Embeddings.Timeout = 0 },
			`analyzers.drift.text.embeddings.timeout: must be > 0, got 0s`},
		{"consecutive", func(c *config.Config) { c.Analyzers.Consecutive = 0 },
			`analyzers.consecutive: must be >= 1, got 0`},
		{"alert fixed rule", func(c *config.Config) { c.Alerts.Fixed = map[string]float64{"latency": 1} },
			`alerts.fixed.latency: unknown rule (known: drift_score, confidence_drop, latency_ttft_p95, latency_e2e_p95, error_rate, perplexity_band, precision_divergence, error_budget_burn, backend_down, backend_slow)`},
		{"cold start error rate", func(c *config.Config) { c.Alerts.ColdStart.ErrorRate = 1 },
			`alerts.cold_start.error_rate: must be in (0, 1), got 1`},
		{"cold start latency factor", func(c *config.Config) { c.Alerts.ColdStart.LatencyFactor = 0.5 },
			`alerts.cold_start.latency_factor: must be > 1, got 0.5`},
		{"slo objective", func(c *config.Config) { c.Alerts.SLO.ErrorRate = 99.9 },
			`alerts.slo.error_rate: must be in (0, 1) (e.g. 0.999), or 0 for no error-budget alerts, got 99.9`},
		{"slo windows", func(c *config.Config) {
			c.Alerts.SLO.ErrorRate = 0.9
			c.Alerts.SLO.Windows = []config.BurnWindow{{Long: time.Minute, Short: time.Hour, Burn: 14.4, Severity: "page"}}
		}, "alerts.slo.windows[0].short: must be shorter than long (1m0s), got 1h0m0s\n" +
			"alerts.slo.windows[0].burn: 14.4 × the budget (1 − 0.9) is 100 % errors or more: such a window can never fire"},
		{"backend tier unknown", func(c *config.Config) {
			c.Alerts.Tiers = map[string]string{"gold": "critical", "bronze": "info"}
			c.Backends[1].Tier = "silver"
		}, `backends[1].tier: tier "silver" is not in alerts.tiers (known: bronze, gold)`},
		{"tier severity empty", func(c *config.Config) { c.Alerts.Tiers = map[string]string{"gold": ""} },
			`alerts.tiers.gold: severity must not be empty`},
		{"precision max_kl", func(c *config.Config) { c.Analyzers.Precision.MaxKL = 0 },
			`analyzers.precision.max_kl: must be > 0, got 0`},
		{"segments max_models", func(c *config.Config) { c.Analyzers.Segments.MaxModels = 0 },
			`analyzers.segments.max_models: must be in [1, 1024], got 0`},
		{"segments reservoir", func(c *config.Config) { c.Analyzers.Segments.Reservoir = 8 },
			`analyzers.segments.reservoir: must be >= 32, got 8`},
		{"precision top_logprobs", func(c *config.Config) { c.Analyzers.Precision.TopLogprobs = 0 },
			`analyzers.precision.top_logprobs: must be in [1, 20], got 0`},
		{"log level", func(c *config.Config) { c.Log.Level = "trace" },
			`log.level: "trace" is not one of debug, info, warn, error`},
		{"balancer floor zero", func(c *config.Config) { c.Balancer.Floor = 0 },
			`balancer.floor: must be in (0, 1], got 0`},
		{"balancer floor above one", func(c *config.Config) { c.Balancer.Floor = 1.5 },
			`balancer.floor: must be in (0, 1], got 1.5`},
		{"redis flush interval", func(c *config.Config) { c.State.Redis.FlushInterval = 0 },
			`state.redis.flush_interval: must be > 0, got 0s`},
		{"analyzers seed negative", func(c *config.Config) { c.Analyzers.Seed = -1 },
			`analyzers.seed: must be >= 0, got -1`},
		{"alerts history", func(c *config.Config) { c.Alerts.History = 0 },
			`alerts.history: must be > 0, got 0s`},
		{"alerts min history", func(c *config.Config) { c.Alerts.MinHistory = 0 },
			`alerts.min_history: must be >= 1, got 0`},
		{"limits max idle conns", func(c *config.Config) { c.Limits.MaxIdleConns = 0 },
			`limits.max_idle_conns: must be > 0, got 0`},
		{"limits max idle conns per host", func(c *config.Config) { c.Limits.MaxIdleConnsPerHost = -1 },
			`limits.max_idle_conns_per_host: must be > 0, got -1`},
		{"limits side timeout", func(c *config.Config) { c.Limits.SideTimeout = 0 },
			`limits.side_timeout: must be > 0, got 0s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tt.want)
			}
			if diff := cmp.Diff(tt.want, err.Error()); diff != "" {
				t.Errorf("Validate() mismatch (-want +got):\n%s", diff)
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(tt.want, fe.Path+": ") {
				t.Errorf("errors.As(FieldError) gave %+v, want the path of %q", fe, tt.want)
			}
		})
	}
}

func TestValidateJoinsAllErrors(t *testing.T) {
	c := valid()
	c.Listen = ""
	c.Backends[1].URL = ""
	c.Backends[1].Kind = ""
	c.Health.Timeout = 0
	c.Log.Level = ""
	want := []string{
		`listen: must be host:port, got ""`,
		`backends[1].url: must not be empty`,
		`backends[1].kind: "" is not one of openai, tgi`,
		`health.timeout: must be > 0, got 0s`,
		`log.level: "" is not one of debug, info, warn, error`,
	}
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() = nil, want errors")
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("Validate() mismatch (-want +got):\n%s", diff)
	}
}

func TestValidateServe(t *testing.T) {
	c := config.Default()
	c.Admin.Token = "t0k3n" // TestValidateServeAdminOpen covers its absence
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() without backends = %v, want nil", err)
	}
	err := c.ValidateServe()
	if diff := cmp.Diff("backends: at least one backend is required", errString(err)); diff != "" {
		t.Errorf("ValidateServe() without backends mismatch (-want +got):\n%s", diff)
	}

	c.Log.Level = "loud"
	want := "backends: at least one backend is required\n" +
		`log.level: "loud" is not one of debug, info, warn, error`
	if diff := cmp.Diff(want, errString(c.ValidateServe())); diff != "" {
		t.Errorf("ValidateServe() mismatch (-want +got):\n%s", diff)
	}
}

// TestValidateServeAdminOpen: without admin.token, `vigil serve` starts on
// a loopback address only, unless admin.open says the open admin API is
// meant; the error names the key and the ways out.
func TestValidateServeAdminOpen(t *testing.T) {
	refused := `admin.token: is empty and listen "%s" is not a loopback address: anyone who reaches it could ` +
		`read and change the admin API; set admin.token (or VIGIL_ADMIN_TOKEN), listen on 127.0.0.1, ` +
		`or set admin.open: true (VIGIL_ADMIN_OPEN=true) to serve it without a token`
	for _, tc := range []struct {
		listen, token string
		open          bool
		want          string
	}{
		{":8080", "", false, fmt.Sprintf(refused, ":8080")},
		{"0.0.0.0:8080", "", false, fmt.Sprintf(refused, "0.0.0.0:8080")},
		{"10.1.2.3:8080", "", false, fmt.Sprintf(refused, "10.1.2.3:8080")},
		{"[::]:8080", "", false, fmt.Sprintf(refused, "[::]:8080")},
		{"example.com:8080", "", false, fmt.Sprintf(refused, "example.com:8080")},
		{":8080", "", true, "<nil>"},
		{":8080", "t0k3n", false, "<nil>"},
		{"127.0.0.1:8080", "", false, "<nil>"},
		{"127.0.0.2:8080", "", false, "<nil>"},
		{"localhost:8080", "", false, "<nil>"},
		{"[::1]:8080", "", false, "<nil>"},
	} {
		c := config.Default()
		c.Backends = []config.Backend{{Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai", Weight: 100}}
		c.Listen, c.Admin.Token, c.Admin.Open = tc.listen, tc.token, tc.open
		if got := errString(c.ValidateServe()); got != tc.want {
			t.Errorf("listen %q, token %q, open %v: ValidateServe() = %s, want %s", tc.listen, tc.token, tc.open, got, tc.want)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("listen %q: Validate() = %v; the rule is serve's alone (vigil check of a file for any address)", tc.listen, err)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
