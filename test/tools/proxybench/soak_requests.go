package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The soak by request count ("CI runs a 50,000-request
// version"): BENCH_SOAK_REQUESTS=N test/bench/run -suite soak.
//
// wrk stops after a time, not after a number of requests, and on a shared
// two-core machine its rate moves with the neighbours, so a duration
// computed from a measured rate would soak a different number of requests
// each run, and a bound on growth would mean something else each time.
// Here a closed-loop load generator in the driver hands out request
// numbers from one counter and stops at exactly N: every run does the same
// work, however fast the machine, and a slow machine takes longer instead
// of testing less.
//
// Its lab is smaller than the proxy suite's and gives every analyzer work:
// two simulators (vigil sim, no delays) as backends, the first
// shadow-compared against the second (precision), each request asking for
// model bench-model with one of eight prompts and sampling settings
// (drift), half of them for token logprobs (confidence, output) and half
// streamed; Redis, Jaeger and vigil-full as in the proxy suite (100 %
// tracing, access log to a file). No nginx, wrk or vigil-min.
//
// The run: a warm-up of N/5 requests, rest, N requests sampled every
// soakEveryRequests, rest. At rest means the load's connections closed,
// vigil-full's goroutines and open files unchanged for a second while it
// used under 5 % of a core, then a garbage collection, forced by taking its
// heap profile (kept next to the report: `go tool pprof -base` of the two
// says what grew). The checks compare the two rest samples, so that they
// do not depend on where the garbage collector happened to be under load:
// every request answered whole; RSS growth ≤ soakMaxGrowthMiB; the
// backend connections kept ≤ one per request that can be in flight; and,
// those connections taken out, goroutines ≤ soakSlackGoroutines and open
// files ≤ soakSlackFDs above the warm-up's. Any FAIL fails the run
// (non-zero exit), after the report is written.

// soakEveryRequests is the sampling period of the soak by count: a 50,000
// request run lasts from half a minute to a minute and a half here.
const soakEveryRequests = 2 * time.Second

// soakMaxGrowthMiB bounds vigil-full's RSS growth from rest after the
// warm-up to rest after the load. Eleven runs of 50,000 requests here, on a
// two-core machine shared with other builds and tests, grew +3.2 to +11.2
// MiB, two with a hundred leaked goroutines and files +9.4 and +14.2: the Go
// heap's high-water mark rising under load (GOGC=200 holds up to three
// times the live heap) and windows that fill by design (drift reservoirs
// per 10-s bucket until analyzers.window is full, calibration entries until
// analyzers.calibration.max_pending). A deliberate leak of 256 bytes per
// request grew +42.6 and +43.1 MiB. 24 MiB keeps twice the largest clean
// growth.
const soakMaxGrowthMiB = 24

// soakSlackGoroutines and soakSlackFDs are how many goroutines and open
// files more than at rest after the warm-up still count as back to it,
// once the backend connections are taken out of both: nine runs here
// differed by 0 or −1. A leak of one goroutine per 6,000 requests, or one
// file per 12,500, exceeds them.
const (
	soakSlackGoroutines = 8
	soakSlackFDs        = 4
)

// soakSpansDropped bounds the share of spans the soak may drop: none
// dropped in 4 runs with export batches of 256 or 512, half with 64.
const soakSpansDropped = 0.05

// soakRequests returns N from BENCH_SOAK_REQUESTS: 0 (unset) runs the soak
// for -soak-duration instead.
func soakRequests() (int64, error) {
	v := strings.TrimSpace(os.Getenv("BENCH_SOAK_REQUESTS"))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("BENCH_SOAK_REQUESTS: want a number of requests, got %q", v)
	}
	return n, nil
}

