// Package config holds Vigil's configuration schema, its defaults, its
// decoding and its validation.
//
// A configuration is built in layers, each overriding the one before:
//
//	defaults < file < environment < flags
//
// [Default] gives the defaults; [Load] reads a YAML file over them; [Config.ApplyEnv]
// applies the VIGIL_* environment variables; command-line flags are applied by
// cmd/vigil (it may use [ParseBackendFlag]); [Config.Validate] or
// [Config.ValidateServe] checks the result. Load does not validate, so that later
// layers can still fix what the file left out.
//
// Decoding is strict: an unknown key, a duplicate key or a value of the wrong type
// is an error naming the key's path and line. Durations are Go duration strings
// ("300ms", "5m"). A key given with no value (YAML null) keeps its default.
//
// Errors name the path of the offending key, with the file and line where there is
// one, and several errors are joined with [errors.Join], one per line:
//
//	vigil.yaml:7: backends[1].urll: unknown key (did you mean "url"?)
//	backends[0].url: must be an absolute http or https URL
//
// Each is a [*FieldError]; [ErrUnknownKey] marks unknown keys. Only a file that
// cannot be read (wrapping the [os.ReadFile] error), or a YAML error without a line,
// gives another error.
//
// The environment variables, read by [Config.ApplyEnv] (an empty value is unset):
//
//	VIGIL_LISTEN            listen
//	VIGIL_REDIS_URL         state.redis.url
//	VIGIL_ADMIN_TOKEN       admin.token
//	VIGIL_ADMIN_OPEN        admin.open
//	VIGIL_BACKENDS          backends, replaced: comma-separated [name=]url[#kind]
//	VIGIL_MAX_BODY_BYTES    limits.max_body_bytes
//	VIGIL_UPSTREAM_TIMEOUT  limits.upstream_timeout
//	VIGIL_BALANCER          balancer.strategy
//	VIGIL_LOG_LEVEL         log.level
//	VIGIL_SAMPLE_RATIO      tracing.sample_ratio
//
// The configuration is a plain value: once built it is read, not changed, and may be
// shared by goroutines that only read it.
package config

import (
	"time"
)

// Config is the whole of Vigil's configuration. The zero value is not usable;
// start from [Default] or [Load].
type Config struct {
	Listen string `yaml:"listen"`
	// ListenTLS, when set, serves listen over TLS (HTTP/2 and HTTP/1.1).
	ListenTLS ListenTLS `yaml:"listen_tls"`
	Backends  []Backend `yaml:"backends"`
	// BackendTLS configures TLS to https:// backends (and their agents,
	// metrics endpoints, the retrieval hook).
	BackendTLS BackendTLS `yaml:"backend_tls"`
	Balancer   Balancer   `yaml:"balancer"`
	State      State      `yaml:"state"`
	Tracing    Tracing    `yaml:"tracing"`
	Retrieval  Retrieval  `yaml:"retrieval"`
	Analyzers  Analyzers  `yaml:"analyzers"`
	Alerts     Alerts     `yaml:"alerts"`
	Admin      Admin      `yaml:"admin"`
	Limits     Limits     `yaml:"limits"`
	Health     Health     `yaml:"health"`
	Retries    Retries    `yaml:"retries"`
	Cache      Cache      `yaml:"cache"`
	Responses  Responses  `yaml:"responses"`
	Usage      Usage      `yaml:"usage"`
	// Quotas limits each tenant's requests and tokens across replicas.
	Quotas Quotas `yaml:"quotas"`
	// Passthrough governs the paths the gateway passes to a backend
	// without reading them as an API it knows.
	Passthrough Passthrough `yaml:"passthrough"`
	Log         Log         `yaml:"log"`
}

