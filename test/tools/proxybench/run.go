package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// roundTarget is what one round measured of one target.
type roundTarget struct {
	Wrk    wrkResult    `json:"wrk"`
	Rates  []rateResult `json:"rates"`
	Stream streamResult `json:"stream"`
}

// pause is the least time between two measurements.
const pause = 500 * time.Millisecond

// settle waits, after pause, until the lab's processes are close to idle
// (under 5 % of a core over 200 ms), for at most 15 s: after a wrk run
// against vigil-full, Jaeger ingests the spans queued and vigil-full drains
// its span batches and Redis flushes for seconds, which would otherwise
// fall into the next target's measurement. It returns how long it waited.
func (l *lab) settle(ctx context.Context) time.Duration {
	start := time.Now()
	sleep(ctx, pause)
	var pids []int
	for _, p := range l.ps.list {
		pids = append(pids, p.pid())
	}
	pids = append(pids, l.byName[nginx].pids()...)
	const window = 200 * time.Millisecond
	for ctx.Err() == nil {
		if time.Since(start) > 15*time.Second {
			l.unsettled++
			break
		}
		c0, err0 := sumCPU(pids)
		sleep(ctx, window)
		c1, err1 := sumCPU(pids)
		if err0 != nil || err1 != nil || c1-c0 <= window/20 {
			break
		}
	}
	return time.Since(start)
}

// run starts everything, measures and writes the report. An error means
// the harness failed; targets missed are a report, not an error.
func run(ctx context.Context, c config) error {
	began := time.Now()
	// Leftovers of an earlier run would pass for this run's profiles.
	if err := clearReport(c, "results"); err != nil {
		return err
	}
	if olds, _ := filepath.Glob(filepath.Join(c.out, "vigil-full-*")); len(olds) > 0 {
		for _, f := range olds {
			os.Remove(f)
		}
	}
	dir, cleanup, err := workDir(c)
	if err != nil {
		return err
	}
	defer cleanup()

	phase("starting the mock backend, nginx, go-proxy, Redis, Jaeger, vigil-min and vigil-full")
	l, err := startLab(c, dir)
	if err != nil {
		return err
	}
	defer l.ps.stopAll()
	script, err := wrkScript(dir)
	if err != nil {
		return err
	}
	res := &results{Started: began.UTC().Format(time.RFC3339), Settings: settingsOf(c), Machine: machineInfo(c)}
	res.Notes = append(res.Notes, l.notes...)

	rssIdle := map[string]int64{}
	for _, t := range l.targets {
		if rssIdle[t.name], err = t.rss(); err != nil {
			return err
		}
	}
	requests := map[string]int64{}

	phase("warm-up: %v of wrk and 5 streams per target", c.warmup)
	res.Machine.LoadBefore = loadAvg()
	for _, t := range l.targets {
		w, err := runWrk(ctx, c, script, t.base, c.warmup)
		if err != nil {
			return err
		}
		requests[t.name] += w.Requests
		if _, err := runStreams(ctx, t, 5, c.chunks, c.gap); err != nil {
			return err
		}
		requests[t.name] += 5
		l.settle(ctx)
	}

	for r := range c.rounds {
		// Each round starts with another target, so that no target is
		// always measured right after the same one.
		order := make([]*target, 0, len(l.targets))
		for i := range l.targets {
			order = append(order, l.targets[(i+r)%len(l.targets)])
		}
		round := map[string]*roundTarget{}
		for _, t := range order {
			round[t.name] = &roundTarget{}
		}
		phase("round %d/%d: max throughput (wrk -t%d -c%d, %v each)", r+1, c.rounds, c.wrkThreads, c.wrkConns, c.duration)
		for _, t := range order {
			w, err := runWrk(ctx, c, script, t.base, c.duration)
			if err != nil {
				return err
			}
			round[t.name].Wrk = w
			requests[t.name] += w.Requests
			fmt.Printf("   %-10s %9.0f req/s  (%d errors)\n", t.name, w.RPS, w.Errors)
			l.settle(ctx)
		}
		for _, rate := range c.rates {
			phase("round %d/%d: fixed rate %d req/s (vegeta, %v each)", r+1, c.rounds, rate, c.duration)
			for _, t := range order {
				rr, err := runRate(ctx, t, rate, c.duration)
				if err != nil {
					return err
				}
				round[t.name].Rates = append(round[t.name].Rates, rr)
				requests[t.name] += int64(rr.Requests)
				fmt.Printf("   %-10s p50 %6.3f ms  p99 %6.3f ms  cpu %5.0f µs/req  (%d errors)\n", t.name, rr.P50Ms, rr.P99Ms, rr.CPUUsPerReq, rr.Errors)
				l.settle(ctx)
			}
		}
		phase("round %d/%d: %d streams of %d chunks, %v apart, one at a time", r+1, c.rounds, c.streams, c.chunks, c.gap)
		for _, t := range order {
			s, err := runStreams(ctx, t, c.streams, c.chunks, c.gap)
			if err != nil {
				return err
			}
			round[t.name].Stream = s
			requests[t.name] += int64(s.Streams)
			fmt.Printf("   %-10s ttft p50 %6.3f ms  gap p50 %6.3f ms  p99 %6.3f ms  coalesced %4.1f%%  (%d errors)\n",
				t.name, s.TTFTP50Ms, s.GapP50Ms, s.GapP99Ms, 100*s.Coalesced, s.Errors)
			l.settle(ctx)
		}
		res.Rounds = append(res.Rounds, round)
	}

	res.Machine.LoadAfter = loadAvg()
	rssAfter := map[string]int64{}
	for _, t := range l.targets {
		if rssAfter[t.name], err = t.rss(); err != nil {
			return err
		}
	}
	if c.profile {
		phase("profiles of vigil-full")
		files, notes := l.profiles(ctx, c, script)
		res.Profiles, res.Notes = files, append(res.Notes, notes...)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	res.Notes = append(res.Notes, l.fullNotes()...)
	if l.unsettled > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d time(s) the processes were still busy 15 s after a measurement; the next one started anyway.", l.unsettled))
	}
	res.summarize(c, rssIdle, rssAfter, requests)
	res.WallSeconds = time.Since(began).Seconds()
	if err := res.write(c.out); err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(res.markdownTable())
	fmt.Println()
	res.printChecks(os.Stdout)
	fmt.Printf("\nwrote %s/results.md, results.json, results.png in %s\n", c.out, time.Since(began).Round(time.Second))
	return nil
}

