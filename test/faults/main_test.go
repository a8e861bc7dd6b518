package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
	"github.com/vigil-gw/vigil/test/toxitest"
)

// vigilBin is the vigil binary TestMain built; "" when it built none
// (every test skips then, for want of Toxiproxy).
var vigilBin string

// TestMain builds vigil once for every test, without the race detector:
// the processes under test are the product as shipped, and the race
// detector's slowdown would only blur the latency figures.
func TestMain(m *testing.M) { os.Exit(run(m)) }

// faultParallel is how many of the suite's parallel tests run at once
// unless -parallel says otherwise. Each spends most of its 15 to 25 s
// waiting on a fault's wall-clock phases (a toxic, a blackhole, a slow
// Redis) with a fraction of a core in use, so the default of GOMAXPROCS
// (two on CI) left the suite idle for a minute: all seven at once take
// about as long as the slowest.
const faultParallel = 8

func run(m *testing.M) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(max(runtime.GOMAXPROCS(0), faultParallel))); err != nil {
			fmt.Fprintln(os.Stderr, "faults:", err)
			return 1
		}
	}
	if os.Getenv(toxitest.EnvBin) == "" {
		return m.Run() // toxitest.Start skips every test
	}
	bin, cleanup, err := proctest.BuildVigil()
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		return 1
	}
	defer cleanup()
	vigilBin = bin
	return m.Run()
}

// needVigil skips the test when TestMain built no vigil: the suite runs
// only where ./test/run provides Toxiproxy.
func needVigil(t *testing.T) {
	t.Helper()
	if vigilBin == "" {
		t.Skip(toxitest.EnvBin + " unset: run ./test/run, which builds Toxiproxy")
	}
}

// startAttempts bounds retries when another process takes a chosen port
// before the program binds it.
const startAttempts = 3

// simProc is a `vigil sim` process.
type simProc struct {
	URL  string // base URL
	Addr string // host:port
}

// startSim runs `vigil sim` serving model m on a free port, with no
// latency and 8 output tokens unless args say otherwise (later flags
// win), until the test ends.
func startSim(t *testing.T, args ...string) *simProc {
	t.Helper()
	needVigil(t)
	return proctest.Start(t, startAttempts, func() (*simProc, error) {
		ports, err := proctest.FreePorts(1)
		if err != nil {
			return nil, err
		}
		s := &simProc{URL: "http://" + ports[0], Addr: ports[0]}
		all := append([]string{"sim", "--listen", ports[0], "--model", "m", "--ttft", "0", "--itl", "0", "--output-tokens", "8"}, args...)
		err = proctest.Run(t, proctest.Service{
			Name:  "vigil sim",
			Path:  vigilBin,
			Args:  all,
			Ready: func() bool { return proctest.HTTPOK(s.URL + "/health") },
		})
		return s, err
	})
}

// setKnobs changes the simulator's knobs at run time (PATCH /sim/knobs
// with a JSON object of the knobs to change).
func (s *simProc) setKnobs(t *testing.T, patch string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPatch, s.URL+"/sim/knobs", strings.NewReader(patch))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("PATCH /sim/knobs %s: %s: %s", patch, resp.Status, b)
	}
}

// gateway is a `vigil serve` process.
type gateway struct {
	URL  string
	name string
}

// startVigil runs `vigil serve -config FILE` on a free port until the test
// ends and waits until it is ready. config is the YAML of the config file
// without its listen key; env adds to the test's environment (without its
// OTEL_* variables, which are the test's own).
func startVigil(t *testing.T, name, config string, env ...string) *gateway {
	t.Helper()
	needVigil(t)
	return proctest.Start(t, startAttempts, func() (*gateway, error) {
		ports, err := proctest.FreePorts(1)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(t.TempDir(), name+".yaml")
		body := fmt.Sprintf("listen: %q\n%s", ports[0], config)
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			return nil, err
		}
		g := &gateway{URL: "http://" + ports[0], name: name}
		err = proctest.Run(t, proctest.Service{
			Name:  "vigil serve (" + name + ")",
			Path:  vigilBin,
			Args:  []string{"serve", "-config", file},
			Env:   append(proctest.WithoutOTEL(os.Environ()), env...),
			Ready: func() bool { return proctest.HTTPOK(g.URL + "/readyz") },
			// Its shutdown drains the analyzers and flushes spans for at
			// most 5 s each.
			StopGrace: 15 * time.Second,
		})
		return g, err
	})
}

