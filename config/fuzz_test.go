package config

import (
	"errors"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"
)

// Fuzz targets for what an operator writes, which must never panic the gateway: the config file's
// parser and the environment overrides. test/run runs each for 5 s after
// the race tests, `test/run -fuzz` for 60 s; one by hand:
//
//	go test -run '^$' -fuzz '^FuzzParse$' -fuzztime 60s ./config/

// leafErrors flattens err's joined errors.
func leafErrors(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}

// FuzzParse: the parser returns a config or errors, never both; every
// error names the file; what it accepts, Validate checks without
// panicking, and written back as YAML it parses to the same config.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "---\n", "null", "listen: \":8080\"\n", "[1, 2]\n", "a: b\n---\nc: d\n", "listen: [\n",
		"backends:\n  - name: a\n    url: http://127.0.0.1:8000\n    models: [m1]\n    weight: 50\n  - url: http://127.0.0.1:8001\n    kind: tgi\n",
		"limits: {max_body_bytes: 1.5, upstream_timeout: 5q}\nlisten: 1\nlisten: 2\nunknwn: 1\n",
		"alerts: {tiers: {gold: critical}, fixed: {drift_score: 0.5}}\nbackends: [{name: a, url: http://x, tier: gold}]\n",
		"base: &b {strategy: round_robin}\nbalancer: *b\n", "balancer:\n  <<: [{strategy: least_request}, {queue_saturation: 3}]\n  stale_after: 1m\n",
		"a: &a [*a]\n", "a: &a\n  <<: *a\n", "tracing: {sample_ratio: .nan}\n", "limits: {max_body_bytes: 99999999999999999999}\n",
		"analyzers:\n  drift: {enabled: true}\n  confidence: {inject: {sample_ratio: 0.1, top_logprobs: 5}}\n",
		"log: {level: !!str 1}\nadmin: {token: \"a\\tb\"}\n", "? [a]\n: 1\n", "listen: &l \":1\"\n" + strings.Repeat("x: *l\n", 3),
	} {
		f.Add([]byte(s))
	}
	if example, err := os.ReadFile("example.yaml"); err == nil {
		f.Add(example)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parse("fuzz.yaml", data)
		if err != nil {
			if !reflect.DeepEqual(cfg, Config{}) {
				t.Fatalf("%q: both a config and an error: %v", data, err)
			}
			for _, e := range leafErrors(err) {
				if !strings.HasPrefix(e.Error(), "fuzz.yaml") {
					t.Fatalf("%q: error %q does not name the file", data, e)
				}
				if fe, ok := errors.AsType[*FieldError](e); !ok || fe.Line < 1 {
					// yaml's own messages without a line are the exception.
					if ok || !strings.HasPrefix(e.Error(), "fuzz.yaml: yaml: ") {
						t.Fatalf("%q: error %q has no line", data, e)
					}
				}
			}
			return
		}
		_ = cfg.Validate()
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("%q: the config it gives does not marshal: %v", data, err)
		}
		again, err := parse("again.yaml", out)
		if err != nil {
			t.Fatalf("%q parses, but written back as\n%s\nit does not: %v", data, out, err)
		}
		if blockIndent.Match(out) {
			// yaml.v3 writes a string that starts with a line break as a
			// block scalar with an indentation indicator (|4-, |4+) and
			// reads it back without that line break ("\n" comes back
			// ""): the library's fault, not the config's.
			return
		}
		if diff := cmp.Diff(cfg, again, cmpopts.EquateNaNs(), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("%q parses, but written back as\n%s\nit parses otherwise:\n%s", data, out, diff)
		}
	})
}

// blockIndent finds a block scalar with an indentation indicator in
// yaml.v3's output.
var blockIndent = regexp.MustCompile(`\|[1-9][-+]?\n`)

// envVars are the variables ApplyEnv reads, in FuzzApplyEnv's argument
// order, with the config path each sets.
var envVars = []struct{ name, path string }{
	{"VIGIL_LISTEN", "listen"},
	{"VIGIL_REDIS_URL", "state.redis.url"},
	{"VIGIL_ADMIN_TOKEN", "admin.token"},
	{"VIGIL_BACKENDS", "backends"},
	{"VIGIL_MAX_BODY_BYTES", "limits.max_body_bytes"},
	{"VIGIL_UPSTREAM_TIMEOUT", "limits.upstream_timeout"},
	{"VIGIL_BALANCER", "balancer.strategy"},
	{"VIGIL_LOG_LEVEL", "log.level"},
	{"VIGIL_SAMPLE_RATIO", "tracing.sample_ratio"},
}

