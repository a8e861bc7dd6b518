package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

// fromFile is what a file might have set before the environment is applied.
func fromFile() config.Config {
	c := config.Default()
	c.Backends = []config.Backend{{Name: "file", URL: "http://file:1", Kind: "openai", Weight: 100}}
	return c
}

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want func(*config.Config)
	}{
		{name: "nothing set", env: nil, want: func(*config.Config) {}},
		{name: "empty values are unset", env: map[string]string{"VIGIL_LISTEN": "", "VIGIL_BACKENDS": " "},
			want: func(*config.Config) {}},
		{
			name: "every variable",
			env: map[string]string{
				"VIGIL_LISTEN":           "127.0.0.1:9000",
				"VIGIL_REDIS_URL":        "redis://redis:6379/1",
				"VIGIL_ADMIN_TOKEN":      "t0k3n",
				"VIGIL_ADMIN_OPEN":       "true",
				"VIGIL_BACKENDS":         "a=http://10.0.0.1:8000, http://10.0.0.2:8080#tgi",
				"VIGIL_MAX_BODY_BYTES":   "1024",
				"VIGIL_UPSTREAM_TIMEOUT": "2m",
				"VIGIL_BALANCER":         "round_robin",
				"VIGIL_LOG_LEVEL":        "warn",
				"VIGIL_SAMPLE_RATIO":     "0.1",
			},
			want: func(c *config.Config) {
				c.Listen = "127.0.0.1:9000"
				c.State.Redis.URL = "redis://redis:6379/1"
				c.Admin.Token = "t0k3n"
				c.Admin.Open = true
				c.Backends = []config.Backend{
					{Name: "a", URL: "http://10.0.0.1:8000", Kind: "openai", Weight: 100},
					{Name: "b1", URL: "http://10.0.0.2:8080", Kind: "tgi", Weight: 100},
				}
				c.Limits.MaxBodyBytes = 1024
				c.Limits.UpstreamTimeout = 2 * time.Minute
				c.Balancer.Strategy = "round_robin"
				c.Log.Level = "warn"
				c.Tracing.SampleRatio = 0.1
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := fromFile()
			tt.want(&want)
			got := fromFile()
			if err := got.ApplyEnv(mapEnv(tt.env)); err != nil {
				t.Fatalf("ApplyEnv: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("ApplyEnv mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"listen", map[string]string{"VIGIL_LISTEN": "9000"},
			`VIGIL_LISTEN: must be host:port, got "9000"`},
		{"redis url", map[string]string{"VIGIL_REDIS_URL": "localhost:6379"},
			`VIGIL_REDIS_URL: scheme must be redis, rediss or unix, got "localhost"`},
		{"admin token", map[string]string{"VIGIL_ADMIN_TOKEN": "two words"},
			`VIGIL_ADMIN_TOKEN: must not contain whitespace or control characters`},
		{"admin open", map[string]string{"VIGIL_ADMIN_OPEN": "yes"},
			`VIGIL_ADMIN_OPEN: invalid boolean "yes" (want true or false)`},
		{"backend url", map[string]string{"VIGIL_BACKENDS": "http://ok:1,b=ftp://h"},
			`VIGIL_BACKENDS[1].url: must be an absolute http or https URL, got "ftp://h"`},
		{"backend kind", map[string]string{"VIGIL_BACKENDS": "http://h:1#vllm"},
			`VIGIL_BACKENDS[0].kind: "vllm" is not one of openai, tgi`},
		{"empty backend", map[string]string{"VIGIL_BACKENDS": "http://h:1,,http://h:2"},
			`VIGIL_BACKENDS[1]: empty backend: want [name=]url[#kind]`},
		{"max body bytes not a number", map[string]string{"VIGIL_MAX_BODY_BYTES": "8MiB"},
			`VIGIL_MAX_BODY_BYTES: invalid integer "8MiB"`},
		{"max body bytes zero", map[string]string{"VIGIL_MAX_BODY_BYTES": "0"},
			`VIGIL_MAX_BODY_BYTES: must be > 0, got 0`},
		{"upstream timeout without unit", map[string]string{"VIGIL_UPSTREAM_TIMEOUT": "300"},
			`VIGIL_UPSTREAM_TIMEOUT: invalid duration "300" (want e.g. "300s", "5m")`},
		{"upstream timeout negative", map[string]string{"VIGIL_UPSTREAM_TIMEOUT": "-1s"},
			`VIGIL_UPSTREAM_TIMEOUT: must be > 0, got -1s`},
		{"balancer", map[string]string{"VIGIL_BALANCER": "random"},
			`VIGIL_BALANCER: "random" is not one of prefix, dynamic, round_robin, least_request`},
		{"log level", map[string]string{"VIGIL_LOG_LEVEL": "INFO"},
			`VIGIL_LOG_LEVEL: "INFO" is not one of debug, info, warn, error`},
		{"sample ratio not a number", map[string]string{"VIGIL_SAMPLE_RATIO": "half"},
			`VIGIL_SAMPLE_RATIO: invalid number "half"`},
		{"sample ratio out of range", map[string]string{"VIGIL_SAMPLE_RATIO": "2"},
			`VIGIL_SAMPLE_RATIO: must be in [0, 1], got 2`},
		{"several, in a fixed order", map[string]string{"VIGIL_LOG_LEVEL": "x", "VIGIL_LISTEN": "y", "VIGIL_BALANCER": "dynamic"},
			"VIGIL_LISTEN: must be host:port, got \"y\"\n" +
				`VIGIL_LOG_LEVEL: "x" is not one of debug, info, warn, error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := fromFile()
			err := c.ApplyEnv(mapEnv(tt.env))
			if diff := cmp.Diff(tt.want, errString(err)); diff != "" {
				t.Errorf("ApplyEnv error mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(fromFile(), c); diff != "" {
				t.Errorf("ApplyEnv changed the config despite an error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyEnvNilGetenv(t *testing.T) {
	t.Setenv("VIGIL_LOG_LEVEL", "debug")
	c := config.Default()
	if err := c.ApplyEnv(nil); err != nil {
		t.Fatal(err)
	}
	if c.Log.Level != "debug" {
		t.Errorf("log.level = %q, want %q from the process environment", c.Log.Level, "debug")
	}
}

func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseBackendFlag(t *testing.T) {
	tests := []struct {
		in    string
		index int
		want  config.Backend
	}{
		{"http://127.0.0.1:8000", 0,
			config.Backend{Name: "b0", URL: "http://127.0.0.1:8000", Kind: "openai", Weight: 100}},
		{"a=http://127.0.0.1:8000", 3,
			config.Backend{Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai", Weight: 100}},
		{"a=http://127.0.0.1:8000#tgi", 0,
			config.Backend{Name: "a", URL: "http://127.0.0.1:8000", Kind: "tgi", Weight: 100}},
		{"https://h/v1#openai", 2,
			config.Backend{Name: "b2", URL: "https://h/v1", Kind: "openai", Weight: 100}},
		{"http://h:1/?k=v", 1, // '=' after "://" is the URL's
			config.Backend{Name: "b1", URL: "http://h:1/?k=v", Kind: "openai", Weight: 100}},
		{" q4=http://u:p@h:1 ", 0,
			config.Backend{Name: "q4", URL: "http://u:p@h:1", Kind: "openai", Weight: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := config.ParseBackendFlag(tt.in, tt.index)
			if err != nil {
				t.Fatalf("ParseBackendFlag: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseBackendFlag mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseBackendFlagErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty backend: want [name=]url[#kind]"},
		{"127.0.0.1:8000", `url: invalid URL: first path segment in URL cannot contain colon`},
		{"a=", "url: must not be empty"},
		{"=http://h:1", "name: must not be empty"},
		{"a b=http://h:1", `name: invalid name "a b": use letters, digits, '_', '.' and '-'`},
		{"http://h:1#", `kind: "" is not one of openai, tgi`},
		{"a=ftp://h#vllm", "url: must be an absolute http or https URL, got \"ftp://h\"\n" +
			`kind: "vllm" is not one of openai, tgi`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := config.ParseBackendFlag(tt.in, 0)
			if diff := cmp.Diff(tt.want, errString(err)); diff != "" {
				t.Errorf("ParseBackendFlag(%q) error mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
