package config

import (
	"strconv"
	"time"
)

// Every default value of Vigil lives in this file: each section of the
// configuration has its Default… function, and [Default] composes them.
// Other packages take their settings from a Config and do not fall back to
// values of their own, so a default changed here changes everywhere.

// Default returns the default configuration: no backends, in-memory state,
// every request traced without content. The sections without a Default…
// function (ListenTLS, BackendTLS, Admin) default to their zero values.
// Each call returns a new value.
func Default() Config {
	return Config{
		Listen:      ":8080",
		Balancer:    DefaultBalancer(),
		State:       DefaultState(),
		Tracing:     DefaultTracing(),
		Retrieval:   DefaultRetrieval(),
		Analyzers:   DefaultAnalyzers(),
		Alerts:      DefaultAlerts(),
		Limits:      DefaultLimits(),
		Health:      DefaultHealth(),
		Retries:     DefaultRetries(),
		Cache:       DefaultCache(),
		Usage:       DefaultUsage(),
		Quotas:      DefaultQuotas(),
		Responses:   DefaultResponses(),
		Passthrough: DefaultPassthrough(),
		Log:         DefaultLog(),
	}
}

// DefaultBalancer returns the default balancer section.
func DefaultBalancer() Balancer {
	return Balancer{
		Strategy:        StrategyPrefix,
		Prefix:          DefaultPrefix(),
		LoadWeights:     DefaultLoadWeights(),
		QueueSaturation: 8, StaleAfter: 10 * time.Second, ScrapeInterval: 2 * time.Second,
		LatencyDecay: 10 * time.Second,
		Floor:        0.01,
	}
}

// DefaultPrefix returns the default balancer.prefix. The thresholds are
// first guesses, to be tuned by measurement: a block of 256 bytes is about
// 64 tokens, a few of vLLM's 16-token blocks; the guard lets the prefix's
// backend carry 4 requests and 50 % more than the least loaded.
func DefaultPrefix() Prefix {
	return Prefix{
		BlockChars: 256, MinChars: 256, MaxChars: 64 << 10, IndexSize: 1 << 18,
		Hash: PrefixHashXXH, GuardAbs: 8, GuardRel: 1.5, HotGuardAbs: 2, SessionHeader: "X-Session-Id",
		HomeSlack: 0, HomeTTL: 10 * time.Minute,
	}
}

// DefaultLoadWeights returns the default balancer.load_weights.
func DefaultLoadWeights() LoadWeights {
	return LoadWeights{CPU: 1, Mem: 0.5, GPU: 1, GPUMem: 0, Queue: 1, KVCache: 1, Latency: 1, Errors: 1}
}

// DefaultState returns the default state section: in-memory state.
func DefaultState() State {
	return State{Redis: DefaultRedis()}
}

// DefaultRedis returns the default state.redis: no URL (in-memory state).
func DefaultRedis() Redis {
	return Redis{Prefix: "vigil", FlushInterval: time.Second}
}

// DefaultTracing returns the default tracing section.
func DefaultTracing() Tracing {
	return Tracing{SampleRatio: 1.0, MaxContentBytes: 4096, Exporter: "otlp"}
}

// DefaultRetrieval returns the default retrieval section: no hook.
func DefaultRetrieval() Retrieval {
	return Retrieval{Timeout: 2 * time.Second, TopK: 4, Inject: "system", OnError: "skip"}
}

// DefaultAnalyzers returns the default analyzers section.
func DefaultAnalyzers() Analyzers {
	return Analyzers{
		QueueSize: 4096, MaxCaptureBytes: 1 << 20,
		Interval: 15 * time.Second, Bucket: 10 * time.Second, MinRequests: 300,
		Window: 15 * time.Minute, Reference: time.Hour, Alpha: 0.01, Consecutive: 2,
		Seed:        0x5eed,
		Drift:       DefaultDrift(),
		Confidence:  DefaultConfidence(),
		Latency:     DefaultLatency(),
		Output:      DefaultOutput(),
		Calibration: DefaultCalibration(),
		Precision:   DefaultPrecision(),
		Segments:    DefaultSegments(),
	}
}

// DefaultSegments returns the default analyzers.segments.
func DefaultSegments() Segments {
	return Segments{MaxModels: 32, Reservoir: 256}
}

// DefaultDrift returns the default analyzers.drift.
func DefaultDrift() Drift {
	return Drift{Enabled: true, Reservoir: 1024, Correction: "bh", PSIBins: 10, MinPSI: 0.1, Mahalanobis: true,
		Text: DriftText{Enabled: true, MinAUC: 0.55, Terms: 64, Embeddings: DefaultDriftEmbeddings()}}
}