// FuzzApplyEnv: ApplyEnv either applies every variable set or none, and
// then names each bad variable; what it applies, Validate accepts (except
// duplicate backend names, which ParseBackendFlag leaves to Validate); a
// backend it parses, written back as name=url#kind, parses to the same
// backend.
func FuzzApplyEnv(f *testing.F) {
	f.Add("127.0.0.1:9090", "redis://127.0.0.1:6379/2", "tok", "a=http://127.0.0.1:8000,b=http://h:1/x?y=z#tgi", "1024", "5s", "round_robin", "debug", "0.5")
	f.Add(" :1 ", "unix:///tmp/r.sock", "", "http://[::1]:8000", "", "", "", "", "1")
	f.Add("nohost", "http://x", "a b", "a=,=http://x,a=ftp://x#vllm", "-1", "-5s", "random", "LOUD", "NaN")
	f.Add("", "redis://h/99999999999", "\x00", ",", "1e3", "1h1", "", "", "0x1p-2")
	f.Add("[::1]:65536", "rediss://u:p@h:1/0", "t\u00a0", "a=http://x#tgi#openai,b=https://y=z", "9223372036854775808", "300", "dynamic", "warn", "-0")
	f.Fuzz(func(t *testing.T, listen, redis, token, backends, maxBody, timeout, strategy, level, ratio string) {
		vals := []string{listen, redis, token, backends, maxBody, timeout, strategy, level, ratio}
		env := map[string]string{}
		for i, v := range envVars {
			env[v.name] = vals[i]
		}
		c := Default()
		err := c.ApplyEnv(func(k string) string { return env[k] })
		if err != nil {
			if diff := cmp.Diff(Default(), c, cmpopts.EquateNaNs()); diff != "" {
				t.Fatalf("%q: error %v, and the config changed:\n%s", vals, err, diff)
			}
			for _, e := range leafErrors(err) {
				fe, ok := errors.AsType[*FieldError](e)
				if !ok {
					t.Fatalf("%q: error %q is not a FieldError", vals, e)
				}
				if name, _, _ := strings.Cut(fe.Path, "["); strings.TrimSpace(env[name]) == "" {
					t.Fatalf("%q: error %q names no variable that was set", vals, e)
				}
			}
			return
		}
		set := func(i int) (string, bool) { v := strings.TrimSpace(vals[i]); return v, v != "" }
		values := func(c *Config) []string { // in envVars' order; backends apart
			return []string{c.Listen, c.State.Redis.URL, c.Admin.Token, "", strconv.FormatInt(c.Limits.MaxBodyBytes, 10),
				c.Limits.UpstreamTimeout.String(), c.Balancer.Strategy, c.Log.Level, strconv.FormatFloat(c.Tracing.SampleRatio, 'g', -1, 64)}
		}
		def := Default()
		applied, defaults := values(&c), values(&def)
		for i, ev := range envVars {
			v, ok := set(i)
			if !ok {
				v = defaults[i] // unset: the default stays
			}
			switch ev.name {
			case "VIGIL_BACKENDS":
				continue
			case "VIGIL_MAX_BODY_BYTES":
				n, _ := strconv.ParseInt(v, 10, 64)
				v = strconv.FormatInt(n, 10)
			case "VIGIL_UPSTREAM_TIMEOUT":
				d, _ := time.ParseDuration(v)
				v = d.String()
			case "VIGIL_SAMPLE_RATIO":
				r, _ := strconv.ParseFloat(v, 64)
				v = strconv.FormatFloat(r, 'g', -1, 64)
			}
			if applied[i] != v {
				t.Fatalf("%q: %s applied as %q, want %q", vals, ev.name, applied[i], v)
			}
		}
		if _, ok := set(3); ok {
			items := strings.Split(strings.TrimSpace(backends), ",")
			if len(c.Backends) != len(items) {
				t.Fatalf("VIGIL_BACKENDS=%q gave %d backends", backends, len(c.Backends))
			}
			for i, item := range items {
				b := c.Backends[i]
				if again, err := ParseBackendFlag(b.Name+"="+b.URL+"#"+b.Kind, i); err != nil || !reflect.DeepEqual(again, b) {
					t.Fatalf("backend %q parsed as %+v; written back, it parses as %+v, %v", item, b, again, err)
				}
			}
		}
		if err := c.Validate(); err != nil {
			for _, e := range leafErrors(err) {
				fe, ok := errors.AsType[*FieldError](e)
				if !ok {
					t.Fatalf("Validate: %v", e)
				}
				for i, v := range envVars {
					if _, isSet := set(i); !isSet || !strings.HasPrefix(fe.Path, v.path) {
						continue
					}
					if v.name == "VIGIL_BACKENDS" && strings.HasSuffix(fe.Path, ".name") && strings.Contains(fe.Err.Error(), "duplicate name") {
						continue
					}
					t.Fatalf("%q: ApplyEnv accepted %s, which Validate rejects: %v", vals, v.name, e)
				}
			}
		}
	})
}