// runSoakRequests runs the soak by request count in dir (runSoak made it
// and c.out): n requests after a warm-up. It returns an error when a
// check fails, once the report is written.
func runSoakRequests(ctx context.Context, c config, dir string, began time.Time, n int64) error {
	phase("starting two simulators, Redis, Jaeger and vigil-full")
	l, err := startSoakLab(c, dir)
	if err != nil {
		return err
	}
	defer l.ps.stopAll()
	// vigil-full keeps at most one connection per request that was in
	// flight to a backend at once: every load connection's, and the shadow
	// comparisons' and health checks' (analyzers.precision.concurrency is
	// 4, each comparison sending one request at a time to each backend;
	// one health check at a time), with room to spare.
	maxConns := len(l.backends) * (c.wrkConns + 8)
	full := l.byName[vigilFull]
	res := &soakResults{Name: fmt.Sprintf("soak-%d", n), Started: began.UTC().Format(time.RFC3339), Machine: machineInfo(c)}
	res.Machine.Command = cmp.Or(res.Machine.Command, fmt.Sprintf("BENCH_SOAK_REQUESTS=%d test/bench/run -suite soak", n))
	ld := newSoakLoad(full.base, c.wrkConns)
	defer ld.client.CloseIdleConnections()
	count := func(r soakCount) {
		res.Errors += r.errors
		res.FirstErrors = append(res.FirstErrors, r.first[:min(len(r.first), 5-len(res.FirstErrors))]...)
	}

	warm := max(n/5, 1)
	phase("warm-up: %d requests on %d connections", warm, ld.conns)
	w := ld.run(ctx, 0, warm)
	if err := ctx.Err(); err != nil {
		return err
	}
	res.WarmupRequests = w.requests
	count(w)
	phase("rest")
	before := l.rest(ctx, ld, filepath.Join(c.out, res.Name+"-heap-warm.pprof"), &res.Notes)
	before.Note = "at rest after the warm-up"
	before.T = 0
	res.Samples = append(res.Samples, before)
	before.print()

	phase("soak: %d requests on %d connections (a quarter each: plain, streamed, with logprobs, streamed with logprobs), sampled every %s",
		n, ld.conns, soakEveryRequests)
	cpu0 := l.cpuByProcess()
	t0 := time.Now()
	done := make(chan soakCount, 1)
	go func() { done <- ld.run(ctx, warm, n) }()
	tick := time.NewTicker(soakEveryRequests)
	defer tick.Stop()
	var load soakCount
loop:
	for {
		select {
		case load = <-done:
			break loop
		case <-tick.C:
			s := sampleOf(full, t0)
			res.Samples = append(res.Samples, s)
			s.print()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	res.Notes = append(res.Notes, cpuNote(cpu0, l.cpuByProcess(), load.requests))
	res.DurationS = load.elapsed.Seconds()
	res.Requests = load.requests
	res.RPS = float64(load.requests) / load.elapsed.Seconds()
	count(load)
	phase("rest")
	after := l.rest(ctx, ld, filepath.Join(c.out, res.Name+"-heap-end.pprof"), &res.Notes)
	after.Note = "at rest after the load"
	after.T = time.Since(t0).Seconds()
	res.Samples = append(res.Samples, after)
	after.print()

	res.GrowthMiB = inMiB(after.RSSBytes - before.RSSBytes)
	res.Load = fmt.Sprintf("vigil-full (every analyzer, 100 %% tracing to Jaeger, Redis, access log to a file) in front of two simulators, "+
		"the first shadow-compared against the second, under the driver's closed-loop load on %d connections: %d requests after a warm-up of %d, "+
		"a quarter each plain, streamed, with logprobs and streamed with logprobs; %d answered whole in %.1f s (%.0f req/s), %d errors. "+
		"The checks compare the samples at rest (after a garbage collection) after the warm-up and after the load.",
		ld.conns, n, warm, res.Requests, res.DurationS, res.RPS, res.Errors)
	res.check(res.Requests == n && res.Errors == 0, "requests: %d of %d answered whole, %d errors (warm-up included)", res.Requests, n, res.Errors)
	res.check(res.GrowthMiB <= soakMaxGrowthMiB, "RSS at rest: %.1f → %.1f MiB, %+.1f MiB over %d requests (bound ≤ %d MiB; Go heap in use %.1f → %.1f MiB)",
		inMiB(before.RSSBytes), inMiB(after.RSSBytes), res.GrowthMiB, n, soakMaxGrowthMiB, before.HeapInuse/(1<<20), after.HeapInuse/(1<<20))
	var maxG, maxF float64
	for _, s := range res.Samples {
		maxG, maxF = max(maxG, s.Goroutines), max(maxF, s.OpenFDs)
	}
	// net/http's Transport serves each kept-alive HTTP/1.1 connection
	// with two goroutines (readLoop, writeLoop) and one file; how many it
	// keeps depends on how many requests happened to be in flight to each
	// backend at once (from 2 fewer to 21 more after the load than after
	// the warm-up here), so they are counted apart and bounded by maxConns.
	ownG := func(s soakSample) float64 { return s.Goroutines - 2*s.BackendConns }
	ownF := func(s soakSample) float64 { return s.OpenFDs - s.BackendConns }
	res.check(after.BackendConns <= float64(maxConns), "backend connections kept at rest: %.0f → %.0f (bound: one per request that can be in flight, %d)",
		before.BackendConns, after.BackendConns, maxConns)
	res.check(ownG(after) <= ownG(before)+soakSlackGoroutines, "goroutines at rest: %.0f → %.0f, less two per backend connection %.0f → %.0f (max %.0f under load; bound: warm-up's + %d)",
		before.Goroutines, after.Goroutines, ownG(before), ownG(after), maxG, soakSlackGoroutines)
	res.check(ownF(after) <= ownF(before)+soakSlackFDs, "open files at rest: %.0f → %.0f, less the backend connections %.0f → %.0f (max %.0f under load; bound: warm-up's + %d)",
		before.OpenFDs, after.OpenFDs, ownF(before), ownF(after), maxF, soakSlackFDs)
	if m, err := scrape(full.base + "/metrics"); err == nil {
		// Every span reaches Jaeger: dropped ones are counted, and the
		// export keeps up with the load (with batches of 64 spans it
		// dropped half).
		exported, dropped := m["vigil_tracing_spans_exported_total"], m["vigil_tracing_spans_dropped_total"]
		res.check(exported > 0 && dropped <= soakSpansDropped*(exported+dropped), "spans: %.0f exported to Jaeger, %.0f dropped (bound: %.0f %%)",
			exported, dropped, 100*soakSpansDropped)
		res.SpansNote = fmt.Sprintf("analyzers: %.0f responses with logprobs read, %.0f precision comparisons, %.0f analysis events dropped",
			m["vigil_confidence_response_mean_logprob_count"], m["vigil_precision_comparisons_total"], m["vigil_observer_dropped_events_total"])
	}
	if b, err := os.ReadFile(l.accessLog); err == nil {
		res.AccessLines = int64(bytes.Count(b, []byte("\n")))
	}
	res.Notes = append(res.Notes, l.fullNotes()...)
	fmt.Println()
	for _, ch := range res.Checks {
		fmt.Println("  " + ch)
	}
	if err := writeSoak(c.out, res, time.Since(began)); err != nil {
		return err
	}
	if res.Failed > 0 {
		return fmt.Errorf("soak: FAIL: %d of %d checks failed (%s)", res.Failed, len(res.Checks), filepath.Join(c.out, res.Name+".md"))
	}
	fmt.Println("soak: PASS")
	return nil
}

// cpuByProcess returns the CPU time used so far by each process of the
// lab, and by the driver (the load generator), by name; a process whose
// time cannot be read is left out.
func (l *soakLab) cpuByProcess() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, p := range l.ps.list {
		if d, err := cpuTime(p.pid()); err == nil {
			out[p.name] = d
		}
	}
	if d, err := cpuTime(os.Getpid()); err == nil {
		out["driver"] = d
	}
	return out
}

// cpuNote says how much CPU each process used between two readings of
// cpuByProcess, per request of n: where a slow run's time went.
func cpuNote(before, after map[string]time.Duration, n int64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		parts = append(parts, fmt.Sprintf("%s %.1f s (%.0f µs/request)", name, d.Seconds(), float64(d.Microseconds())/float64(max(n, 1))))
	}
	return "CPU over the load: " + strings.Join(parts, ", ") + "."
}