// DefaultDriftEmbeddings returns the default analyzers.drift.text.embeddings:
// off, and the rest of its settings for when a backend is named.
func DefaultDriftEmbeddings() DriftEmbeddings {
	return DriftEmbeddings{SampleRatio: 0.1, Concurrency: 2, Queue: 256, Batch: 16, MaxChars: 2000, Timeout: 10 * time.Second}
}

// DefaultConfidence returns the default analyzers.confidence.
func DefaultConfidence() Confidence {
	return Confidence{Enabled: true, LowProb: 0.5, MinDrop: 0.03, Inject: Inject{TopLogprobs: 5}}
}

// DefaultLatency returns the default analyzers.latency.
func DefaultLatency() Latency {
	return Latency{Enabled: true, K: 2, MinRise: 0.1}
}

// DefaultOutput returns the default analyzers.output.
func DefaultOutput() Output {
	return Output{Enabled: true, Sigma: 3, Minutes: 5, MinBaselineMinutes: 10}
}

// DefaultCalibration returns the default analyzers.calibration.
func DefaultCalibration() Calibration {
	return Calibration{Bins: 15, MaxPending: 100000, TTL: 24 * time.Hour, MaxLabels: 10000}
}

// DefaultPrecision returns the default analyzers.precision.
func DefaultPrecision() Precision {
	return Precision{
		Enabled: true, SampleRatio: 0.05, TopLogprobs: 5, MaxTokens: 32, Concurrency: 4,
		Timeout: 30 * time.Second, MinTokens: 200, MaxKL: 0.05, MinTop1Agreement: 0.9,
	}
}

// DefaultAlerts returns the default alerts section: adaptive thresholds
// over a week of 5-minute periods, no receivers, no SLO.
func DefaultAlerts() Alerts {
	return Alerts{
		Period: 5 * time.Minute, Percentile: 0.95, Factor: 1.1,
		History: 7 * 24 * time.Hour, MinHistory: 12,
		Consecutive: 3, Silence: 30 * time.Minute, Severity: "warning",
		ColdStart: ColdStart{ErrorRate: 0.05, LatencyFactor: 3},
		SLO: SLO{Windows: []BurnWindow{
			{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4, Severity: "critical"},
			{Long: 6 * time.Hour, Short: 30 * time.Minute, Burn: 6, Severity: "warning"},
		}},
	}
}

// DefaultLimits returns the default limits section.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes: 8 << 20, UpstreamTimeout: 300 * time.Second, StreamIdleTimeout: 300 * time.Second,
		ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 60 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: 64 << 10, MaxConnections: 10000,
		ShutdownDelay: 5 * time.Second, ShutdownGrace: 60 * time.Second,
		MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, SideTimeout: 10 * time.Second,
	}
}

// DefaultHealth returns the default health section.
func DefaultHealth() Health {
	return Health{
		Path: "/health", Interval: 5 * time.Second, Timeout: 2 * time.Second,
		Failures: 3, Backoff: time.Second, MaxBackoff: time.Minute,
	}
}

// DefaultRetries returns the default retries section.
func DefaultRetries() Retries {
	return Retries{Attempts: 3}
}

// DefaultCache returns the default cache section: off.
func DefaultCache() Cache {
	return Cache{TTL: 5 * time.Minute, Jitter: 0.1, MaxEntries: 10000, MaxBodyBytes: 1 << 20, LockTTL: 10 * time.Second}
}

// DefaultResponses returns the default responses section. vLLM keeps a
// stored response until the instance restarts, so no TTL matches it
// exactly: a day covers a working session's follow-ups while bounding the
// shared store's keys, and 100000 owners cost a few MiB in process.
func DefaultResponses() Responses {
	return Responses{OwnerTTL: 24 * time.Hour, MaxOwners: 100000, LookupTimeout: 200 * time.Millisecond}
}

// DefaultUsage returns the default usage section.
func DefaultUsage() Usage {
	return Usage{Inject: true, TenantHeader: "X-Tenant"}
}

// DefaultQuotas returns the default quotas section: off; failing open;
// 50 ms for the store; 1,024 completion tokens reserved for a request
// that sets no maximum.
func DefaultQuotas() Quotas {
	return Quotas{Fail: QuotaFailOpen, Timeout: 50 * time.Millisecond, DefaultMaxTokens: 1024}
}

// DefaultPassthrough returns the default passthrough section: every admin
// path refused, streamed uploads up to 100 MiB.
func DefaultPassthrough() Passthrough {
	return Passthrough{MaxUploadBytes: 100 << 20}
}

// DefaultLog returns the default log section.
func DefaultLog() Log {
	return Log{Level: "info", Access: true}
}

// defaultBackend is the backend at index in a list before its keys are applied.
func defaultBackend(index int) Backend {
	return Backend{Name: defaultName(index), Kind: KindOpenAI, Weight: 100}
}

func defaultName(index int) string { return "b" + strconv.Itoa(index) }
