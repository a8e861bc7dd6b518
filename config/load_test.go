package config_test

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

// writeConfig writes content to vigil.yaml in a new temporary directory and returns
// its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDefault(t *testing.T) {
	want := config.Config{
		Listen: ":8080",
		Balancer: config.Balancer{
			Strategy: "prefix",
			Prefix: config.Prefix{
				BlockChars: 256, MinChars: 256, MaxChars: 65536, IndexSize: 262144,
				Hash: "xxhash", GuardAbs: 8, GuardRel: 1.5, HotGuardAbs: 2, SessionHeader: "X-Session-Id",
				HomeTTL: 10 * time.Minute,
			},
			LoadWeights: config.LoadWeights{
				CPU: 1, Mem: 0.5, GPU: 1, GPUMem: 0, Queue: 1, KVCache: 1, Latency: 1, Errors: 1,
			},
			QueueSaturation: 8, StaleAfter: 10 * time.Second, ScrapeInterval: 2 * time.Second,
			LatencyDecay: 10 * time.Second, Floor: 0.01,
		},
		State:     config.State{Redis: config.Redis{URL: "", Prefix: "vigil", FlushInterval: time.Second}},
		Tracing:   config.Tracing{SampleRatio: 1.0, CaptureContent: false, MaxContentBytes: 4096, Exporter: "otlp"},
		Retrieval: config.Retrieval{Timeout: 2 * time.Second, TopK: 4, Inject: "system", OnError: "skip"},
		Cache:     config.Cache{TTL: 5 * time.Minute, Jitter: 0.1, MaxEntries: 10000, MaxBodyBytes: 1 << 20, LockTTL: 10 * time.Second},
		Responses: config.Responses{OwnerTTL: 24 * time.Hour, MaxOwners: 100000, LookupTimeout: 200 * time.Millisecond},
		Analyzers: wantAnalyzers(),
		Alerts: config.Alerts{Period: 5 * time.Minute, Percentile: 0.95, Factor: 1.1, History: 7 * 24 * time.Hour, MinHistory: 12, Consecutive: 3, Silence: 30 * time.Minute, Severity: "warning",
			ColdStart: config.ColdStart{ErrorRate: 0.05, LatencyFactor: 3},
			SLO: config.SLO{Windows: []config.BurnWindow{
				{Long: time.Hour, Short: 5 * time.Minute, Burn: 14.4, Severity: "critical"},
				{Long: 6 * time.Hour, Short: 30 * time.Minute, Burn: 6, Severity: "warning"},
			}}},
		Limits: config.Limits{
			MaxBodyBytes: 8388608, UpstreamTimeout: 300 * time.Second, StreamIdleTimeout: 300 * time.Second,
			ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: time.Minute,
			IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 65536, MaxConnections: 10000,
			ShutdownDelay: 5 * time.Second, ShutdownGrace: time.Minute,
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 256, SideTimeout: 10 * time.Second,
		},
		Health: config.Health{
			Path: "/health", Interval: 5 * time.Second, Timeout: 2 * time.Second,
			Failures: 3, Backoff: time.Second, MaxBackoff: time.Minute,
		},
		Retries:     config.Retries{Attempts: 3},
		Usage:       config.Usage{Inject: true, TenantHeader: "X-Tenant"},
		Quotas:      config.Quotas{Fail: "open", Timeout: 50 * time.Millisecond, DefaultMaxTokens: 1024},
		Passthrough: config.Passthrough{MaxUploadBytes: 100 << 20},
		Log:         config.Log{Level: "info", Access: true},
	}
	got := config.Default()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Default() mismatch (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Default().Validate() = %v, want nil", err)
	}
}