// rest brings vigil-full to rest and samples it: the load's idle
// connections closed, then, for at most 20 s, until its goroutines and
// open files have not changed for a second in which it used under 5 % of a
// core; then a garbage collection, by taking its heap profile into prof
// (when it serves /debug/pprof). What went wrong goes to notes: the
// sample is taken anyway.
func (l *soakLab) rest(ctx context.Context, ld *soakLoad, prof string, notes *[]string) soakSample {
	ld.client.CloseIdleConnections()
	full := l.byName[vigilFull]
	const poll = time.Second
	var prev [2]float64
	rested := false
	for deadline := time.Now().Add(20 * time.Second); ctx.Err() == nil && time.Now().Before(deadline); {
		c0, err0 := sumCPU(full.pids())
		sleep(ctx, poll)
		c1, err1 := sumCPU(full.pids())
		m, err := scrape(full.base + "/metrics")
		if err != nil || err0 != nil || err1 != nil {
			continue
		}
		cur := [2]float64{m["go_goroutines"], m["process_open_fds"]}
		if cur == prev && c1-c0 < poll/20 {
			rested = true
			break
		}
		prev = cur
	}
	if !rested {
		*notes = append(*notes, "vigil-full did not come to rest in 20 s before the sample "+filepath.Base(prof)+" names.")
	}
	if l.pprof {
		f, err := os.Create(prof)
		if err == nil {
			var code int
			code, err = pprofGet(ctx, full.base+"/debug/pprof/heap?gc=1", f)
			f.Close()
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("status %d", code)
			}
		}
		if err != nil {
			*notes = append(*notes, fmt.Sprintf("%s: %v (no garbage collection before that sample)", filepath.Base(prof), err))
		}
	} else {
		*notes = append(*notes, "This vigil does not serve /debug/pprof: no garbage collection before the samples at rest.")
	}
	s := sampleOf(full, time.Now())
	n, err := backendConns(full.pids()[0], l.backends)
	if err != nil {
		*notes = append(*notes, "counting vigil-full's backend connections: "+err.Error())
	}
	s.BackendConns = float64(n)
	return s
}