// clearReport makes the output directory and removes an earlier run's
// report of the given name (name.md, .json, .png), so that a run that
// fails leaves no stale report behind to be read as its own.
func clearReport(c config, name string) error {
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	for _, ext := range []string{".md", ".json", ".png"} {
		os.Remove(filepath.Join(c.out, name+ext))
	}
	return nil
}

// workDir makes the run's work directory (configs, logs) and returns the
// function that removes it, unless -keep.
func workDir(c config) (string, func(), error) {
	dir, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return "", nil, err
	}
	// nginx's workers run as nobody when started as root and must reach
	// their temp paths.
	os.Chmod(dir, 0o755)
	if c.keepWork {
		fmt.Println("work directory (kept):", dir)
		return dir, func() {}, nil
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// profiles takes vigil-full's CPU profile during a fixed-rate run at the
// highest rate and during a wrk run, then its heap profile, each into the
// output directory, with `go tool pprof -top` summaries next to them. These
// runs come after the rounds and are not part of the figures, so that
// profiling does not slow what is measured.
func (l *lab) profiles(ctx context.Context, c config, script string) (files, notes []string) {
	full := l.byName[vigilFull]
	if !l.pprof {
		return nil, nil
	}
	code, err := pprofGet(ctx, full.base+"/debug/pprof/cmdline", io.Discard)
	if err != nil || code != http.StatusOK {
		return nil, []string{fmt.Sprintf("vigil-full's /debug/pprof/ answered %d (%v): profiles skipped.", code, err)}
	}
	secs := max(1, int(c.duration.Seconds())-1)
	rate := c.rates[len(c.rates)-1]
	take := func(name string, load func() error) {
		path := filepath.Join(c.out, name)
		f, err := os.Create(path)
		if err != nil {
			notes = append(notes, fmt.Sprintf("profile %s: %v", name, err))
			return
		}
		defer f.Close()
		got := make(chan error, 1)
		start := func() {
			go func() {
				code, err := pprofGet(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", full.base, secs), f)
				if err == nil && code != http.StatusOK {
					err = fmt.Errorf("status %d", code)
				}
				got <- err
			}()
		}
		if load == nil {
			code, err := pprofGet(ctx, full.base+"/debug/pprof/heap?gc=1", f)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("status %d", code)
			}
			got <- err
		} else {
			start()
			if err := load(); err != nil {
				notes = append(notes, fmt.Sprintf("profile %s: load: %v", name, err))
			}
		}
		if err := <-got; err != nil {
			notes = append(notes, fmt.Sprintf("profile %s: %v", name, err))
			return
		}
		files = append(files, name)
	}
	fmt.Printf("   CPU at %d req/s\n", rate)
	take(fmt.Sprintf("vigil-full-cpu-%drps.pprof", rate), func() error {
		_, err := runRate(ctx, full, rate, c.duration)
		return err
	})
	fmt.Println("   CPU at max throughput")
	take("vigil-full-cpu-max.pprof", func() error {
		_, err := runWrk(ctx, c, script, full.base, c.duration)
		return err
	})
	fmt.Println("   heap")
	take("vigil-full-heap.pprof", nil)
	// Text summaries; best effort (go is on PATH wherever the driver was
	// built).
	for _, f := range files {
		path := filepath.Join(c.out, f)
		// CPU: by own time and by cumulative time; heap: by bytes allocated
		// over the run and by bytes in use.
		views := map[string][]string{"": {}, "-cum": {"-cum"}}
		if strings.Contains(f, "heap") {
			views = map[string][]string{"-alloc_space": {"-sample_index=alloc_space"}, "-inuse_space": {"-sample_index=inuse_space"}}
		}
		for suffix, extra := range views {
			args := append([]string{"tool", "pprof", "-top", "-nodecount=50"}, extra...)
			out := strings.TrimSuffix(path, ".pprof") + suffix + ".top.txt"
			b, err := exec.CommandContext(ctx, "go", append(args, path)...).Output()
			if err == nil {
				os.WriteFile(out, b, 0o644)
			}
		}
	}
	return files, notes
}

// pprofGet GETs url with the admin token into w and returns the status.
func pprofGet(ctx context.Context, url string, w io.Writer) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	_, err = io.Copy(w, resp.Body)
	return resp.StatusCode, err
}