func TestLoad(t *testing.T) {
	withDefaults := func(f func(*config.Config)) config.Config {
		c := config.Default()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		yaml string
		want config.Config
	}{
		{name: "empty file", yaml: "", want: config.Default()},
		{name: "only comments", yaml: "# nothing yet\n", want: config.Default()},
		{name: "empty document", yaml: "---\n", want: config.Default()},
		{name: "null document", yaml: "~\n", want: config.Default()},
		{
			name: "design example",
			yaml: `
listen: ":9090"
backends:
  - name: a
    url: http://127.0.0.1:8000
    kind: openai            # or tgi
    models: [llama-3-8b]    # empty: serves every model
    weight: 100
    agent: http://127.0.0.1:9400     # optional: node load agent
    metrics: http://127.0.0.1:8000/metrics   # optional: vLLM/TGI Prometheus endpoint
    reference: b            # optional: shadow-compare against backend b (precision)
  - name: b
    url: https://10.0.0.2:8080
    kind: tgi
    weight: 2.5
  - url: http://10.0.0.3:8000
balancer: {strategy: least_request, load_weights: {cpu: 0, queue: 5}, stale_after: 30s}  # dynamic | round_robin | least_request
state: {redis: {url: redis://127.0.0.1:6379/0, prefix: gw}}   # omit: in-memory
tracing: {sample_ratio: 0.25, capture_content: true}
analyzers: {queue_size: 128, max_capture_bytes: 0}
alerts: {alertmanager_url: http://127.0.0.1:9093, webhook_url: "", period: 1m30s}
admin: {token: "s3cret"}
limits: {max_body_bytes: 1048576, upstream_timeout: 90s}
health: {path: /healthz, interval: 0s, timeout: 500ms, failures: 5, max_backoff: 10s}
retries: {attempts: 1}
log: {level: debug, access: false}
`,
			want: config.Config{
				Listen: ":9090",
				Backends: []config.Backend{
					{
						Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai",
						Models: []string{"llama-3-8b"}, Weight: 100,
						Agent: "http://127.0.0.1:9400", Metrics: "http://127.0.0.1:8000/metrics",
						Reference: "b",
					},
					{Name: "b", URL: "https://10.0.0.2:8080", Kind: "tgi", Weight: 2.5},
					{Name: "b2", URL: "http://10.0.0.3:8000", Kind: "openai", Weight: 100},
				},
				Balancer: func() config.Balancer {
					b := config.Default().Balancer
					b.Strategy, b.LoadWeights.CPU, b.LoadWeights.Queue, b.StaleAfter = "least_request", 0, 5, 30*time.Second
					return b
				}(),
				State:       config.State{Redis: config.Redis{URL: "redis://127.0.0.1:6379/0", Prefix: "gw", FlushInterval: time.Second}},
				Tracing:     config.Tracing{SampleRatio: 0.25, CaptureContent: true, MaxContentBytes: 4096, Exporter: "otlp"},
				Retrieval:   config.Default().Retrieval,
				Cache:       config.Default().Cache,
				Usage:       config.Default().Usage,
				Quotas:      config.Default().Quotas,
				Responses:   config.Default().Responses,
				Passthrough: config.Default().Passthrough,
				Analyzers: func() config.Analyzers {
					a := config.Default().Analyzers
					a.QueueSize, a.MaxCaptureBytes = 128, 0
					return a
				}(),
				Alerts: func() config.Alerts {
					a := config.Default().Alerts
					a.AlertmanagerURL, a.Period = "http://127.0.0.1:9093", 90*time.Second
					return a
				}(),
				Admin: config.Admin{Token: "s3cret"},
				Limits: func() config.Limits {
					l := config.Default().Limits
					l.MaxBodyBytes, l.UpstreamTimeout = 1048576, 90*time.Second
					return l
				}(),
				Health: config.Health{
					Path: "/healthz", Interval: 0, Timeout: 500 * time.Millisecond,
					Failures: 5, Backoff: time.Second, MaxBackoff: 10 * time.Second,
				},
				Retries: config.Retries{Attempts: 1},
				Log:     config.Log{Level: "debug", Access: false},
			},
		},
		{
			name: "absent keys keep defaults",
			yaml: "limits:\n  max_body_bytes: 10\nstate:\n  redis:\n    url: unix:///run/redis.sock\n",
			want: withDefaults(func(c *config.Config) {
				c.Limits.MaxBodyBytes = 10
				c.State.Redis.URL = "unix:///run/redis.sock"
			}),
		},
		{
			name: "admin pprof",
			yaml: "admin:\n  token: t0k3n\n  pprof: true\n",
			want: withDefaults(func(c *config.Config) { c.Admin = config.Admin{Token: "t0k3n", Pprof: true} }),
		},
		{
			name: "null values keep defaults",
			yaml: "health:\n  path:\n  interval: ~\nstate:\n  redis:\n    # url: redis://localhost\nbackends:\n",
			want: config.Default(),
		},
		{
			name: "empty strings override defaults",
			yaml: "state: {redis: {prefix: \"\"}}\n",
			want: withDefaults(func(c *config.Config) { c.State.Redis.Prefix = "" }),
		},
		{
			name: "backend defaults and explicit empty name and kind",
			yaml: "backends:\n  - {url: 'http://h:1', name: '', kind: ''}\n  - url: http://h:2\n    weight: 0\n",
			want: withDefaults(func(c *config.Config) {
				c.Backends = []config.Backend{
					{Name: "b0", URL: "http://h:1", Kind: "openai", Weight: 100},
					{Name: "b1", URL: "http://h:2", Kind: "openai", Weight: 0}, // Validate rejects it
				}
			}),
		},
		{
			name: "anchors, aliases and merge keys",
			yaml: "backends:\n  - &a {name: a, url: 'http://h:1', models: [m]}\n  - <<: *a\n    name: b\n",
			want: withDefaults(func(c *config.Config) {
				c.Backends = []config.Backend{
					{Name: "a", URL: "http://h:1", Kind: "openai", Models: []string{"m"}, Weight: 100},
					{Name: "b", URL: "http://h:1", Kind: "openai", Models: []string{"m"}, Weight: 100},
				}
			}),
		},
		{
			name: "merge of several mappings, own keys first",
			yaml: "backends:\n  - &x {name: a, url: 'http://h:1', kind: tgi}\n  - &y {name: b, url: 'http://h:2', weight: 3}\n" +
				"  - name: c\n    <<: [*x, *y]\n",
			want: withDefaults(func(c *config.Config) {
				c.Backends = []config.Backend{
					{Name: "a", URL: "http://h:1", Kind: "tgi", Weight: 100},
					{Name: "b", URL: "http://h:2", Kind: "openai", Weight: 3},
					// In a list of merged mappings the earlier wins.
					{Name: "c", URL: "http://h:1", Kind: "tgi", Weight: 3},
				}
			}),
		},
		{
			name: "integer forms and a YAML 1.1 boolean",
			yaml: "analyzers: {queue_size: 0x10}\ntracing: {sample_ratio: 1, capture_content: yes}\n",
			want: withDefaults(func(c *config.Config) {
				c.Analyzers.QueueSize = 16
				c.Tracing.CaptureContent = true
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := config.Load(writeConfig(t, tt.yaml))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Load mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		// want are the lines of the error, after "<dir>/vigil.yaml", in order.
		want []string
	}{
		{
			name: "unknown top-level key",
			yaml: "listen: ':1'\nlistn: ':2'\n",
			want: []string{`:2: listn: unknown key (did you mean "listen"?)`},
		},
		{
			name: "unknown nested key",
			yaml: "limits:\n  max_body: 5\n",
			want: []string{`:2: limits.max_body: unknown key (did you mean "max_body_bytes"?)`},
		},
		{
			name: "unknown key two levels down",
			yaml: "state:\n  redis:\n    addr: localhost:6379\n",
			want: []string{`:3: state.redis.addr: unknown key`},
		},
		{
			name: "unknown key in a list element",
			yaml: "backends:\n  - url: http://h:1\n  - urll: http://h:2\n",
			want: []string{`:3: backends[1].urll: unknown key (did you mean "url"?)`},
		},
		{
			name: "camel case key",
			yaml: "limits: {maxBodyBytes: 5}\n",
			want: []string{`:1: limits.maxBodyBytes: unknown key (did you mean "max_body_bytes"?)`},
		},
		{
			name: "every error is reported",
			yaml: "bogus: 1\nhealth:\n  interval: soon\n  extra: true\nbackends:\n  - {url: 'http://h', wieght: 3}\n",
			want: []string{
				`:1: bogus: unknown key`,
				`:3: health.interval: invalid duration "soon" (want e.g. "300ms", "5m")`,
				`:4: health.extra: unknown key`,
				`:6: backends[0].wieght: unknown key (did you mean "weight"?)`,
			},
		},
		{
			name: "duplicate key",
			yaml: "log:\n  level: info\n  level: debug\n",
			want: []string{`:3: log.level: duplicate key (first at line 2)`},
		},
		{
			name: "duration in words",
			yaml: "limits:\n  upstream_timeout: 5 minutes\n",
			want: []string{`:2: limits.upstream_timeout: invalid duration "5 minutes" (want e.g. "300ms", "5m")`},
		},
		{
			name: "duration without unit",
			yaml: "health: {timeout: 300}\n",
			want: []string{`:1: health.timeout: invalid duration "300" (want e.g. "300ms", "5m")`},
		},
		{
			name: "word for integer",
			yaml: "analyzers: {queue_size: many}\n",
			want: []string{`:1: analyzers.queue_size: invalid integer "many"`},
		},
		{
			name: "fraction for integer",
			yaml: "analyzers: {queue_size: 1.5}\n",
			want: []string{`:1: analyzers.queue_size: invalid integer "1.5"`},
		},
		{
			name: "quoted integer",
			yaml: "limits: {max_body_bytes: '1024'}\n",
			want: []string{`:1: limits.max_body_bytes: invalid integer "1024"`},
		},
		{
			name: "integer out of range",
			yaml: "limits: {max_body_bytes: 99999999999999999999}\n",
			want: []string{`:1: limits.max_body_bytes: invalid integer "99999999999999999999"`},
		},
		{
			name: "word for number",
			yaml: "tracing: {sample_ratio: high}\n",
			want: []string{`:1: tracing.sample_ratio: invalid number "high"`},
		},
		{
			name: "word for boolean",
			yaml: "log: {access: maybe}\n",
			want: []string{`:1: log.access: invalid boolean "maybe"`},
		},
		{
			name: "sequence for string",
			yaml: "listen: [a, b]\n",
			want: []string{`:1: listen: expected a string, got a sequence`},
		},
		{
			name: "mapping for duration",
			yaml: "alerts:\n  period: {minutes: 5}\n",
			want: []string{`:2: alerts.period: expected a duration, got a mapping`},
		},
		{
			name: "scalar for mapping",
			yaml: "health: 5s\n",
			want: []string{`:1: health: expected a mapping, got "5s"`},
		},
		{
			name: "mapping for list",
			yaml: "backends:\n  url: http://h:1\n",
			want: []string{`:2: backends: expected a sequence, got a mapping`},
		},
		{
			name: "string for list element",
			yaml: "backends:\n  - http://h:1\n",
			want: []string{`:2: backends[0]: expected a mapping, got "http://h:1"`},
		},
		{
			name: "string for models",
			yaml: "backends:\n  - url: http://h:1\n    models: llama\n",
			want: []string{`:3: backends[0].models: expected a sequence, got "llama"`},
		},
		{
			name: "list for document",
			yaml: "- listen: ':1'\n",
			want: []string{`:1: the document must be a mapping, got a sequence`},
		},
		{
			name: "two documents",
			yaml: "listen: ':1'\n---\nlisten: ':2'\n",
			want: []string{`:2: more than one YAML document`},
		},
		{
			name: "alias merging into itself",
			yaml: "state: &s {<<: *s}\n",
			want: []string{`:1: state: nested too deeply (an alias refers to itself?)`},
		},
		{
			name: "syntax error",
			yaml: "listen: [\n\n",
			want: []string{`:2: did not find expected node content`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.yaml)
			got, err := config.Load(path)
			if err == nil {
				t.Fatalf("Load succeeded with %+v, want an error", got)
			}
			var want []string
			for _, w := range tt.want {
				want = append(want, path+w)
			}
			if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("error mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(config.Config{}, got); diff != "" {
				t.Errorf("Load returned a config with its error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadErrorValues(t *testing.T) {
	path := writeConfig(t, "backends:\n  - url: http://h:1\n  - urll: http://h:2\n")
	_, err := config.Load(path)
	if !errors.Is(err, config.ErrUnknownKey) {
		t.Errorf("errors.Is(%v, ErrUnknownKey) = false, want true", err)
	}
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("errors.As(%v, *FieldError) = false, want true", err)
	}
	type field struct {
		File string
		Line int
		Path string
	}
	want := field{File: path, Line: 3, Path: "backends[1].urll"}
	if diff := cmp.Diff(want, field{fe.File, fe.Line, fe.Path}); diff != "" {
		t.Errorf("FieldError mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := config.Load(filepath.Join(t.TempDir(), "absent.yaml"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(absent) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestLoadNaNRatioIsInvalid(t *testing.T) {
	// .nan decodes; Validate is what rejects it.
	c, err := config.Load(writeConfig(t, "tracing: {sample_ratio: .nan}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(c.Tracing.SampleRatio) {
		t.Fatalf("sample_ratio = %v, want NaN", c.Tracing.SampleRatio)
	}
	if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "tracing.sample_ratio: ") {
		t.Errorf("Validate() = %v, want a tracing.sample_ratio error", err)
	}
}

// wantAnalyzers spells out the analyzers' defaults, so that a change to
// them is a visible change to this test.
func wantAnalyzers() config.Analyzers {
	return config.Analyzers{
		QueueSize: 4096, MaxCaptureBytes: 1048576,
		Interval: 15 * time.Second, Bucket: 10 * time.Second, MinRequests: 300,
		Window: 15 * time.Minute, Reference: time.Hour, Alpha: 0.01, Consecutive: 2, Seed: 0x5eed,
		Drift: config.Drift{Enabled: true, Reservoir: 1024, Correction: "bh", PSIBins: 10, MinPSI: 0.1, Mahalanobis: true,
			Text: config.DriftText{Enabled: true, MinAUC: 0.55, Terms: 64, Embeddings: config.DefaultDriftEmbeddings()}},
		Confidence:  config.Confidence{Enabled: true, LowProb: 0.5, MinDrop: 0.03, Inject: config.Inject{TopLogprobs: 5}},
		Latency:     config.Latency{Enabled: true, K: 2, MinRise: 0.1},
		Output:      config.Output{Enabled: true, Sigma: 3, Minutes: 5, MinBaselineMinutes: 10},
		Calibration: config.Calibration{Bins: 15, MaxPending: 100000, TTL: 24 * time.Hour, MaxLabels: 10000},
		Precision: config.Precision{Enabled: true, SampleRatio: 0.05, TopLogprobs: 5, MaxTokens: 32, Concurrency: 4,
			Timeout: 30 * time.Second, MinTokens: 200, MaxKL: 0.05, MinTop1Agreement: 0.9},
		Segments: config.Segments{MaxModels: 32, Reservoir: 256},
	}
}

func TestLoadMap(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := dir + "/c.yaml"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c, err := config.Load(write("alerts:\n  fixed:\n    error_rate: 0.05\n    drift_score: 0.3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"error_rate": 0.05, "drift_score": 0.3}, c.Alerts.Fixed); diff != "" {
		t.Errorf("fixed (-want +got):\n%s", diff)
	}
	for body, want := range map[string]string{
		"alerts:\n  fixed: [1]\n":                "alerts.fixed: expected a mapping",
		"alerts:\n  fixed:\n    error_rate: x\n": "alerts.fixed.error_rate",
	} {
		if _, err := config.Load(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want one naming %q", body, err, want)
		}
	}
}