// backendConns counts pid's established TCP connections to addrs
// (host:port): the sockets among its open files whose remote port, in
// /proc/PID/net/tcp, is one of addrs'.
func backendConns(pid int, addrs []string) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if in, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(in, "]")] = true
		}
	}
	ports := map[string]bool{}
	for _, a := range addrs {
		p, err := strconv.Atoi(portOf(a))
		if err != nil {
			return 0, fmt.Errorf("backend address %q: %w", a, err)
		}
		ports[fmt.Sprintf("%04X", p)] = true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		// sl local_address rem_address st … inode: addresses are
		// HEXIP:HEXPORT, st 01 is ESTABLISHED.
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
			continue
		}
		if _, port, _ := strings.Cut(f[2], ":"); ports[port] {
			n++
		}
	}
	return n, nil
}

// soakConf is vigil-full for the soak by count: the defaults (every
// analyzer, access log on), backend a shadow-compared against backend ref
// (analyzers.precision samples 5 % of a's traffic by default), every
// request traced, shared state in Redis.
const soakConf = `listen: %s
backends:
  - name: a
    url: http://%s
    reference: ref
  - name: ref
    url: http://%s
` + fullFeatures

// soakLab is the soak by count's lab.
type soakLab struct {
	*lab
	backends []string // the simulators' host:port
}

// startSoakLab starts the soak by count's processes on free ports of
// 127.0.0.1 and waits until each serves: two simulators (sim-a with
// quantization-like noise on its logprobs, sim-ref without), Redis, Jaeger
// and vigil-full.
func startSoakLab(c config, dir string) (*soakLab, error) {
	l := &lab{ps: &procs{dir: dir}, byName: map[string]*target{}}
	ok := false
	defer func() {
		if !ok {
			l.ps.stopAll()
		}
	}()
	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	simA, simRef, redisAddr, otlpAddr, queryHTTP, queryGRPC, fullAddr := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5], ports[6]
	env := cleanEnv()

	for _, s := range []struct {
		name, addr string
		extra      []string
	}{
		{"sim-a", simA, []string{"--noise", "0.05", "--seed", "2"}},
		{"sim-ref", simRef, nil},
	} {
		args := append([]string{"sim", "--listen", s.addr, "--model", mockModel, "--ttft", "0", "--itl", "0"}, s.extra...)
		p, err := l.ps.start(s.name, c.vigil, args, env, nil)
		if err != nil {
			return nil, err
		}
		if err := p.waitReady(10*time.Second, func() bool { return httpOK("http://" + s.addr + "/health") }); err != nil {
			return nil, err
		}
	}

	rd, jg, err := l.startRedisJaeger(c, dir, env, redisAddr, otlpAddr, queryHTTP, queryGRPC)
	if err != nil {
		return nil, err
	}

	yaml := fmt.Sprintf(soakConf, fullAddr, simA, simRef, redisAddr)
	if l.pprof, err = pprofSupported(c.vigil, dir, yaml); err != nil {
		return nil, err
	}
	if l.pprof {
		yaml += pprofKey
	}
	fullEnv := otlpEnv(env, otlpAddr)
	vfull, err := l.startVigil(c, dir, vigilFull, fullAddr, yaml, fullEnv, true)
	if err != nil {
		return nil, err
	}
	l.add(&target{
		name: vigilFull, base: "http://" + fullAddr,
		pids: func() []int { return []int{vfull.pid()} },
		aux:  map[string]int{"jaeger": jg.pid(), "redis": rd.pid()},
	})
	ok = true
	return &soakLab{lab: l, backends: []string{simA, simRef}}, nil
}