// ListenTLS is the gateway's certificate. Both files or neither.
type ListenTLS struct {
	// CertFile is the PEM certificate chain, KeyFile its private key; both
	// are read again when they change (at most once a second).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// BackendTLS configures the gateway as a TLS client of its backends.
type BackendTLS struct {
	// CAFile is a PEM bundle of CA certificates trusted besides the
	// system's, for backends whose certificates a private CA signed.
	// Empty: the system's roots alone.
	CAFile string `yaml:"ca_file"`
}

// Backend is one inference server.
type Backend struct {
	// Name identifies the backend in headers, metrics and logs; names are unique.
	// Empty: "b<index>", index counting from 0 in the list.
	Name string `yaml:"name"`
	// URL is the server's base URL, e.g. http://127.0.0.1:8000.
	URL string `yaml:"url"`
	// Kind is "openai" (vLLM and other OpenAI-compatible servers) or "tgi".
	// Empty: "openai".
	Kind string `yaml:"kind"`
	// Models lists the models this backend serves. Empty: every model.
	Models []string `yaml:"models"`
	// Weight is the base weight for balancing, > 0. Absent from the file: 100.
	Weight float64 `yaml:"weight"`
	// Agent is the URL of a node load agent. Empty: none.
	Agent string `yaml:"agent"`
	// Metrics is the URL of the server's Prometheus endpoint. Empty: none.
	Metrics string `yaml:"metrics"`
	// Reference names another backend to shadow-compare against (signal 5,
	// precision divergence; see Analyzers.Precision). Empty: none.
	Reference string `yaml:"reference"`
	// Tier is the backend's service tier; its alerts carry the severity
	// that Alerts.Tiers gives the tier. Empty: Alerts.Severity.
	Tier string `yaml:"tier"`
}

// Balancer selects how requests are spread over backends.
type Balancer struct {
	// Strategy is prefix (the backend that holds the longest prefix of
	// the prompt, placed by rendezvous hashing when none does, by load
	// when it is much busier than the least busy: Prefix), dynamic (the
	// cheaper of two random backends, by in-flight and waiting requests,
	// peak-EWMA latency, errors and node load), round_robin or
	// least_request (fewest requests in flight through this gateway).
	Strategy string `yaml:"strategy"`
	// Prefix configures the prefix strategy.
	Prefix Prefix `yaml:"prefix"`
	// LoadWeights weigh the node signals in a backend's node load, the
	// weighted mean of its fresh node signals (weight = base × (1 − load)),
	// and set the queue, latency and error terms of the dynamic cost.
	LoadWeights LoadWeights `yaml:"load_weights"`
	// QueueSaturation is the number of waiting requests at which the queue
	// score shown by /admin/backends reads 0.5: queue = waiting / (waiting +
	// QueueSaturation). > 0. (The cost counts waiting requests themselves.)
	QueueSaturation float64 `yaml:"queue_saturation"`
	// StaleAfter: a signal older than this is left out of the blend. > 0.
	StaleAfter time.Duration `yaml:"stale_after"`
	// ScrapeInterval is how often agents and metrics endpoints are read and
	// the weights recomputed; it also bounds each read. > 0.
	ScrapeInterval time.Duration `yaml:"scrape_interval"`
	// LatencyDecay is the time constant τ of the peak-EWMA latency
	// estimate: a faster answer is blended in with weight 1 − e^(−Δt/τ) (at
	// least 0.1), and without traffic the estimate decays toward zero as
	// e^(−t/τ), so an avoided backend is tried again. > 0.
	LatencyDecay time.Duration `yaml:"latency_decay"`
	// Floor is the least weight a backend keeps, as a share of its base
	// weight, however loaded its node: a busy backend still gets a trickle
	// of requests, so its signals stay fresh. In (0, 1].
	Floor float64 `yaml:"floor"`
}

// Prefix configures the prefix-aware strategy (balancer.strategy: prefix):
// how a prompt is hashed, how much the gateway remembers of where prefixes
// went, and when load overrides the prefix.
type Prefix struct {
	// BlockChars is the size of a hashed block, in bytes of the request's
	// rendered prompt (roughly 4 bytes a token). > 0.
	BlockChars int `yaml:"block_chars"`
	// MinChars: a prompt shorter than this is routed by load (dynamic),
	// there being too little to reuse. >= 0.
	MinChars int `yaml:"min_chars"`
	// MaxChars bounds the bytes of the prompt that are hashed, so that a
	// huge prompt costs bounded time; at most 256 × BlockChars.
	MaxChars int `yaml:"max_chars"`
	// IndexSize is the most block hashes the gateway remembers (24 bytes
	// each), least recently used first out. >= 64.
	IndexSize int `yaml:"index_size"`
	// Hash is the block hash: xxhash or fnv. All replicas must agree.
	Hash string `yaml:"hash"`
	// GuardAbs and GuardRel: the backend that holds the prefix is passed
	// over for the least loaded when its load (requests in flight through
	// this gateway plus the server's queue) exceeds the least loaded
	// one's by more than GuardAbs and is more than GuardRel times it.
	// GuardAbs >= 0, GuardRel >= 1.
	GuardAbs float64 `yaml:"guard_abs"`
	GuardRel float64 `yaml:"guard_rel"`
	// HotGuardAbs replaces GuardAbs, when smaller, for a hot prompt: one
	// whose anchor sends more than 1/n of the requests over n candidate
	// backends, more than one backend's even share. >= 0.
	HotGuardAbs float64 `yaml:"hot_guard_abs"`
	// SessionHeader names the request header that carries an explicit
	// affinity key (requests with the same key go to the same backend);
	// the body's prompt_cache_key takes precedence. Empty: no header.
	SessionHeader string `yaml:"session_header"`
	// HomeSlack bounds first placements: a prompt whose prefix no backend
	// holds yet goes to the first backend, in rendezvous order for its
	// anchor, that holds fewer than ⌈(1 + HomeSlack) × its weighted share⌉
	// of the anchors in use. 0 spreads them as evenly as the weights
	// allow. >= 0.
	HomeSlack float64 `yaml:"home_slack"`
	// HomeTTL is how long an anchor keeps its home backend after its last
	// request. > 0.
	HomeTTL time.Duration `yaml:"home_ttl"`
}

// Hash functions of balancer.prefix.hash.
const (
	PrefixHashXXH = "xxhash"
	PrefixHashFNV = "fnv"
)

// LoadWeights are the relative weights of the node signals (CPU, Mem, GPU,
// GPUMem, KVCache), each >= 0: a signal that is unknown or stale drops out
// and the others are renormalized; when every weight of the fresh signals
// is zero the node load is zero (static weights). Queue, Latency and Errors
// are not averaged with them: they shape the dynamic strategy's cost.
type LoadWeights struct {
	// CPU and Mem are the node's CPU utilization and memory use (agent).
	CPU float64 `yaml:"cpu"`
	Mem float64 `yaml:"mem"`
	// GPU and GPUMem are GPU utilization and GPU memory use (agent).
	// GPUMem defaults to 0: vLLM reserves most GPU memory for its KV cache
	// up front, so the reading says nothing about load; KVCache does.
	GPU    float64 `yaml:"gpu"`
	GPUMem float64 `yaml:"gpu_mem"`
	// Queue multiplies the server's waiting requests
	// (vllm:num_requests_waiting, tgi_queue_size) in the cost's count.
	Queue float64 `yaml:"queue"`
	// KVCache is vllm:kv_cache_usage_perc (or vllm:gpu_cache_usage_perc).
	KVCache float64 `yaml:"kv_cache"`
	// Latency is the exponent of the backend's peak-EWMA time to the first
	// byte in the cost (0: latency ignored).
	Latency float64 `yaml:"latency"`
	// Errors is the exponent of 1 / (1 − error rate) in the cost, the error
	// rate being the EWMA of the share of failed attempts (0: ignored).
	Errors float64 `yaml:"errors"`
}

// State selects where windows and shared state live.
type State struct {
	Redis Redis `yaml:"redis"`
}

// Redis configures the Redis state store. An empty URL means in-memory state.
type Redis struct {
	// URL is redis://, rediss:// or unix://. Empty: in-memory state, not shared
	// between gateway replicas.
	URL string `yaml:"url"`
	// Prefix starts every key Vigil writes.
	Prefix string `yaml:"prefix"`
	// FlushInterval is how often a replica writes its signal windows to
	// Redis and reads the other replicas', > 0.
	FlushInterval time.Duration `yaml:"flush_interval"`
}

// Tracing configures OpenTelemetry tracing.
type Tracing struct {
	// SampleRatio is the fraction of requests traced, in [0, 1].
	SampleRatio float64 `yaml:"sample_ratio"`
	// CaptureContent records prompts and completions on spans. They may hold
	// personal data; off by default.
	CaptureContent bool `yaml:"capture_content"`
	// MaxContentBytes truncates captured prompts and completions.
	MaxContentBytes int `yaml:"max_content_bytes"`
	// Exporter is "otlp" (OTLP over gRPC, configured by the standard
	// OTEL_EXPORTER_OTLP_* variables; default endpoint localhost:4317) or
	// "none" (spans are made, for trace ids and propagation, but not sent).
	Exporter string `yaml:"exporter"`
}

// Retrieval configures the optional retrieval hook: before inference, the
// last user message is posted to URL and the passages returned are
// inserted into the chat request as a context message.
type Retrieval struct {
	// URL of the retrieval service. Empty: no retrieval.
	URL string `yaml:"url"`
	// Timeout of one retrieval call.
	Timeout time.Duration `yaml:"timeout"`
	// TopK is the number of passages asked for.
	TopK int `yaml:"top_k"`
	// Inject is where the context goes: "system" (a system message before
	// the others) or "user" (a user message before the last user message).
	Inject string `yaml:"inject"`
	// OnError is "skip" (infer without context) or "fail" (answer 502).
	OnError string `yaml:"on_error"`
}

// Analyzers configures the signal analyzers.
type Analyzers struct {
	// QueueSize bounds the queue between the request path and the analyzers;
	// events beyond it are dropped and counted.
	QueueSize int `yaml:"queue_size"`
	// MaxCaptureBytes bounds the copy of a non-streaming response kept for analysis.
	// Zero: no copy is kept.
	MaxCaptureBytes int `yaml:"max_capture_bytes"`
	// Interval is how often the signals are evaluated.
	Interval time.Duration `yaml:"interval"`
	// Bucket is the width of the time buckets the signals' windows are made of.
	Bucket time.Duration `yaml:"bucket"`
	// MinRequests: a signal's current window takes the newest buckets until
	// it holds this many requests (or spans Window).
	MinRequests int `yaml:"min_requests"`
	// Window is the longest span of a current window.
	Window time.Duration `yaml:"window"`
	// Reference is the span of the rolling reference, which ends where the
	// current window starts. A baseline pinned with POST /admin/baseline
	// replaces it.
	Reference time.Duration `yaml:"reference"`
	// Alpha is the significance level of the signals' tests (after the
	// multiple-testing correction, where there are several).
	Alpha float64 `yaml:"alpha"`
	// Consecutive is how many evaluations in a row must find a change
	// before a signal leaves its "ok" state.
	Consecutive int `yaml:"consecutive"`
	// Seed seeds the random keys of the signals' samplers (the drift
	// reservoirs), so that a run is reproducible. >= 0.
	Seed int64 `yaml:"seed"`
	// Drift configures signal 1, input drift.
	Drift Drift `yaml:"drift"`
	// Confidence configures signal 2, confidence decay.
	Confidence Confidence `yaml:"confidence"`
	// Latency configures signal 3, latency variance.
	Latency Latency `yaml:"latency"`
	// Output configures signal 4, output drift (perplexity).
	Output Output `yaml:"output"`
	// Calibration configures the calibration of confidence from feedback labels.
	Calibration Calibration `yaml:"calibration"`
	// Precision configures signal 5, precision divergence, for the backends
	// that name a reference.
	Precision Precision `yaml:"precision"`
	// Segments configures the per-model view of the signals.
	Segments Segments `yaml:"segments"`
}

// Segments configures the per-model segments: every signal but precision
// is kept per model (a LoRA adapter is a model of its own) besides
// fleet-wide, so that a change of traffic mix between models is not read
// as a change of any model, and a change in one model is not diluted by
// the others.
type Segments struct {
	// MaxModels bounds the models that get a segment of their own: the
	// most active; the others share the segment "other". >= 1.
	MaxModels int `yaml:"max_models"`
	// Reservoir is the uniform sample of prompts a segment's input-drift
	// windows keep per bucket (the fleet-wide windows keep
	// analyzers.drift.reservoir). >= 32.
	Reservoir int `yaml:"reservoir"`
}

// Precision configures shadow comparison of a backend against its
// reference: for a sampled share of the requests a backend serves, the
// gateway sends a copy, made greedy and with logprobs, to the backend and
// to its reference, off the request path, and compares their tokens'
// distributions.
type Precision struct {
	// Enabled turns the signal on (it needs a backend with a reference).
	Enabled bool `yaml:"enabled"`
	// SampleRatio is the share of a backend's successful chat and
	// completions requests that are shadow-compared, in [0, 1].
	SampleRatio float64 `yaml:"sample_ratio"`
	// TopLogprobs is the number of alternatives asked per token, in [1, 20].
	TopLogprobs int `yaml:"top_logprobs"`
	// MaxTokens caps the tokens generated by each shadow request, > 0.
	MaxTokens int `yaml:"max_tokens"`
	// Concurrency bounds the comparisons in flight; a sampled request
	// beyond it is skipped and counted. > 0.
	Concurrency int `yaml:"concurrency"`
	// Timeout bounds one comparison (both shadow requests), > 0.
	Timeout time.Duration `yaml:"timeout"`
	// MinTokens is how many compared tokens a pair's window needs before
	// its state leaves "unknown", > 0.
	MinTokens int `yaml:"min_tokens"`
	// MaxKL: a pair is "divergent" when its mean per-token KL divergence
	// (reference against backend, nats) is above this, > 0 ...
	MaxKL float64 `yaml:"max_kl"`
	// MinTop1Agreement: ... or when the share of positions whose most
	// likely token is the same on both is below this, in [0, 1].
	MinTop1Agreement float64 `yaml:"min_top1_agreement"`
}

// Confidence configures the confidence-decay signal, read from token logprobs.
type Confidence struct {
	// Enabled turns the signal on.
	Enabled bool `yaml:"enabled"`
	// LowProb is the probability below which a token counts as low-confidence.
	LowProb float64 `yaml:"low_prob"`
	// MinDrop is the smallest relative drop of the geometric-mean token
	// probability, exp(mean logprob), that counts as decay (0.03: 3%); also
	// the smallest rise of the low-confidence token share (in share points).
	MinDrop float64 `yaml:"min_drop"`
	// Inject asks backends for logprobs on a sample of the requests whose
	// clients did not, and strips them from what those clients receive.
	Inject Inject `yaml:"inject"`
}

// Inject configures logprob injection.
type Inject struct {
	// SampleRatio is the share of eligible requests that get logprobs
	// injected, in [0, 1]. Zero: none (requests go upstream unchanged).
	SampleRatio float64 `yaml:"sample_ratio"`
	// TopLogprobs is the number of alternatives asked for per token, in [0, 20].
	TopLogprobs int `yaml:"top_logprobs"`
}

// Latency configures the latency-variance signal.
type Latency struct {
	// Enabled turns the signal on.
	Enabled bool `yaml:"enabled"`
	// K: a value is anomalous when it exceeds mean + K·σ of the reference.
	K float64 `yaml:"k"`
	// MinRise is the smallest rise of the anomalous share (current window
	// against reference) that counts as "anomalous" (0.1: 10 points).
	MinRise float64 `yaml:"min_rise"`
}

// Output configures the output-drift signal on perplexity.
type Output struct {
	// Enabled turns the signal on.
	Enabled bool `yaml:"enabled"`
	// Sigma: a minute is outside the band when its mean perplexity is
	// beyond baseline mean ± Sigma·σ.
	Sigma float64 `yaml:"sigma"`
	// Minutes is how many consecutive minutes outside the band raise the alarm.
	Minutes int `yaml:"minutes"`
	// MinBaselineMinutes is how many minutes with responses the baseline
	// needs before the signal leaves "unknown".
	MinBaselineMinutes int `yaml:"min_baseline_minutes"`
}

// Calibration configures calibration from POST /v1/feedback labels.
type Calibration struct {
	// Bins is the number of equal-width confidence bins of ECE and the
	// reliability diagram.
	Bins int `yaml:"bins"`
	// MaxPending bounds the responses remembered for labels to join.
	MaxPending int `yaml:"max_pending"`
	// TTL is how long a response can be labelled.
	TTL time.Duration `yaml:"ttl"`
	// MaxLabels bounds the labelled responses kept (the newest win).
	MaxLabels int `yaml:"max_labels"`
}

// DriftFeatures are the prompt features the drift signal can test: numeric
// ones first (KS and PSI), then categorical ones (chi-square and PSI).
var DriftFeatures = []string{
	"prompt_chars", "prompt_tokens", "message_count", "script_latin", "script_cjk",
	"script_cyrillic", "script_digits", "script_punct", "script_space",
	"max_tokens", "temperature", "top_p",
	"system_prompt", "code_block", "model",
}

// Drift configures the input-drift signal: the current window of prompts
// against a reference, tested per feature and jointly.
type Drift struct {
	// Enabled turns the signal on.
	Enabled bool `yaml:"enabled"`
	// Features lists the features tested, from DriftFeatures. Empty: all.
	Features []string `yaml:"features"`
	// Reservoir is the size of the uniform sample of prompts kept per bucket
	// and per window for KS and the robust covariance.
	Reservoir int `yaml:"reservoir"`
	// Correction is the multiple-testing correction across the tests of one
	// evaluation: bh (Benjamini–Hochberg, false-discovery rate) or bonferroni
	// (family-wise error rate), both at analyzers.alpha.
	Correction string `yaml:"correction"`
	// PSIBins is the number of reference-quantile bins of numeric PSI.
	PSIBins int `yaml:"psi_bins"`
	// MinPSI is the effect size a statistically significant feature must
	// also reach to count as drifted (0.1: "watch", 0.25: "alarm").
	MinPSI float64 `yaml:"min_psi"`
	// Mahalanobis adds the joint test: the share of current prompts beyond
	// the reference's robust (MCD) chi-square cutoff.
	Mahalanobis bool `yaml:"mahalanobis"`
	// Text is the content test: what prompts are about.
	Text DriftText `yaml:"text"`
}

// DriftText configures input drift's content test (package
// analyzers/inputdrift/content). Its sample of prompts per bucket and
// window is the drift reservoir's size.
type DriftText struct {
	// Enabled adds the content test to the features.
	Enabled bool `yaml:"enabled"`
	// MinAUC is the effect a significant content test must also reach to
	// count as drifted: the held-out classifier's AUC (0.5: the windows
	// are alike), as min_psi is for the other features.
	MinAUC float64 `yaml:"min_auc"`
	// Terms is how many terms each bucket counts, for the explanation.
	Terms int `yaml:"terms"`
	// Explain shows the terms that rose and fell as words. Off, only
	// their hashes and counts are kept and shown: prompt text never
	// leaves the process.
	Explain bool `yaml:"explain"`
	// Embeddings adds a test on the prompts' embeddings, where the fleet
	// serves an embedding model.
	Embeddings DriftEmbeddings `yaml:"embeddings"`
}

// DriftEmbeddings configures the embedding test of input drift: a sample
// of prompts is embedded through a backend's /v1/embeddings, off the
// request path, and the vectors are tested as the terms are.
type DriftEmbeddings struct {
	// Backend names the backend (of kind openai) whose /v1/embeddings
	// embeds the prompts. Empty: no embedding test.
	Backend string `yaml:"backend"`
	// Model is the embedding model asked for; required with Backend.
	Model string `yaml:"model"`
	// SampleRatio is the share of prompts embedded, in (0, 1].
	SampleRatio float64 `yaml:"sample_ratio"`
	// Concurrency is the most embedding requests in flight.
	Concurrency int `yaml:"concurrency"`
	// Queue is the most prompts waiting to be embedded; a prompt beyond
	// it is dropped and counted.
	Queue int `yaml:"queue"`
	// Batch is the most prompts one request embeds.
	Batch int `yaml:"batch"`
	// MaxChars is how much of a prompt is sent: its first MaxChars
	// characters, so that the embedding model's context holds it.
	MaxChars int `yaml:"max_chars"`
	// Timeout bounds one embedding request.
	Timeout time.Duration `yaml:"timeout"`
}

// On says whether the embedding test is configured.
func (e *DriftEmbeddings) On() bool { return e.Backend != "" }

// Alerts configures alert delivery.
type Alerts struct {
	// AlertmanagerURL is the Alertmanager base URL alerts are posted to. Empty: none.
	AlertmanagerURL string `yaml:"alertmanager_url"`
	// WebhookURL receives alerts as JSON. Empty: none.
	WebhookURL string `yaml:"webhook_url"`
	// Period is how often alert conditions are evaluated, > 0.
	Period time.Duration `yaml:"period"`
	// Percentile of the last History of a rule's period values that,
	// times Factor, is its adaptive threshold.
	Percentile float64 `yaml:"percentile"`
	Factor     float64 `yaml:"factor"`
	// History is how far back the adaptive thresholds look, > 0.
	History time.Duration `yaml:"history"`
	// MinHistory is the number of past periods a series needs before an
	// adaptive threshold applies (ColdStart until then), >= 1.
	MinHistory int `yaml:"min_history"`
	// Consecutive breaching periods fire an alert.
	Consecutive int `yaml:"consecutive"`
	// Silence is the quiet time after a notification for the same labels.
	Silence time.Duration `yaml:"silence"`
	// Severity labels the alerts of the whole gateway and of backends
	// without a tier.
	Severity string `yaml:"severity"`
	// Tiers maps a service tier (backends[].tier) to the severity of its
	// backends' alerts, e.g. {gold: critical, bronze: info}.
	Tiers map[string]string `yaml:"tiers"`
	// DashboardURL goes into the alerts' dashboard annotation. Empty: none.
	DashboardURL string `yaml:"dashboard_url"`
	// Fixed maps rules (AlertRules) to fixed thresholds, used instead of
	// adaptive ones.
	Fixed map[string]float64 `yaml:"fixed"`
	// ColdStart are the thresholds in force while a series' history is
	// too short for an adaptive one.
	ColdStart ColdStart `yaml:"cold_start"`
	// SLO configures error-budget alerts.
	SLO SLO `yaml:"slo"`
}

// ColdStart are the thresholds of a series until it holds enough periods
// for an adaptive threshold (Alerts.MinHistory). Drift, confidence and precision use
// their floors meanwhile; the perplexity band is fixed anyway.
type ColdStart struct {
	// ErrorRate is the error-rate threshold, in (0, 1).
	ErrorRate float64 `yaml:"error_rate"`
	// LatencyFactor times the median of the periods seen so far is the
	// threshold of the latency P95 rules, > 1.
	LatencyFactor float64 `yaml:"latency_factor"`
}

// SLO configures multi-window, multi-burn-rate error-budget alerts (the
// Google SRE workbook, "Alerting on SLOs"): a window pair fires when the
// error budget burns faster than Burn times the sustainable rate over both
// its long and its short window.
type SLO struct {
	// ErrorRate is the objective: the share of requests that must not fail
	// (e.g. 0.999), in (0, 1). Zero: no error-budget alerts.
	ErrorRate float64 `yaml:"error_rate"`
	// Windows are the window pairs, each its own alert series.
	Windows []BurnWindow `yaml:"windows"`
}

// BurnWindow is one long/short window pair of an SLO.
type BurnWindow struct {
	Long     time.Duration `yaml:"long"`
	Short    time.Duration `yaml:"short"`
	Burn     float64       `yaml:"burn"`
	Severity string        `yaml:"severity"`
}

// Backend kinds (backends[].kind).
const (
	KindOpenAI = "openai" // OpenAI-compatible API (vLLM, llama.cpp, ...)
	KindTGI    = "tgi"    // Hugging Face Text Generation Inference
)

// Balancer strategies (balancer.strategy).
const (
	StrategyDynamic      = "dynamic"
	StrategyRoundRobin   = "round_robin"
	StrategyLeastRequest = "least_request"
	StrategyPrefix       = "prefix"
)

// AlertRules are the alert rules, one per signal value. The alert package
// names them too; a test there keeps the two lists equal.
var AlertRules = []string{
	"drift_score", "confidence_drop", "latency_ttft_p95", "latency_e2e_p95",
	"error_rate", "perplexity_band", "precision_divergence", "error_budget_burn", "backend_down", "backend_slow",
}

// Admin configures the admin API.
type Admin struct {
	// Token, when set, is required as a bearer token on /admin routes
	// and on /debug/pprof. Empty: the admin API is open, which `vigil
	// serve` accepts only on a loopback listen address or with Open set.
	Token string `yaml:"token"`
	// Open serves the admin API without a token on any address. Without
	// it, `vigil serve` refuses to start when Token is empty and listen
	// is not a loopback address ([Config.ValidateServe]).
	Open bool `yaml:"open"`
	// Pprof serves the Go runtime's profiles (net/http/pprof) on
	// GET /debug/pprof/*, behind Token like the admin routes. False (the
	// default): those paths answer 404. A CPU profile or an execution
	// trace costs the process while it runs; turn this on where the
	// admin token or the network keeps strangers out.
	Pprof bool `yaml:"pprof"`
}

// Limits bounds what clients and backends may cost.
type Limits struct {
	// MaxBodyBytes bounds a request body the gateway reads (all but a
	// streamed pass-through upload: Passthrough.MaxUploadBytes), > 0.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// UpstreamTimeout bounds the wait for a backend's response headers: the
	// whole generation of a non-streaming request, the first byte of a stream. > 0.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// StreamIdleTimeout bounds how long a response body (a stream, after
	// its headers; the wait for its first token included) may go without
	// a byte while the gateway waits on the backend: the attempt is then
	// cancelled, a stream ends with an error event and the backend is
	// counted a failure. 0: no bound. >= 0.
	StreamIdleTimeout time.Duration `yaml:"stream_idle_timeout"`
	// ReadHeaderTimeout bounds the time a client takes to send a
	// request's line and headers (slowloris), > 0.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds the time a client takes to send a request's
	// body once its headers are in (a body trickled slower gets a 408), > 0.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds a write to a client that stops reading: a
	// response (a stream) that cannot be written for this long is cut and
	// its backend request cancelled. It is not a limit on a stream's
	// length. > 0.
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle for this long, > 0.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds a request's line and headers; over it: 431. > 0.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections bounds the client connections open at once; further
	// ones wait in the listen backlog until one closes. 0: no bound.
	MaxConnections int `yaml:"max_connections"`
	// MemoryLimit is the Go runtime's soft memory limit in bytes, which
	// `vigil serve` sets when GOMEMLIMIT is not in its environment: near
	// it the collector works harder rather than let the heap grow to
	// GOGC's target. 0: derived from MaxConnections (a base plus a
	// budget per connection, what a held stream costs) and, in a
	// container with a memory limit, at most 90 % of that; no limit when
	// neither bounds it. -1: no limit.
	MemoryLimit int64 `yaml:"memory_limit"`
	// ShutdownDelay: on SIGTERM, /readyz answers 503 at once and the
	// gateway keeps serving for this long (while load balancers take it
	// out of rotation), then stops accepting connections. >= 0.
	ShutdownDelay time.Duration `yaml:"shutdown_delay"`
	// ShutdownGrace bounds how long requests and streams in flight then
	// get to finish before they are cut, > 0.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// MaxIdleConns bounds the idle keep-alive connections the gateway
	// keeps to all backends together, and MaxIdleConnsPerHost those to
	// one backend; both >= 1 (Go's own zero values would mean no bound
	// and 2, the latter far too few for a busy backend).
	MaxIdleConns        int `yaml:"max_idle_conns"`
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
	// SideTimeout bounds, end to end, each request the gateway makes of
	// its own accord (health checks, load scrapes, the model list
	// fan-out of GET /v1/models), > 0. Each of those may bound itself
	// tighter (health.timeout, balancer.scrape_interval).
	SideTimeout time.Duration `yaml:"side_timeout"`
}

// Health configures active health checks of backends and passive ejection.
type Health struct {
	// Path is requested on each backend; 2xx means healthy. It starts with "/".
	Path string `yaml:"path"`
	// Interval between checks. Zero disables active checks.
	Interval time.Duration `yaml:"interval"`
	// Timeout of one check, > 0.
	Timeout time.Duration `yaml:"timeout"`
	// Failures is the number of consecutive failed requests (connect
	// errors, timeouts, 5xx answers, broken streams) that eject a backend.
	// Zero disables passive ejection.
	Failures int `yaml:"failures"`
	// Backoff is how long the first ejection lasts; each further ejection
	// without a successful request in between doubles it. > 0.
	Backoff time.Duration `yaml:"backoff"`
	// MaxBackoff caps the doubling. >= Backoff.
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// Retries configures retrying a failed request on another backend.
type Retries struct {
	// Attempts is the most tries a request gets, the first included, each
	// on a different backend; 1 disables retries. In [1, 10].
	Attempts int `yaml:"attempts"`
}

// Responses configures the Responses API's stateful routes.
type Responses struct {
	// OwnerTTL is how long the gateway remembers which backend made a
	// response (or holds a conversation), in process and in the shared
	// store: follow-ups (GET, DELETE, cancel, input_items,
	// previous_response_id) must reach that backend, since vLLM keeps a
	// response in the memory of the instance that made it.
	OwnerTTL time.Duration `yaml:"owner_ttl"`
	// MaxOwners bounds the in-process map of owners (least recently used
	// go first); the shared store holds the rest.
	MaxOwners int `yaml:"max_owners"`
	// LookupTimeout bounds the wait on the shared store for the owner of
	// a response this replica did not see made.
	LookupTimeout time.Duration `yaml:"lookup_timeout"`
}

// Cache configures the response cache for deterministic requests
// (temperature 0 or a fixed seed; embeddings always).
type Cache struct {
	// Enabled turns the cache on.
	Enabled bool `yaml:"enabled"`
	// TTL is how long a response is served from the cache…
	TTL time.Duration `yaml:"ttl"`
	// …give or take this share, at random, so entries do not expire together.
	Jitter float64 `yaml:"jitter"`
	// MaxEntries bounds the in-process cache (without Redis).
	MaxEntries int `yaml:"max_entries"`
	// MaxBodyBytes: larger responses are not cached.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// LockTTL bounds how long replicas wait for the one replica fetching a
	// missing entry (the stampede guard across replicas).
	LockTTL time.Duration `yaml:"lock_ttl"`
}

// Usage configures token accounting.
type Usage struct {
	// Inject asks backends for a stream's token usage
	// (stream_options.include_usage) when an OpenAI chat or completions
	// client streams without asking, and removes what that adds from the
	// client's stream, so that every stream is accounted with the
	// backend's own figures. False: such streams are counted from their
	// content chunks.
	Inject bool `yaml:"inject"`
	// TenantHeader names the request header whose value is the caller's
	// tenant in usage metrics and GET /admin/usage. Credential headers
	// (Authorization, Api-Key, X-Api-Key) are reduced to a short hash.
	// Empty: no tenant.
	TenantHeader string `yaml:"tenant_header"`
}

// Quotas configures tenant limits, held across replicas through the
// shared store (state.redis_url; one process's memory without it). The
// tenant is the one usage.tenant_header names.
type Quotas struct {
	// Enabled turns the limits on.
	Enabled bool `yaml:"enabled"`
	// Fail is what a replica does while the shared store does not answer
	// within Timeout: open (admit within its own share of each limit, the
	// limit divided by the live replicas) or closed (answer 503).
	Fail string `yaml:"fail"`
	// Timeout bounds the store's answer to one admission.
	Timeout time.Duration `yaml:"timeout"`
	// DefaultMaxTokens is the completion tokens reserved for a request
	// that sets no max_tokens, max_completion_tokens or max_output_tokens.
	DefaultMaxTokens int64 `yaml:"default_max_tokens"`
	// Default are the limits of tenants not listed; zero values: none.
	Default QuotaLimits `yaml:"default"`
	// Tenants are the limits of listed tenants, by tenant label (a
	// credential's is its hash, "sha256:" and 12 hex digits).
	Tenants map[string]QuotaLimits `yaml:"tenants"`
	// Models are limits per model, on top of the tenant's: each tenant's
	// use of that model is also held to them.
	Models map[string]QuotaLimits `yaml:"models"`
}

// QuotaLimits are one tenant's (or one tenant's use of one model's)
// limits; 0 is no limit.
type QuotaLimits struct {
	// RequestsPerMinute admits at most this many requests in any 60 s.
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// TokensPerMinute admits at most this many prompt and completion
	// tokens in any 60 s.
	TokensPerMinute int64 `yaml:"tokens_per_minute"`
	// TokensPerDay admits at most this many tokens in a UTC calendar day.
	TokensPerDay int64 `yaml:"tokens_per_day"`
	// MaxConcurrent is the most requests in flight.
	MaxConcurrent int64 `yaml:"max_concurrent"`
}

// Zero says whether l sets no limit.
func (l QuotaLimits) Zero() bool { return l == QuotaLimits{} }

// Quota failure modes.
const (
	QuotaFailOpen   = "open"
	QuotaFailClosed = "closed"
)

// Passthrough configures the paths the gateway proxies as they are (any
// path that is not one of its own routes).
type Passthrough struct {
	// AllowAdminPaths lists the backend paths that change a server's state
	// (AdminPaths: loading LoRA adapters, sleep, cache resets, profiling)
	// that clients may reach through the gateway. The others are refused
	// with a 403. Empty: all are refused.
	AllowAdminPaths []string `yaml:"allow_admin_paths"`
	// MaxUploadBytes bounds a passed-through body that is not JSON
	// (multipart/form-data, application/octet-stream, ...): such a body
	// streams to the backend unbuffered, so it may be larger than
	// limits.max_body_bytes, which bounds the bodies the gateway reads. > 0.
	MaxUploadBytes int64 `yaml:"max_upload_bytes"`
}

// AdminPaths are the paths of vLLM's server API that change the state of
// the server they reach rather than answer a request: the gateway refuses
// them unless passthrough.allow_admin_paths lists them, since a client
// behind a shared gateway should not unload adapters, put a backend to
// sleep or profile it.
var AdminPaths = []string{
	"/v1/load_lora_adapter", "/v1/unload_lora_adapter",
	"/sleep", "/wake_up",
	"/reset_prefix_cache", "/reset_mm_cache",
	"/collective_rpc",
	"/start_profile", "/stop_profile",
	"/scale_elastic_ep",
	"/pause", "/resume",
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Access enables the one-line-per-request JSON access log.
	Access bool `yaml:"access"`
}
