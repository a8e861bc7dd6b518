package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNearestRank(t *testing.T) {
	sorted := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want int32
	}{
		{0, 1}, {0.5, 5}, {0.9, 9}, {0.99, 10}, {1, 10},
	} {
		if got := nearestRank(sorted, tc.q); got != tc.want {
			t.Errorf("nearestRank(1..10, %g) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := nearestRank([]int32(nil), 0.5); got != 0 {
		t.Errorf("nearestRank(nil) = %d, want 0", got)
	}
	// The same rule as percentile, which the proxy suite uses.
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7}
	for _, q := range []float64{0.1, 0.5, 0.99} {
		if a, b := nearestRank(ds, q), percentile(ds, q); a != b {
			t.Errorf("q %g: nearestRank %v, percentile %v", q, a, b)
		}
	}
}

func TestWantsLogprobs(t *testing.T) {
	for _, share := range []float64{0, 0.1, 0.25, 0.5, 1} {
		n := 0
		for id := range 1000 {
			if wantsLogprobs(id, share) {
				n++
			}
		}
		if want := int(share * 1000); n != want {
			t.Errorf("share %g: %d of 1000 streams ask for logprobs, want %d", share, n, want)
		}
	}
	// Spread evenly: at a half, every other stream.
	var got []bool
	for id := range 4 {
		got = append(got, wantsLogprobs(id, 0.5))
	}
	if want := []bool{false, true, false, true}; !slices.Equal(got, want) {
		t.Errorf("share 0.5: %v, want %v", got, want)
	}
}

func TestParseLevels(t *testing.T) {
	got, err := parseLevels(" 5000,1000, 10000,1000")
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{1000, 5000, 10000}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"", "0", "x", "1000,-1"} {
		if _, err := parseLevels(bad); err == nil {
			t.Errorf("parseLevels(%q): no error", bad)
		}
	}
}

func TestMaxProxiedStreams(t *testing.T) {
	// Two sockets per stream: 20,000 open files hold 9,872 streams, not
	// 10,000.
	if got := maxProxiedStreams(20000); got != (20000-streamsFDOverhead)/2 {
		t.Errorf("maxProxiedStreams(20000) = %d", got)
	}
	if got := maxProxiedStreams(65536); got < 10000 {
		t.Errorf("maxProxiedStreams(65536) = %d, want ≥ 10000", got)
	}
	if got := maxProxiedStreams(100); got != 0 {
		t.Errorf("maxProxiedStreams(100) = %d, want 0", got)
	}
}

func TestStreamsNginxConf(t *testing.T) {
	conf := streamsNginxConf("/w", "127.0.0.1:1", "127.0.0.1:2", 20000, 5000)
	for _, want := range []string{"worker_rlimit_nofile 20000;", "worker_connections 10512;", "listen 127.0.0.1:2 reuseport;", "server 127.0.0.1:1;"} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q:\n%s", want, conf)
		}
	}
	// Never more connections than open files.
	if conf := streamsNginxConf("/w", "a", "b", 20000, 10000); !strings.Contains(conf, "worker_connections 19936;") {
		t.Errorf("at 10,000 streams under 20,000 files:\n%s", conf)
	}
}

