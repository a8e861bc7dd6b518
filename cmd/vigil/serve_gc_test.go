package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/vigil-gw/vigil/config"
)

// TestSetDefaultGC: without GOGC in the environment the collector's target
// becomes defaultGOGC; with it, the runtime's reading of GOGC stands.
func TestSetDefaultGC(t *testing.T) {
	// A target of neither the default nor Go's own, so that both a
	// change and its absence show.
	const other = 37
	prev := debug.SetGCPercent(other)
	defer debug.SetGCPercent(prev)

	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := setDefaultGC(getenv); got != "100" {
		t.Errorf("without GOGC: %q, want 100", got)
	}
	if p := debug.SetGCPercent(other); p != defaultGOGC {
		t.Errorf("GC percent %d, want %d", p, defaultGOGC)
	}
	env["GOGC"] = "off"
	if got := setDefaultGC(getenv); got != "off" {
		t.Errorf("with GOGC=off: %q, want off", got)
	}
	if p := debug.SetGCPercent(other); p != other {
		t.Errorf("GC percent %d after GOGC=off, want it untouched (%d)", p, other)
	}
}

// TestSetMemoryLimit: the limit in force comes from GOMEMLIMIT when set,
// else from limits.memory_limit, whose 0 is derived from max_connections
// and at most 90 % of the container's limit.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)

	none := func() (int64, bool) { return 0, false }
	container := func(n int64) func() (int64, bool) { return func() (int64, bool) { return n, true } }
	noEnv := func(string) string { return "" }
	const mib = 1 << 20
	share := func(n int64) int64 { return int64(containerShare * float64(n)) }
	for _, tc := range []struct {
		name      string
		env       string
		lim       config.Limits
		container func() (int64, bool)
		want      string
		limit     int64
	}{
		{"derived from the default connection cap", "", config.DefaultLimits(), none, "1221MiB", memoryLimitBase + 10000*memoryLimitPerConnection},
		{"a small container caps it", "", config.DefaultLimits(), container(512 * mib), "460MiB", share(512 * mib)},
		{"a large container does not", "", config.DefaultLimits(), container(64 << 30), "1221MiB", memoryLimitBase + 10000*memoryLimitPerConnection},
		{"no connection cap, no container: none", "", config.Limits{}, none, "off", math.MaxInt64},
		{"no connection cap, a container", "", config.Limits{}, container(1 << 30), "921MiB", share(1 << 30)},
		{"configured", "", config.Limits{MaxConnections: 10000, MemoryLimit: 300 * mib}, container(64 * mib), "300MiB", 300 * mib},
		{"turned off", "", config.Limits{MaxConnections: 10000, MemoryLimit: -1}, container(64 * mib), "off", math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(12345 * mib)
			getenv := noEnv
			if tc.env != "" {
				getenv = func(k string) string { return map[string]string{"GOMEMLIMIT": tc.env}[k] }
			}
			if got := setMemoryLimit(getenv, tc.lim, tc.container); got != tc.want {
				t.Errorf("reported %q, want %q", got, tc.want)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.limit {
				t.Errorf("limit %d, want %d", got, tc.limit)
			}
		})
	}
	t.Run("GOMEMLIMIT stands", func(t *testing.T) {
		debug.SetMemoryLimit(777 * mib)
		getenv := func(k string) string { return map[string]string{"GOMEMLIMIT": "2GiB"}[k] }
		if got := setMemoryLimit(getenv, config.DefaultLimits(), container(mib)); got != "2GiB" {
			t.Errorf("reported %q, want 2GiB", got)
		}
		if got := debug.SetMemoryLimit(-1); got != 777*mib {
			t.Errorf("limit %d, want it untouched (%d)", got, 777*mib)
		}
	})
}

// TestReadMemoryLimit reads cgroup files: v2's "max" and v1's huge
// number are no limit.
func TestReadMemoryLimit(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    int64
		ok      bool
	}{
		{"536870912\n", 536870912, true},
		{"max\n", 0, false},
		{"9223372036854771712\n", 0, false},
		{"", 0, false},
	} {
		p := filepath.Join(dir, "memory.max")
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if n, ok := readMemoryLimit(p); n != tc.want || ok != tc.ok {
			t.Errorf("%q: %d, %t; want %d, %t", tc.content, n, ok, tc.want, tc.ok)
		}
	}
	if _, ok := readMemoryLimit(filepath.Join(dir, "absent")); ok {
		t.Error("a missing file read as a limit")
	}
}