// soakBody is one request of the soak by count.
type soakBody struct {
	kind           string // plain, stream, logprobs, stream+logprobs
	stream, lprobs bool
	json           []byte
}

// soakBodies are the soak's requests; request i sends soakBodies[i%32]:
// the four kinds in turn, each with eight prompts of different lengths,
// lengths of answer and temperatures, so that the drift analyzer's
// features vary.
var soakBodies = func() []soakBody {
	prompts := []string{
		"Say hello in one short sentence.",
		"What is the capital of France?",
		"Summarize the plot of a heist film in three sentences, without naming it.",
		"Translate 'good morning, how did you sleep?' into German, Spanish and Italian.",
		"List five prime numbers greater than one hundred and say how you checked them.",
		"Write a haiku about a gateway that watches every request go by.",
		"Explain why the sky is blue to a curious ten-year-old, with one everyday example and without equations.",
		"Give me a packing list for two days of hiking in the mountains in autumn, grouped by clothing, food and safety, with a line on each item.",
	}
	var out []soakBody
	for p, prompt := range prompts {
		for _, k := range []soakBody{{kind: "plain"}, {kind: "stream", stream: true}, {kind: "logprobs", lprobs: true}, {kind: "stream+logprobs", stream: true, lprobs: true}} {
			extra := ""
			if k.stream {
				extra += `,"stream":true`
			}
			if k.lprobs {
				extra += `,"logprobs":true,"top_logprobs":5`
			}
			k.json = fmt.Appendf(nil, `{"model":%q,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":%q}],"max_tokens":%d,"temperature":%.1f%s}`,
				mockModel, prompt, 4+p, 0.2+0.1*float64(p), extra)
			out = append(out, k)
		}
	}
	return out
}()

// soakLoad is the closed-loop load generator of the soak by count: conns
// workers each send a request, read its answer whole, and send the next,
// on kept-alive connections. Its client is safe for concurrent use; run is
// called by one goroutine at a time.
type soakLoad struct {
	base   string
	conns  int
	client *http.Client
}

func newSoakLoad(base string, conns int) *soakLoad {
	return &soakLoad{base: base, conns: conns, client: &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: conns,
			DisableCompression:  true,
		},
	}}
}

// soakCount is what one run of the load did.
type soakCount struct {
	requests, errors int64 // answered whole; failed
	first            []string
	elapsed          time.Duration
}

// run sends requests from, from+1, …, from+n−1 (their numbers choose their
// bodies) and returns when all are answered or ctx is done. Requests cut
// short by ctx are not counted.
func (ld *soakLoad) run(ctx context.Context, from, n int64) soakCount {
	var (
		next, ok, failed atomic.Int64
		mu               sync.Mutex
		first            []string
		wg               sync.WaitGroup
	)
	next.Store(from)
	start := time.Now()
	for range ld.conns {
		wg.Go(func() {
			var buf bytes.Buffer
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= from+n {
					return
				}
				err := ld.one(ctx, i, &buf)
				switch {
				case err == nil:
					ok.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
					mu.Lock()
					if len(first) < 5 {
						first = append(first, err.Error())
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return soakCount{requests: ok.Load(), errors: failed.Load(), first: first, elapsed: time.Since(start)}
}

// one sends request i, reads the answer into buf and checks it is whole: a
// 200, a stream ending with [DONE], the logprobs asked for.
func (ld *soakLoad) one(ctx context.Context, i int64, buf *bytes.Buffer) error {
	b := soakBodies[i%int64(len(soakBodies))]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ld.base+chatPath, bytes.NewReader(b.json))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := ld.client.Do(req)
	if err != nil {
		return fmt.Errorf("request %d (%s): %w", i, b.kind, err)
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("request %d (%s): reading the answer: %w", i, b.kind, err)
	}
	body := buf.Bytes()
	switch {
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("request %d (%s): status %d: %.200s", i, b.kind, resp.StatusCode, body)
	case b.stream && !bytes.HasSuffix(body, []byte("data: [DONE]\n\n")):
		return fmt.Errorf("request %d (%s): the stream does not end with [DONE]: …%s", i, b.kind, body[max(0, len(body)-200):])
	case !bytes.Contains(body, []byte(`"choices"`)):
		return fmt.Errorf("request %d (%s): no choices: %.200s", i, b.kind, body)
	case b.lprobs && !bytes.Contains(body, []byte(`"top_logprobs"`)):
		return fmt.Errorf("request %d (%s): no top_logprobs: %.200s", i, b.kind, body)
	}
	return nil
}
