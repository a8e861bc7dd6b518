package main

// The stream suite (-suite streams): thousands of long SSE streams held at
// once, as an LLM fleet's gateway holds them. The mock streams -streams-chunks
// chat.completion.chunk events -streams-gap apart (logprobs on a share of
// them); at each concurrency level every peer (the mock directly, nginx,
// go-proxy, vigil-min, vigil-full) is started afresh, warmed up, measured
// idle, loaded by the load generator (streams_load.go, its own process),
// sampled every streamsSampleEvery while the load runs, measured again once
// idle, and stopped. Rounds interleave the peers, each starting with
// another; streams_report.go takes medians over rounds, evaluates the
// targets and writes streams.md, streams.json and streams.png.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const suiteStreams = "streams"

// streamsSettings are the stream suite's knobs, set once from flags.
type streamsSettings struct {
	levels    string // concurrent streams, comma-separated
	chunks    int
	gap       time.Duration
	logprobs  float64 // share of streams that ask for logprobs
	rounds    int
	perClient int    // streams each client sends back to back
	peers     string // comma-separated; all when empty
}

func (s streamsSettings) validate() error {
	var errs []error
	if _, err := parseLevels(s.levels); err != nil {
		errs = append(errs, err)
	}
	if s.chunks < 2 {
		errs = append(errs, errors.New("-streams-chunks must be at least 2"))
	}
	if s.gap <= 0 {
		errs = append(errs, errors.New("-streams-gap must be positive"))
	}
	if s.logprobs < 0 || s.logprobs > 1 {
		errs = append(errs, errors.New("-streams-logprobs must be within [0, 1]"))
	}
	if s.rounds < 1 {
		errs = append(errs, errors.New("-streams-rounds must be at least 1"))
	}
	if s.perClient < 2 {
		errs = append(errs, errors.New("-streams-per-client must be at least 2 (with one, no moment has every stream in flight)"))
	}
	if _, err := selectStreamsPeers(s.peers); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// parseLevels reads "1000,5000,10000" into ascending distinct levels.
func parseLevels(list string) ([]int, error) {
	var out []int
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-streams-levels: bad level %q", v)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("-streams-levels: none given")
	}
	slices.Sort(out)
	return out, nil
}

// streamsPeers are the peers, in the order of every table.
var streamsPeers = []string{direct, nginx, goProxy, vigilMin, vigilFull}

func selectStreamsPeers(list string) ([]string, error) {
	if strings.TrimSpace(list) == "" {
		return streamsPeers, nil
	}
	return selectByID(list, streamsPeers, func(s string) string { return s }, "-streams-peers")
}

const (
	// streamsSampleEvery is how often the driver reads the peer's RSS
	// while the load runs; the goroutine count (a scrape of /metrics,
	// which costs the peer CPU) every fourth time.
	streamsSampleEvery = 250 * time.Millisecond
	// streamsFDOverhead is what a proxy process holds open besides two
	// sockets per stream (listeners, Redis, the span exporter, logs,
	// health checks, idle backend connections), with room to spare.
	streamsFDOverhead = 256
	// streamsWarmupClients each send two short streams before a peer is
	// measured idle, so that idle means warm: code paged in, pools made.
	streamsWarmupClients = 16
)

// maxProxiedStreams is the most streams a proxy process holds under an
// open-file limit of nofile: two sockets each, client and backend.
func maxProxiedStreams(nofile uint64) int {
	if nofile <= streamsFDOverhead {
		return 0
	}
	return int((nofile - streamsFDOverhead) / 2)
}

// streamsLab is what lives for the whole suite: the mock, Redis and
// Jaeger; the peers are started for each measurement.
type streamsLab struct {
	c         config
	dir       string
	self      string
	env       []string
	ps        *procs
	mock      *proc
	mockAddr  string
	redis     *proc
	jaeger    *proc
	redisAddr string
	otlpAddr  string
	jaegerAPI string
	nofile    uint64
	// maxConns is the Vigils' limits.max_connections: 0 leaves the
	// default, which a level close to it would fill (the driver's
	// /metrics scrape would then wait for a free slot).
	maxConns int
	pprof    bool
	notes    []string
}

