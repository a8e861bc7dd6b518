package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ApplyEnv overrides c with the VIGIL_* environment variables listed in the package
// documentation, read through getenv (nil: [os.Getenv]). An empty value counts as
// unset. VIGIL_BACKENDS replaces the backends: a comma-separated list, each item in
// the form of [ParseBackendFlag]. A bad value is an error naming the variable; then
// c is left unchanged and every bad variable is reported.
func (c *Config) ApplyEnv(getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	n := *c
	var l errList
	env := func(name string, apply func(string) error) {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			l.nest(name, apply(v))
		}
	}
	env("VIGIL_LISTEN", func(v string) error {
		n.Listen = v
		return checkListen(v)
	})
	env("VIGIL_REDIS_URL", func(v string) error {
		n.State.Redis.URL = v
		return checkRedisURL(v)
	})
	env("VIGIL_ADMIN_TOKEN", func(v string) error {
		n.Admin.Token = v
		return checkToken(v)
	})
	env("VIGIL_ADMIN_OPEN", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("invalid boolean %q (want true or false)", v)
		}
		n.Admin.Open = b
		return nil
	})
	env("VIGIL_BACKENDS", func(v string) error {
		var bs []Backend
		var bl errList
		for i, item := range strings.Split(v, ",") {
			b, err := ParseBackendFlag(item, i)
			bl.nest(indexPath("", i), err)
			bs = append(bs, b)
		}
		n.Backends = bs
		return bl.err()
	})
	env("VIGIL_MAX_BODY_BYTES", func(v string) error {
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("invalid integer %q", v)
		}
		n.Limits.MaxBodyBytes = i
		return checkPositiveInt(i)
	})
	env("VIGIL_UPSTREAM_TIMEOUT", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("invalid duration %q (want e.g. \"300s\", \"5m\")", v)
		}
		n.Limits.UpstreamTimeout = d
		return checkPositiveDuration(d)
	})
	env("VIGIL_BALANCER", func(v string) error {
		n.Balancer.Strategy = v
		return oneOf(v, strategies)
	})
	env("VIGIL_LOG_LEVEL", func(v string) error {
		n.Log.Level = v
		return oneOf(v, levels)
	})
	env("VIGIL_SAMPLE_RATIO", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("invalid number %q", v)
		}
		n.Tracing.SampleRatio = f
		return checkRatio(f)
	})
	if err := l.err(); err != nil {
		return err
	}
	*c = n
	return nil
}

// ParseBackendFlag parses a backend given on the command line or in VIGIL_BACKENDS:
//
//	[name=]url[#kind]
//
// for example "http://127.0.0.1:8000", "a=http://127.0.0.1:8000" or
// "a=http://127.0.0.1:8000#tgi". Without a name the backend is "b<index>"; without a
// kind it is "openai". Its weight is 100 and it serves every model. The name, URL
// and kind are checked; uniqueness of names is left to [Config.Validate].
func ParseBackendFlag(s string, index int) (Backend, error) {
	b := defaultBackend(index)
	s = strings.TrimSpace(s)
	if s == "" {
		return b, errors.New("empty backend: want [name=]url[#kind]")
	}
	// A backend URL has no fragment, so '#' always starts the kind.
	if rest, kind, ok := strings.Cut(s, "#"); ok {
		s, b.Kind = rest, kind
	}
	// '=' before "://" ends the name; later ones belong to the URL's query.
	if eq := strings.IndexByte(s, '='); eq >= 0 {
		if sep := strings.Index(s, "://"); sep < 0 || eq < sep {
			b.Name, s = s[:eq], s[eq+1:]
		}
	}
	b.URL = s
	var l errList
	l.add("name", checkName(b.Name))
	l.add("url", checkHTTPURL(b.URL))
	l.add("kind", oneOf(b.Kind, kinds))
	return b, l.err()
}