// fullNotes reads vigil-full's own counters (spans exported and dropped,
// analysis events dropped, Redis flush failures), checks that Jaeger got
// its traces and sizes the access log.
func (l *lab) fullNotes() []string {
	var notes []string
	full := l.byName[vigilFull]
	m, err := scrape(full.base + "/metrics")
	if err != nil {
		return append(notes, "vigil-full /metrics: "+err.Error())
	}
	notes = append(notes, fmt.Sprintf("vigil-full counters at the end: %.0f spans exported, %.0f dropped; %.0f analysis events dropped; %.0f Redis flushes, %.0f failed.",
		m["vigil_tracing_spans_exported_total"], m["vigil_tracing_spans_dropped_total"],
		m["vigil_observer_dropped_events_total"], m["vigil_state_flushes_total"], m["vigil_state_flush_failures_total"]))
	if b, err := httpBody(l.jaegerAPI + "/api/services"); err != nil || !strings.Contains(b, "vigil-bench") {
		notes = append(notes, fmt.Sprintf("Jaeger does not list the service vigil-bench (%v): were spans exported?", err))
	}
	if fi, err := os.Stat(l.accessLog); err == nil {
		notes = append(notes, fmt.Sprintf("vigil-full's access log: %.1f MB.", float64(fi.Size())/1e6))
	}
	return notes
}

// scrape reads a Prometheus text page into metric name → the sum over its
// series.
func scrape(url string) (map[string]float64, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name = name[:j]
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[strings.TrimSpace(name)] += v
	}
	return out, sc.Err()
}

func httpBody(url string) (string, error) {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// machine describes where the run happened.
type machine struct {
	CPU     string `json:"cpu"`
	Cores   int    `json:"cores"`
	MemGiB  int    `json:"mem_gib"`
	Kernel  string `json:"kernel"`
	Go      string `json:"go"`
	Nginx   string `json:"nginx"`
	Wrk     string `json:"wrk"`
	Vigil   string `json:"vigil"`
	Redis   string `json:"redis"`
	Jaeger  string `json:"jaeger"`
	Command string `json:"command"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1-minute load before
	// the first round and after the last: more than the lab's own few
	// busy processes means neighbours shared the cores.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after"`
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func machineInfo(c config) machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Jaeger: c.jaeger}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		fmt.Sscanf(string(b), "MemTotal: %d kB", &kb)
		m.MemGiB = int((kb + 1<<19) >> 20)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	first := func(name string, args ...string) string {
		b, _ := exec.Command(name, args...).CombinedOutput()
		line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		return line
	}
	m.Nginx = strings.TrimPrefix(first(c.nginx, "-v"), "nginx version: ")
	m.Wrk = first(c.wrk, "-v")
	if i := strings.Index(m.Wrk, " ["); i > 0 {
		m.Wrk = m.Wrk[:i]
	}
	m.Vigil = first(c.vigil, "version")
	m.Redis = first(c.redis, "--version")
	if f := strings.Fields(m.Redis); len(f) > 2 {
		m.Redis = "Redis " + strings.TrimPrefix(f[2], "v=") // "Redis server v=7.0.15 sha=..."
	}
	m.Command = os.Getenv("BENCH_COMMAND")
	return m
}