// runStreamsSuite runs the stream suite and writes its report. An error
// means the harness failed; targets missed are a report, not an error.
func runStreamsSuite(ctx context.Context, c config) error {
	began := time.Now()
	s := c.streamSuite
	levels, err := parseLevels(s.levels)
	if err != nil {
		return err
	}
	peers, err := selectStreamsPeers(s.peers)
	if err != nil {
		return err
	}
	if err := clearReport(c, "streams"); err != nil {
		return err
	}
	if olds, _ := filepath.Glob(filepath.Join(c.out, "streams-vigil-full-*")); len(olds) > 0 {
		for _, f := range olds {
			os.Remove(f)
		}
	}
	dir, cleanup, err := workDir(c)
	if err != nil {
		return err
	}
	defer cleanup()

	l := &streamsLab{c: c, dir: dir, env: cleanEnv(), ps: &procs{dir: dir}}
	defer l.ps.stopAll()
	if l.self, err = os.Executable(); err != nil {
		return err
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	// Capped: an unlimited hard limit is not a number nginx takes.
	l.nofile = min(lim.Max, 1<<20)
	// Every process here gets the hard limit: Go raises its own soft limit
	// to it, and nginx is told (worker_rlimit_nofile). A level a proxy
	// cannot hold under it is lowered for every peer, so that they stay
	// comparable, and the report says so.
	if most := maxProxiedStreams(l.nofile); levels[len(levels)-1] > most {
		for i := range levels {
			if levels[i] > most {
				l.notes = append(l.notes, fmt.Sprintf("Level %s lowered to %s: the open-file limit here is %d (ulimit -Hn), "+
					"and a proxy holds two sockets per stream plus about %d others.", thousands(float64(levels[i])),
					thousands(float64(most)), l.nofile, streamsFDOverhead))
				levels[i] = most
			}
		}
		levels = slices.Compact(levels)
	}
	if top := levels[len(levels)-1]; top+1024 > 10000 {
		l.maxConns = top + 1024
		l.notes = append(l.notes, fmt.Sprintf("The Vigils run with limits.max_connections %d (default 10000) so that the driver's "+
			"/metrics scrapes get a connection beside %s streams.", l.maxConns, thousands(float64(top))))
	}

	phase("starting the mock backend (%d chunks, %v apart), Redis and Jaeger", s.chunks, s.gap)
	if err := l.start(); err != nil {
		return err
	}
	res := newStreamsResults(c, began, levels, peers, l)
	res.Settings.RequestedLevels, _ = parseLevels(s.levels)

	// Levels outside, rounds inside: a run cut short still has whole
	// levels, every round of them. The report is written after every run
	// (marked partial until the end), so that an interrupted run leaves
	// what it measured.
	total := len(levels) * s.rounds * len(peers)
	for _, level := range levels {
		for r := range s.rounds {
			// Each round starts with another peer, so that none is always
			// measured right after the same one.
			order := make([]string, 0, len(peers))
			for i := range peers {
				order = append(order, peers[(i+r)%len(peers)])
			}
			phase("%s concurrent streams, round %d/%d: %d each, %d chunks %v apart", thousands(float64(level)), r+1, s.rounds,
				s.perClient, s.chunks, s.gap)
			for _, peer := range order {
				run, err := l.measure(ctx, peer, level, r+1)
				if err != nil {
					res.Partial = fmt.Sprintf("partial: %d of %d runs, then %v", len(res.Runs), total, err)
					if ctx.Err() != nil {
						res.Partial = fmt.Sprintf("partial: %d of %d runs, then interrupted", len(res.Runs), total)
					}
					res.finish(began, l.notes)
					if len(res.Runs) > 0 {
						if werr := res.write(c.out); werr == nil {
							fmt.Printf("wrote the %s report to %s/streams.md\n", res.Partial, c.out)
						}
					}
					return fmt.Errorf("%d streams, round %d, %s: %w", level, r+1, peer, err)
				}
				run.print()
				res.Runs = append(res.Runs, run)
				res.Partial = fmt.Sprintf("partial: %d of %d runs so far", len(res.Runs), total)
				res.finish(began, l.notes)
				if err := res.write(c.out); err != nil {
					return err
				}
			}
		}
	}
	res.Partial = ""
	if c.profile && l.pprof && slices.Contains(peers, vigilFull) {
		phase("profiles of vigil-full at %s streams (a run of its own, not in the figures)", thousands(float64(levels[0])))
		files, notes := l.profile(ctx, levels[0])
		res.Profiles, l.notes = files, append(l.notes, notes...)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res.finish(began, l.notes)
	if err := res.write(c.out); err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.markdownTables())
	fmt.Println()
	res.printChecks(os.Stdout)
	fmt.Printf("\nwrote streams.md, streams.json, streams.png in %s/ in %s\n", c.out, time.Since(began).Round(time.Second))
	return nil
}

// start starts the mock, Redis and Jaeger on free ports of 127.0.0.1.
func (l *streamsLab) start() error {
	c, s := l.c, l.c.streamSuite
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	l.mockAddr, l.redisAddr, l.otlpAddr = ports[0], ports[1], ports[2]
	mock, err := l.ps.start("mock", l.self, []string{"mock", "-listen", l.mockAddr,
		"-chunks", strconv.Itoa(s.chunks), "-gap", s.gap.String()}, l.env, nil)
	if err != nil {
		return err
	}
	if err := mock.waitReady(10*time.Second, func() bool { return httpOK("http://" + l.mockAddr + "/health") }); err != nil {
		return err
	}
	l.mock = mock
	full := &lab{ps: l.ps}
	if l.redis, l.jaeger, err = full.startRedisJaeger(c, l.dir, l.env, l.redisAddr, l.otlpAddr, ports[3], ports[4]); err != nil {
		return err
	}
	l.jaegerAPI = full.jaegerAPI
	// Asked of the plain config: pprofSupported appends the key at the
	// end, which must be the admin section.
	l.pprof, err = pprofSupported(c.vigil, l.dir, fmt.Sprintf(vigilFullConf, "127.0.0.1:1", l.mockAddr, l.redisAddr))
	return err
}

// vigilYAML is the config of vigil-min or vigil-full listening on addr.
func (l *streamsLab) vigilYAML(name, addr string) string {
	var y string
	if name == vigilFull {
		y = fmt.Sprintf(vigilFullConf, addr, l.mockAddr, l.redisAddr)
	} else {
		y = fmt.Sprintf(vigilMinConf, addr, l.mockAddr)
	}
	if l.pprof {
		y += pprofKey // under admin:, the configs' last section
	}
	if l.maxConns > 0 {
		y += fmt.Sprintf("limits:\n  max_connections: %d\n", l.maxConns)
	}
	return y
}

// streamsNginxConf is the proxy suite's nginx with room for the streams:
// worker_connections counts both sockets of a stream, and reuseport
// spreads the clients evenly over the workers (without it one worker
// may accept most of a burst of connections and run out).
func streamsNginxConf(dir, backend, listen string, nofile uint64, level int) string {
	conns := max(4096, min(int(nofile)-64, 2*level+512))
	conf := fmt.Sprintf(nginxConf, dir, backend, listen)
	conf = strings.Replace(conf, "worker_connections 4096;", fmt.Sprintf("worker_connections %d;", conns), 1)
	conf = strings.Replace(conf, "listen "+listen+";", "listen "+listen+" reuseport;", 1)
	return fmt.Sprintf("worker_rlimit_nofile %d;\n", nofile) + conf
}

// startPeer starts the peer named, in ps, listening on a free port, and
// returns its target; direct is the mock itself.
func (l *streamsLab) startPeer(ps *procs, name string, level int) (*target, error) {
	if name == direct {
		return &target{name: direct, base: "http://" + l.mockAddr, pids: func() []int { return []int{l.mock.pid()} }}, nil
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	addr := ports[0]
	t := &target{name: name, base: "http://" + addr}
	switch name {
	case nginx:
		conf := filepath.Join(l.dir, "nginx.conf")
		if err := os.WriteFile(conf, []byte(streamsNginxConf(l.dir, l.mockAddr, addr, l.nofile, level)), 0o644); err != nil {
			return nil, err
		}
		ng, err := ps.start("nginx", l.c.nginx, []string{"-p", l.dir, "-c", conf, "-e", filepath.Join(l.dir, "nginx-error.log")}, l.env, nil)
		if err != nil {
			return nil, err
		}
		if err := ng.waitReady(10*time.Second, func() bool { return httpOK(t.base + "/health") }); err != nil {
			return nil, fmt.Errorf("%w\n(nginx-error.log: %s)", err, readTail(filepath.Join(l.dir, "nginx-error.log")))
		}
		workers := children(ng.pid())
		if len(workers) == 0 {
			return nil, fmt.Errorf("nginx (pid %d) has no worker processes", ng.pid())
		}
		t.pids = func() []int { return workers }
	case goProxy:
		gp, err := ps.start(goProxy, l.self, []string{"goproxy", "-listen", addr, "-backend", "http://" + l.mockAddr}, l.env, nil)
		if err != nil {
			return nil, err
		}
		if err := gp.waitReady(10*time.Second, func() bool { return httpOK(t.base + "/health") }); err != nil {
			return nil, err
		}
		t.pids = func() []int { return []int{gp.pid()} }
	case vigilMin, vigilFull:
		env := l.env
		if name == vigilFull {
			env = otlpEnv(env, l.otlpAddr)
		}
		starter := &lab{ps: ps}
		v, err := starter.startVigil(l.c, l.dir, name, addr, l.vigilYAML(name, addr), env, name == vigilFull)
		if err != nil {
			return nil, err
		}
		t.pids = func() []int { return []int{v.pid()} }
		if name == vigilFull {
			t.aux = map[string]int{"jaeger": l.jaeger.pid(), "redis": l.redis.pid()}
		}
	default:
		return nil, fmt.Errorf("unknown peer %q", name)
	}
	return t, nil
}

// exposesGoroutines reports whether the peer's /metrics has go_goroutines
// (the Vigils).
func exposesGoroutines(name string) bool { return name == vigilMin || name == vigilFull }

// goroutines scrapes the peer's go_goroutines; false when it has none.
func goroutines(t *target) (float64, bool) {
	if !exposesGoroutines(t.name) {
		return 0, false
	}
	m, err := scrape(t.base + "/metrics")
	if err != nil {
		return 0, false
	}
	g, ok := m["go_goroutines"]
	return g, ok
}

// waitIdle waits until the peer's processes, the mock, Redis and Jaeger
// together use under 5 % of a core over 200 ms, for 15 s at most (Jaeger
// ingests vigil-full's spans for a while after a run); false when they
// never did.
func (l *streamsLab) waitIdle(ctx context.Context, t *target) bool {
	pids := append(slices.Clone(t.pids()), l.mock.pid(), l.redis.pid(), l.jaeger.pid())
	deadline := time.Now().Add(15 * time.Second)
	const window = 200 * time.Millisecond
	for ctx.Err() == nil && time.Now().Before(deadline) {
		c0, err0 := sumCPU(pids)
		sleep(ctx, window)
		c1, err1 := sumCPU(pids)
		if err0 != nil || err1 != nil || c1-c0 <= window/20 {
			return true
		}
	}
	return false
}

// measure runs one level against one freshly started peer.
func (l *streamsLab) measure(ctx context.Context, peer string, level, round int) (*streamsRun, error) {
	s := l.c.streamSuite
	ps := &procs{dir: l.dir}
	defer ps.stopAll()
	t, err := l.startPeer(ps, peer, level)
	if err != nil {
		return nil, err
	}
	run := &streamsRun{Round: round, Level: level, Peer: peer}
	warm, _, err := l.load(ctx, t, streamsWarmupClients, 2, true, nil)
	if err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	if warm.Errors > 0 {
		run.Notes = append(run.Notes, fmt.Sprintf("warm-up: %d of %d short streams failed, e.g. %s", warm.Errors,
			2*streamsWarmupClients, strings.Join(warm.ErrorExamples, "; ")))
	}
	if !l.waitIdle(ctx, t) {
		run.Notes = append(run.Notes, "still busy 15 s after the warm-up")
	}
	if run.RSSIdle, err = t.rss(); err != nil {
		return nil, err
	}
	g0, hasG := goroutines(t)
	cpu0, aux0, err := t.cpu()
	if err != nil {
		return nil, err
	}
	mock0, err := cpuTime(l.mock.pid())
	if err != nil {
		return nil, err
	}

	var samples []memSample
	var t0 time.Time
	sampler := func(i int) {
		if t0.IsZero() {
			t0 = time.Now()
		}
		sm := memSample{T: time.Since(t0).Seconds(), at: time.Now()}
		sm.RSS, _ = t.rss()
		if hasG && i%4 == 0 {
			sm.Goroutines, _ = goroutines(t)
		}
		samples = append(samples, sm)
	}
	lr, loaderCPU, err := l.load(ctx, t, level, s.perClient, false, sampler)
	if err != nil {
		return nil, err
	}
	cpu1, aux1, err := t.cpu()
	if err != nil {
		return nil, err
	}
	mock1, err := cpuTime(l.mock.pid())
	if err != nil {
		return nil, err
	}
	run.Load = lr
	if !l.waitIdle(ctx, t) {
		run.Notes = append(run.Notes, "still busy 15 s after the load")
	}
	// One more second for the runtime's background scavenger and nginx's
	// freeing of connection memory; RSS "after" is what stays.
	sleep(ctx, time.Second)
	if run.RSSAfter, err = t.rss(); err != nil {
		return nil, err
	}
	run.fill(samples, cpu1-cpu0, mock1-mock0, loaderCPU, aux0, aux1)
	if hasG {
		g := &goroutineCounts{Idle: g0}
		g.After, _ = goroutines(t)
		var held []float64
		for _, sm := range samples {
			if sm.Goroutines == 0 {
				continue
			}
			g.Peak = max(g.Peak, sm.Goroutines)
			if sm.inSteady(lr) {
				held = append(held, sm.Goroutines)
			}
		}
		g.Held = median(held)
		if len(held) == 0 {
			g.Held = g.Peak
		}
		g.PerStream = (g.Held - g.Idle) / float64(level)
		run.Goroutines = g
	}
	return run, nil
}

// load runs the load generator against t with clients clients and waits
// for it, calling sample every streamsSampleEvery meanwhile (i counts the
// calls). It returns the generator's result and its CPU time.
func (l *streamsLab) load(ctx context.Context, t *target, clients, perClient int, warmup bool, sample func(i int)) (streamLoadResult, time.Duration, error) {
	s := l.c.streamSuite
	addr := strings.TrimPrefix(t.base, "http://")
	// Clients start over half a stream's nominal length, so that every
	// one of them is in flight from then until the first finishes its
	// last stream, and their events are spread over the gap rather than
	// all due at once.
	ramp := time.Duration(s.chunks-1) * s.gap / 2
	args := []string{"streamload", "-addr", addr, "-clients", strconv.Itoa(clients), "-per-client", strconv.Itoa(perClient),
		"-chunks", strconv.Itoa(s.chunks), "-ramp", ramp.String(), "-logprobs", strconv.FormatFloat(s.logprobs, 'g', -1, 64)}
	if warmup {
		args = append(args, "-warmup", "-ramp", "0s")
	}
	var out bytes.Buffer
	logf, err := os.OpenFile(filepath.Join(l.dir, "streamload.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return streamLoadResult{}, 0, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, l.self, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = l.env, &out, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		return streamLoadResult{}, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(streamsSampleEvery)
	defer tick.Stop()
	if sample != nil {
		sample(0)
	}
	for i := 1; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				return streamLoadResult{}, 0, fmt.Errorf("streamload: %w (its log: %s)", err, readTail(logf.Name()))
			}
			var r streamLoadResult
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				return r, 0, fmt.Errorf("streamload's result: %w", err)
			}
			var cpu time.Duration
			if st, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				cpu = time.Duration(st.Utime.Nano() + st.Stime.Nano())
			}
			return r, cpu, nil
		case <-tick.C:
			if sample != nil {
				sample(i)
			}
		}
	}
}