func TestMockLogprobsIsJSON(t *testing.T) {
	m := newMock(3, 0)
	for i, ev := range m.logprobEvents {
		data := strings.TrimSpace(strings.TrimPrefix(string(ev), "data:"))
		var chunk struct {
			Choices []struct {
				Logprobs struct {
					Content []struct {
						Token       string            `json:"token"`
						TopLogprobs []json.RawMessage `json:"top_logprobs"`
					} `json:"content"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("event %d: %v\n%s", i, err, data)
		}
		if got := len(chunk.Choices[0].Logprobs.Content[0].TopLogprobs); got != mockTopLogprobs {
			t.Errorf("event %d: %d alternatives, want %d", i, got, mockTopLogprobs)
		}
	}
}

// TestStreamLoad runs the raw client against the mock: every stream whole,
// every event counted, the share asked for with logprobs, a steady window.
func TestStreamLoad(t *testing.T) {
	const chunks = 5
	srv := httptest.NewServer(newMock(chunks, time.Millisecond).handler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cfg := streamLoadConfig{addr: addr, clients: 8, perClient: 3, chunks: chunks, ramp: 2 * time.Millisecond,
		logprobShare: 0.5, streamTimeout: 10 * time.Second}
	for i, lp := range []bool{false, true} {
		cfg.requestTemplates[i] = rawRequest(addr, "", streamRequestBody(chunks, lp))
	}
	r := runStreamLoad(context.Background(), cfg)
	if r.Errors != 0 || r.Streams != 24 {
		t.Fatalf("%d streams, %d errors (%v), want 24 and 0", r.Streams, r.Errors, r.ErrorExamples)
	}
	// Content chunks, usage and [DONE] per stream.
	if r.ContentEvents != 24*chunks || r.Events != 24*(chunks+2) {
		t.Errorf("%d events, %d with content; want %d and %d", r.Events, r.ContentEvents, 24*(chunks+2), 24*chunks)
	}
	if r.LogprobStream != 12 {
		t.Errorf("%d streams asked for logprobs, want 12", r.LogprobStream)
	}
	if r.GapP50Ms < 1 || r.DurationP50Ms < float64(chunks-1) {
		t.Errorf("gap p50 %.3f ms, duration p50 %.3f ms: shorter than the mock's pacing", r.GapP50Ms, r.DurationP50Ms)
	}
	if r.SteadyFromNs == 0 || r.SteadyToNs <= r.SteadyFromNs {
		t.Errorf("no steady window: %d to %d", r.SteadyFromNs, r.SteadyToNs)
	}

	// The warm-up's short streams (the mock's X-Bench-Chunks header).
	cfg.warmup, cfg.warmupChunks = true, 2
	extra := benchChunksHeader + ": 2\r\n"
	for i, lp := range []bool{false, true} {
		cfg.requestTemplates[i] = rawRequest(addr, extra, streamRequestBody(chunks, lp))
	}
	if r := runStreamLoad(context.Background(), cfg); r.Errors != 0 || r.ContentEvents != 24*2 {
		t.Errorf("warm-up: %d errors (%v), %d content events, want 0 and 48", r.Errors, r.ErrorExamples, r.ContentEvents)
	}
}

// TestStreamsSummary checks the figures taken from runs: per stream,
// held RSS, added against direct in the same round, ratios within a
// round, and the verdicts.
func TestStreamsSummary(t *testing.T) {
	at := func(s float64) time.Time { return time.Unix(100, 0).Add(time.Duration(s * float64(time.Second))) }
	load := func(gap99, dur50 float64, errors int) streamLoadResult {
		return streamLoadResult{Streams: 3000, Errors: errors, Events: 606000, GapP50Ms: 20, GapP99Ms: gap99,
			DurationP50Ms: dur50, DurationP99Ms: dur50, SteadyFromNs: at(2).UnixNano(), SteadyToNs: at(8).UnixNano()}
	}
	mk := func(peer string, cpuS float64, lr streamLoadResult, idle, peak int64) *streamsRun {
		run := &streamsRun{Round: 1, Level: 1000, Peer: peer, Load: lr, RSSIdle: idle}
		samples := []memSample{{RSS: idle, at: at(0)}, {RSS: peak, at: at(3)}, {RSS: peak - 4<<20, at: at(5)}, {RSS: peak - 2<<20, at: at(7)}, {RSS: idle, at: at(9)}}
		run.fill(samples, time.Duration(cpuS*float64(time.Second)), 0, 0, nil, nil)
		return run
	}
	r := &streamsResults{
		Settings: streamsSettingsJSON{Levels: []int{1000}, Peers: streamsPeers, Rounds: 1, Chunks: 200, GapMs: 20},
		Runs: []*streamsRun{
			mk(direct, 3, load(21, 4000, 0), 10<<20, 30<<20),
			mk(nginx, 6.06, load(21.5, 4010, 0), 30<<20, 50<<20),
			mk(goProxy, 9.09, load(21.8, 4020, 0), 10<<20, 110<<20),
			mk(vigilMin, 12.12, load(22, 4030, 0), 40<<20, 140<<20),
			mk(vigilFull, 6.6, load(21.9, 4040, 0), 50<<20, 100<<20),
		},
	}
	full := r.Runs[4]
	if full.RSSPeak != 100<<20 || full.RSSHeld != 98<<20 || full.HeldSamples != 3 {
		t.Errorf("vigil-full: peak %d, held %d (%d samples); want %d, %d (3)", full.RSSPeak, full.RSSHeld, full.HeldSamples, 100<<20, 98<<20)
	}
	if got := full.MemPerStreamKiB; got != 51.2 {
		t.Errorf("memory per stream %.2f KiB, want 51.2", got)
	}
	r.summarize()
	s, ok := r.summary(1000, vigilFull)
	if !ok {
		t.Fatal("no summary of vigil-full")
	}
	approx := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	approx("CPU per 1k events", s.CPUPer1kMs, 6600.0/606)
	approx("vs nginx", s.VsNginx, 6.6/6.06)
	approx("added gap p99", s.AddedGapP99Ms, 0.9)
	approx("added duration p50", s.AddedDurP50Ms, 40)
	if s.AddedVs != direct {
		t.Errorf("added against %q, want direct", s.AddedVs)
	}
	var got []string
	for _, c := range r.checks() {
		got = append(got, c.verdict())
	}
	// CPU 1.09× nginx: PASS; 51.2 KiB: PASS; +0.9 ms: PASS; the
	// 10,000-stream target: not run.
	if want := []string{"PASS", "PASS", "PASS", "—"}; !slices.Equal(got, want) {
		t.Errorf("verdicts %v, want %v", got, want)
	}
}

// TestProxyChecksAgainstGoProxy checks the proxy suite's request-path
// targets against go-proxy: vigil-full ≥ 0.9× its req/s, vigil-min ≥
// 1.2×, added p99 ≤ its + 0.5 ms, added TTFT ≤ its + 0.1 ms.
func TestProxyChecksAgainstGoProxy(t *testing.T) {
	rates := func(p99 float64) []rateSummary { return []rateSummary{{Rate: 1000, AddedP99Ms: p99}} }
	r := &results{Targets: []targetSummary{
		{Name: direct, Rates: rates(0)},
		{Name: nginx, Rates: rates(0.4)},
		{Name: goProxy, MaxRPS: 20000, Rates: rates(1.0), StreamAddedTTFTMs: 0.3},
		{Name: vigilMin, VsGoProxy: 1.1, Rates: rates(1.4), StreamAddedTTFTMs: 0.35},
		{Name: vigilFull, VsGoProxy: 0.95, Rates: rates(1.6), StreamAddedTTFTMs: 0.45},
	}}
	got := map[string]bool{}
	for _, c := range r.checks(config{rates: []int{1000}}) {
		if strings.Contains(c.Name, "go-proxy") {
			got[c.Target+": "+c.Name] = c.NowPass
		}
	}
	want := map[string]bool{
		"vigil-full: max throughput vs go-proxy":          true,
		"vigil-full: added p99 at 1000 req/s vs go-proxy": false,
		"vigil-full: stream: added TTFT p50 vs go-proxy":  false,
		"vigil-min: max throughput vs go-proxy":           false,
		"vigil-min: added p99 at 1000 req/s vs go-proxy":  true,
		"vigil-min: stream: added TTFT p50 vs go-proxy":   true,
	}
	if len(got) != len(want) {
		t.Fatalf("checks against go-proxy: %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: pass %v, want %v", k, got[k], v)
		}
	}
}