// baseConfig is the config every gateway of the suite starts from: one
// window holding all traffic (so that its count is the number of
// responses), evaluations every second, quick health checks, no span
// export and no access log. backends is the YAML list of backends.
func baseConfig(backends string) string {
	return "backends:\n" + backends + `
tracing: {exporter: none}
analyzers: {min_requests: 1000000, window: 1h, interval: 1s}
health: {interval: 1s, timeout: 500ms}
log: {level: warn, access: false}
`
}

// backendYAML is one entry of the backends list, serving model m.
func backendYAML(name, url string) string {
	return fmt.Sprintf("  - {name: %s, url: %q, models: [m]}\n", name, url)
}

// getJSON decodes GET path of the gateway into out.
func (g *gateway) getJSON(t *testing.T, path string, out any) {
	t.Helper()
	b := g.get(t, path)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: %v: %.300s", g.name, path, err, b)
	}
}

func (g *gateway) get(t *testing.T, path string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s GET %s: %v", g.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s GET %s: %s %v: %.300s", g.name, path, resp.Status, err, b)
	}
	return b
}

// responses returns the number of responses in the gateway's window, its
// own and the other replicas' it imported (latency.responses of
// /admin/signals, evaluated afresh when the last evaluation is over a
// second old).
func (g *gateway) responses(t *testing.T) int64 {
	t.Helper()
	var s struct {
		Latency struct {
			Responses int64 `json:"responses"`
		} `json:"latency"`
	}
	g.getJSON(t, "/admin/signals", &s)
	return s.Latency.Responses
}

// metric returns the value of one series of the gateway's /metrics, as
// the exposition writes it (name{labels}); 0 when it is not there.
func (g *gateway) metric(t *testing.T, series string) float64 {
	t.Helper()
	for line := range strings.Lines(string(g.get(t, "/metrics"))) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", series, line, err)
			}
			return f
		}
	}
	return 0
}

// backendState is the part of /admin/backends the tests read.
type backendState struct {
	Name     string `json:"name"`
	Healthy  bool   `json:"healthy"`
	Inflight int64  `json:"inflight"`
	Picks    int64  `json:"picks"`
}

func (g *gateway) backends(t *testing.T) map[string]backendState {
	t.Helper()
	var bs []backendState
	g.getJSON(t, "/admin/backends", &bs)
	out := map[string]backendState{}
	for _, b := range bs {
		out[b.Name] = b
	}
	return out
}

// metrics returns GET /metrics, for metricSum.
func (g *gateway) metrics(t *testing.T) []byte {
	t.Helper()
	return g.get(t, "/metrics")
}

// metricSum returns the sum of the samples of the metric name whose labels
// include want (pairs of name and value), from the Prometheus text format.
func metricSum(text []byte, name string, want ...string) float64 {
	var sum float64
	for line := range bytes.Lines(text) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' || !bytes.HasPrefix(line, []byte(name)) {
			continue
		}
		rest := line[len(name):]
		var labels []byte
		switch {
		case bytes.HasPrefix(rest, []byte("{")):
			end := bytes.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		case bytes.HasPrefix(rest, []byte(" ")):
		default:
			continue // a longer name with this prefix
		}
		ok := true
		for i := 0; i+1 < len(want); i += 2 {
			ok = ok && bytes.Contains(labels, fmt.Appendf(nil, "%s=%q", want[i], want[i+1]))
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(string(bytes.TrimSpace(rest)), &v); err == nil {
			sum += v
		}
	}
	return sum
}

// waitFor polls cond every 100 ms until it holds and returns how long that
// took; it fails the test after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(start)
}