// profile runs vigil-full once more at level streams and, in the steady
// window, takes its heap profile (after a collection) and a goroutine
// dump into the output directory, with a `go tool pprof -top` summary:
// where the memory per stream is.
func (l *streamsLab) profile(ctx context.Context, level int) (files, notes []string) {
	s := l.c.streamSuite
	ps := &procs{dir: l.dir}
	defer ps.stopAll()
	t, err := l.startPeer(ps, vigilFull, level)
	if err != nil {
		return nil, []string{"profiles: " + err.Error()}
	}
	if _, _, err := l.load(ctx, t, streamsWarmupClients, 2, true, nil); err != nil {
		return nil, []string{"profiles: warm-up: " + err.Error()}
	}
	l.waitIdle(ctx, t)
	take := func(name, path string) {
		f, err := os.Create(filepath.Join(l.c.out, name))
		if err != nil {
			notes = append(notes, fmt.Sprintf("profile %s: %v", name, err))
			return
		}
		defer f.Close()
		code, err := pprofGet(ctx, t.base+path, f)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("status %d", code)
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("profile %s: %v", name, err))
			return
		}
		files = append(files, name)
	}
	heap := fmt.Sprintf("streams-vigil-full-heap-%d.pprof", level)
	gor := fmt.Sprintf("streams-vigil-full-goroutines-%d.txt", level)
	take(fmt.Sprintf("streams-vigil-full-heap-idle-%d.pprof", level), "/debug/pprof/heap?gc=1")
	// Half-way through the steady window: the ramp is half a stream, the
	// window from its end to the end of the first client's last stream.
	streamLen := time.Duration(s.chunks-1) * s.gap
	at := streamLen/2 + time.Duration(s.perClient)*streamLen/2
	taken := false
	var began time.Time
	_, _, err = l.load(ctx, t, level, s.perClient, false, func(int) {
		if began.IsZero() {
			began = time.Now()
		}
		if !taken && time.Since(began) >= at {
			taken = true
			take(heap, "/debug/pprof/heap?gc=1")
			take(gor, "/debug/pprof/goroutine?debug=1")
		}
	})
	if err != nil {
		notes = append(notes, "profiles: load: "+err.Error())
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".pprof") {
			continue
		}
		path := filepath.Join(l.c.out, f)
		b, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", "-sample_index=inuse_space", path).Output()
		if err == nil {
			os.WriteFile(strings.TrimSuffix(path, ".pprof")+".top.txt", b, 0o644)
		}
	}
	return files, notes
}

