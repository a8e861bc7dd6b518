package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
)

// syncBuffer is a bytes.Buffer safe for the log handler and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// lines returns the JSON access log lines written so far, decoded.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("access log line is not JSON: %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// testGateway is a gateway served over real HTTP for one test.
type testGateway struct {
	*Server
	URL    string
	access *syncBuffer
	net    *testutil.Network // where URL is served; nil: the real network
	hc     *http.Client      // reaches URL
}

// get GETs path (with its query) from g and returns the status and the
// whole body; a transport error fails the test.
func (g *testGateway) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	resp, err := g.hc.Get(g.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", path, err)
	}
	return resp.StatusCode, b
}

// post POSTs body to path of g as application/json and returns the
// status, the headers and the whole body; a transport error fails the test.
func (g *testGateway) post(t *testing.T, path, body string) (int, http.Header, []byte) {
	t.Helper()
	resp, err := g.hc.Post(g.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// startGateway serves a gateway over the given backends until the test
// ends. mutate may adjust the config first.
func startGateway(t *testing.T, backends []config.Backend, mutate func(*config.Config), opts ...func(*Options)) *testGateway {
	t.Helper()
	return serveGateway(t, backends, mutate, func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}, opts...)
}

// startGatewayIn serves a gateway on the in-memory network n, reaching its
// backends through n, until the test ends: for tests in a synctest bubble.
func startGatewayIn(t *testing.T, n *testutil.Network, backends []config.Backend, mutate func(*config.Config), opts ...func(*Options)) *testGateway {
	t.Helper()
	tr := n.Transport()
	tr.MaxIdleConnsPerHost = 256
	opts = append(opts, func(o *Options) {
		tr.ResponseHeaderTimeout = o.Config.Limits.UpstreamTimeout // as New's own transport has
		o.Transport = tr
	})
	gw := serveGateway(t, backends, mutate, func(h http.Handler) string { return n.Serve(t, h) }, opts...)
	gw.net, gw.hc = n, n.Client()
	t.Cleanup(gw.hc.CloseIdleConnections)
	return gw
}

// startSimIn is startSim on the in-memory network n.
func startSimIn(t *testing.T, n *testutil.Network, model string, knobs func(*sim.Knobs)) (*sim.Server, string) {
	t.Helper()
	s := newSim(model, knobs)
	return s, n.Serve(t, s.Handler())
}

// serveGateway runs a gateway until the test ends, serving it with serve,
// which returns its base URL.
func serveGateway(t *testing.T, backends []config.Backend, mutate func(*config.Config), serve func(http.Handler) string, opts ...func(*Options)) *testGateway {
	t.Helper()
	cfg := config.Default()
	cfg.Backends = backends
	cfg.Listen = "127.0.0.1:0" // loopback: the admin API may go without a token
	cfg.Health.Interval = 0    // tests drive health explicitly
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.ValidateServe(); err != nil {
		t.Fatalf("config: %v", err)
	}
	access := &syncBuffer{}
	o := Options{
		Config:    cfg,
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		AccessLog: slog.New(accesslog.NewHandler(access)),
	}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return &testGateway{Server: s, URL: serve(s.Handler()), access: access, hc: http.DefaultClient}
}

// startSim serves a simulator with a fixed created time, so that responses
// are byte-for-byte reproducible.
func startSim(t *testing.T, model string, knobs func(*sim.Knobs)) (*sim.Server, string) {
	t.Helper()
	s := newSim(model, knobs)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func newSim(model string, knobs func(*sim.Knobs)) *sim.Server {
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = time.Millisecond, 0
	if knobs != nil {
		knobs(&k)
	}
	return sim.New(sim.Options{Model: model, Seed: 42, Created: 1764400000, Knobs: k})
}

func backend(name, url string, models ...string) config.Backend {
	return config.Backend{Name: name, URL: url, Kind: "openai", Models: models, Weight: 100}
}

func tgiBackend(name, url string) config.Backend {
	b := backend(name, url, "tgi-model") // so OpenAI routes for other models avoid it
	b.Kind = "tgi"
	return b
}

// post and waitFor keep their short names for the many gateway tests that
// call them; the helpers themselves are shared with other packages' tests.
var (
	post    = testutil.Post
	waitFor = testutil.WaitFor
)