// memSample is one reading of the peer while the load ran.
type memSample struct {
	T          float64   `json:"t_s"` // since the load started
	RSS        int64     `json:"rss_bytes"`
	Goroutines float64   `json:"goroutines,omitempty"`
	at         time.Time // wall clock, to place it in the load's steady window
}

// inSteady reports whether the sample fell in the load's steady window.
func (m memSample) inSteady(r streamLoadResult) bool {
	if r.SteadyFromNs == 0 {
		return false
	}
	ns := m.at.UnixNano()
	return ns >= r.SteadyFromNs && ns <= r.SteadyToNs
}

// fill computes the run's figures from the samples and CPU times.
func (run *streamsRun) fill(samples []memSample, cpu, mockCPU, loaderCPU time.Duration, aux0, aux1 map[string]time.Duration) {
	var held []float64
	for _, sm := range samples {
		run.RSSPeak = max(run.RSSPeak, sm.RSS)
		if sm.inSteady(run.Load) {
			held = append(held, float64(sm.RSS))
		}
	}
	run.HeldSamples = len(held)
	run.RSSHeld = int64(median(held))
	run.Samples = samples
	run.MemPerStreamKiB = float64(run.RSSPeak-run.RSSIdle) / 1024 / float64(run.Level)
	run.CPUSeconds = cpu.Seconds()
	if k := float64(run.Load.Events) / 1000; k > 0 {
		run.CPUPer1kMs = ms(cpu) / k
		run.MockCPUPer1kMs = ms(mockCPU) / k
		run.LoaderCPUPer1kMs = ms(loaderCPU) / k
		for name, c1 := range aux1 {
			if run.AuxCPUPer1kMs == nil {
				run.AuxCPUPer1kMs = map[string]float64{}
			}
			run.AuxCPUPer1kMs[name] = ms(c1-aux0[name]) / k
		}
	}
	if math.IsNaN(run.MemPerStreamKiB) || math.IsInf(run.MemPerStreamKiB, 0) {
		run.MemPerStreamKiB = 0
	}
}

// print prints the run as a progress line.
func (run *streamsRun) print() {
	g := ""
	if run.Goroutines != nil {
		g = fmt.Sprintf("  goroutines %.0f→%.0f (%.2f/stream)", run.Goroutines.Idle, run.Goroutines.Held, run.Goroutines.PerStream)
	}
	fmt.Printf("   %-10s %9s events  cpu %6.2f ms/1k  gap p50 %6.2f p99 %6.2f ms  duration p50 %6.2f s  rss %s → peak %s, held %s, after %s (%.1f KiB/stream)%s  (%d errors)\n",
		run.Peer, thousands(float64(run.Load.Events)), run.CPUPer1kMs, run.Load.GapP50Ms, run.Load.GapP99Ms,
		run.Load.DurationP50Ms/1000, mib(run.RSSIdle), mib(run.RSSPeak), mib(run.RSSHeld), mib(run.RSSAfter),
		run.MemPerStreamKiB, g, run.Load.Errors)
	if len(run.Load.ErrorExamples) > 0 {
		fmt.Printf("              errors, e.g.: %s\n", strings.Join(run.Load.ErrorExamples, "; "))
	}
	for _, n := range run.Notes {
		fmt.Printf("              note: %s\n", n)
	}
}
