// Command proxybench measures Vigil side by side with nginx as reverse
// proxies in front of a zero-latency OpenAI-compatible mock backend (issue
// 15): maximum throughput (wrk, closed loop), added latency at fixed rates
// (vegeta, open loop), streaming time to first token and chunk gaps, CPU
// time per request and resident memory, for five targets: the backend
// directly, nginx, the Go standard library's reverse proxy alone
// ("go-proxy", the ceiling of a net/http proxy; goproxy.go), a bare proxy on
// fasthttp ("fast-proxy", the ceiling without net/http; fastproxy.go), Vigil with its
// analyzers, tracing and access log off ("vigil-min") and Vigil with
// everything on ("vigil-full"). Targets are
// measured interleaved in rounds and summarized by medians over rounds; the
// results go to results.md, results.json and results.png, with CPU and heap
// profiles of vigil-full when it serves /debug/pprof.
//
// With -suite balance it compares Vigil's balancing strategies against
// simulated backends instead (balance.go); with -suite prefix, against
// simulated backends with prefix caches, many tenants sending long system
// prompts (prefix.go); with -suite streams, nginx, go-proxy and both
// Vigils holding thousands of long SSE streams at once (streams.go).
//
// test/bench/run installs what it needs, builds Vigil and runs it; see
// test/bench/README.md. Flags default to the BENCH_* environment variables.
//
//	proxybench -vigil BIN -jaeger BIN [-out DIR] [-rounds N] [-duration D] ...
//	proxybench -suite balance -vigil BIN [-out DIR] [-balance-duration D] ...
//	proxybench -suite prefix -vigil BIN [-out DIR] [-prefix-duration D] ...
//	proxybench -suite soak -vigil BIN -jaeger BIN [-soak-duration D] ...
//	proxybench -suite streams -vigil BIN -jaeger BIN [-streams-levels N,...] ...
//	proxybench streamload -addr HOST:PORT -clients N ...   the stream suite's load generator
//	proxybench mock -listen ADDR [-chunks N] [-gap D]
//	proxybench goproxy -listen ADDR -backend URL
//	proxybench fastproxy -listen ADDR -backend URL
//	proxybench report DIR      rewrite DIR/results.md and .png from DIR/results.json
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is what a run is asked to do; set once from flags.
type config struct {
	vigil, jaeger, nginx, wrk, redis string // binaries
	out                              string
	rounds                           int
	duration                         time.Duration // of each wrk and fixed-rate run
	warmup                           time.Duration // wrk per target before the first round
	rates                            []int
	streams, chunks                  int
	gap                              time.Duration
	wrkThreads, wrkConns             int
	profile                          bool
	keepWork                         bool
	// suite is "proxy" (the default), "balance" (balance.go) or
	// "prefix" (prefix.go), which need no nginx, wrk, Redis or Jaeger, or
	// "soak" (soak.go).
	suite   string
	balance balanceSettings
	prefix  prefixSettings
	soak    soakSettings
	// streamSuite is the stream suite's (streams.go); config.streams is
	// the proxy suite's count of sequential streams.
	streamSuite streamsSettings
}

// soakSettings are the soak suite's (soak.go).
type soakSettings struct {
	duration, warmup time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "mock" {
		if err := runMock(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench mock:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "streamload" {
		if err := runStreamLoadCmd(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench streamload:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "goproxy" {
		if err := runGoProxy(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench goproxy:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "fastproxy" {
		if err := runFastProxy(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench fastproxy:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "report" {
		if err := rewrite(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "proxybench report:", err)
			os.Exit(1)
		}
		return
	}
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runSuite := run
	switch c.suite {
	case suiteBalance:
		runSuite = runBalance
	case suitePrefix:
		runSuite = runPrefix
	case suiteSoak:
		runSuite = runSoak
	case suiteStreams:
		runSuite = runStreamsSuite
	}
	if err := runSuite(ctx, c); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "proxybench: interrupted; every process it started is stopped")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("proxybench", flag.ContinueOnError)
	var c config
	var rates string
	env := func(name, def string) string {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			return v
		}
		return def
	}
	envInt := func(name string, def int) int {
		n, err := strconv.Atoi(env(name, strconv.Itoa(def)))
		if err != nil {
			return def
		}
		return n
	}
	envFloat := func(name string, def float64) float64 {
		f, err := strconv.ParseFloat(env(name, strconv.FormatFloat(def, 'g', -1, 64)), 64)
		if err != nil {
			return def
		}
		return f
	}
	envDur := func(name string, def time.Duration) time.Duration {
		d, err := time.ParseDuration(env(name, def.String()))
		if err != nil {
			return def
		}
		return d
	}
	fs.StringVar(&c.vigil, "vigil", env("BENCH_VIGIL", "bin/vigil"), "vigil `binary`")
	fs.StringVar(&c.jaeger, "jaeger", env("VIGIL_JAEGER_BIN", ""), "Jaeger `binary` (test/toolbin jaeger)")
	fs.StringVar(&c.nginx, "nginx", env("BENCH_NGINX", "nginx"), "nginx `binary`")
	fs.StringVar(&c.wrk, "wrk", env("BENCH_WRK", "wrk"), "wrk `binary`")
	fs.StringVar(&c.redis, "redis-server", env("BENCH_REDIS_SERVER", "redis-server"), "redis-server `binary`")
	fs.StringVar(&c.out, "out", env("BENCH_OUT", "test/bench/out"), "output `directory`")
	fs.IntVar(&c.rounds, "rounds", envInt("BENCH_ROUNDS", 3), "rounds; every target is measured once per round ($BENCH_ROUNDS)")
	fs.DurationVar(&c.duration, "duration", envDur("BENCH_DURATION", 10*time.Second), "length of each wrk and fixed-rate run ($BENCH_DURATION)")
	fs.DurationVar(&c.warmup, "warmup", envDur("BENCH_WARMUP", 2*time.Second), "wrk warm-up of each target before the first round ($BENCH_WARMUP)")
	fs.StringVar(&rates, "rates", env("BENCH_RATES", "500,1000"), "fixed rates, requests/s, comma-separated; CPU per request is taken at the highest ($BENCH_RATES)")
	fs.IntVar(&c.streams, "streams", envInt("BENCH_STREAMS", 200), "streamed requests per target and round, one after another ($BENCH_STREAMS)")
	fs.IntVar(&c.chunks, "chunks", envInt("BENCH_CHUNKS", 32), "content chunks per stream ($BENCH_CHUNKS)")
	fs.DurationVar(&c.gap, "gap", envDur("BENCH_GAP", time.Millisecond), "the backend's pause between a stream's chunks ($BENCH_GAP)")
	fs.IntVar(&c.wrkThreads, "wrk-threads", envInt("BENCH_WRK_THREADS", 2), "wrk threads ($BENCH_WRK_THREADS)")
	fs.IntVar(&c.wrkConns, "wrk-connections", envInt("BENCH_WRK_CONNECTIONS", 64), "wrk connections ($BENCH_WRK_CONNECTIONS)")
	fs.BoolVar(&c.profile, "profile", env("BENCH_PROFILE", "1") != "0", "take CPU and heap profiles of vigil-full after the rounds ($BENCH_PROFILE=0: no)")
	fs.BoolVar(&c.keepWork, "keep", env("BENCH_KEEP", "0") == "1", "keep the work directory (configs, logs, access log) ($BENCH_KEEP=1)")
	fs.StringVar(&c.suite, "suite", env("BENCH_SUITE", "proxy"), "`suite`: proxy (Vigil against nginx), balance (balancing strategies against simulated backends), prefix (the strategies against simulated prefix caches), soak (vigil-full's memory over a long run) or streams (thousands of long streams at once) ($BENCH_SUITE)")
	fs.StringVar(&c.streamSuite.levels, "streams-levels", env("BENCH_STREAMS_LEVELS", "1000,5000,10000"), "streams suite: concurrent streams, comma-separated ($BENCH_STREAMS_LEVELS)")
	fs.IntVar(&c.streamSuite.chunks, "streams-chunks", envInt("BENCH_STREAMS_CHUNKS", 200), "streams suite: content chunks per stream ($BENCH_STREAMS_CHUNKS)")
	fs.DurationVar(&c.streamSuite.gap, "streams-gap", envDur("BENCH_STREAMS_GAP", 20*time.Millisecond), "streams suite: the mock's pause between chunks ($BENCH_STREAMS_GAP)")
	fs.Float64Var(&c.streamSuite.logprobs, "streams-logprobs", envFloat("BENCH_STREAMS_LOGPROBS", 0.5), "streams suite: share of streams that ask for logprobs ($BENCH_STREAMS_LOGPROBS)")
	fs.IntVar(&c.streamSuite.rounds, "streams-rounds", envInt("BENCH_STREAMS_ROUNDS", 3), "streams suite: rounds, peers interleaved in each ($BENCH_STREAMS_ROUNDS)")
	fs.IntVar(&c.streamSuite.perClient, "streams-per-client", envInt("BENCH_STREAMS_PER_CLIENT", 3), "streams suite: streams each client sends back to back ($BENCH_STREAMS_PER_CLIENT)")
	fs.StringVar(&c.streamSuite.peers, "streams-peers", env("BENCH_STREAMS_PEERS", ""), "streams suite: peers, comma-separated, among direct,nginx,go-proxy,vigil-min,vigil-full; empty: all ($BENCH_STREAMS_PEERS)")
	fs.DurationVar(&c.soak.duration, "soak-duration", envDur("BENCH_SOAK_DURATION", 4*time.Minute), "soak suite: length of the load after the warm-up ($BENCH_SOAK_DURATION)")
	fs.DurationVar(&c.soak.warmup, "soak-warmup", envDur("BENCH_SOAK_WARMUP", 10*time.Second), "soak suite: warm-up before the first sample ($BENCH_SOAK_WARMUP)")
	fs.DurationVar(&c.balance.duration, "balance-duration", envDur("BENCH_BALANCE_DURATION", 10*time.Second), "balance suite: measured part of each run; case d's slow phase lasts twice as long ($BENCH_BALANCE_DURATION)")
	fs.IntVar(&c.balance.clients, "balance-clients", envInt("BENCH_BALANCE_CLIENTS", 16), "balance suite: concurrent closed-loop clients ($BENCH_BALANCE_CLIENTS)")
	fs.StringVar(&c.balance.cases, "balance-cases", env("BENCH_BALANCE_CASES", "a,b,c,d,e"), "balance suite: cases run, comma-separated ($BENCH_BALANCE_CASES)")
	fs.DurationVar(&c.prefix.duration, "prefix-duration", envDur("BENCH_PREFIX_DURATION", 15*time.Second), "prefix suite: measured part of each run ($BENCH_PREFIX_DURATION)")
	fs.IntVar(&c.prefix.clients, "prefix-clients", envInt("BENCH_PREFIX_CLIENTS", 12), "prefix suite: concurrent closed-loop clients, split among the replicas ($BENCH_PREFIX_CLIENTS)")
	fs.StringVar(&c.prefix.cases, "prefix-cases", env("BENCH_PREFIX_CASES", "uniform,hot,replicas"), "prefix suite: cases run, comma-separated ($BENCH_PREFIX_CASES)")
	fs.StringVar(&c.prefix.set, "prefix-set", env("BENCH_PREFIX_SET", ""), "prefix suite: balancer.prefix settings of the prefix strategy's gateways, key=value,... (e.g. guard_abs=4,min_chars=256) ($BENCH_PREFIX_SET)")
	fs.StringVar(&c.prefix.strategies, "prefix-strategies", env("BENCH_PREFIX_STRATEGIES", ""), "prefix suite: strategies run, comma-separated; empty: all four ($BENCH_PREFIX_STRATEGIES)")
	promptChars := fs.Int("prompt-chars", envInt("BENCH_PROMPT_CHARS", 0), "proxy suite: characters of the chat requests' prompt; 0: a short one ($BENCH_PROMPT_CHARS)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *promptChars > 0 {
		chatBody = withPrompt(*promptChars)
	}
	for s := range strings.SplitSeq(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return c, fmt.Errorf("-rates: bad rate %q", s)
		}
		c.rates = append(c.rates, n)
	}
	var errs []error
	switch c.suite {
	case "proxy", suiteSoak:
		if c.jaeger == "" {
			errs = append(errs, errors.New("-jaeger (or $VIGIL_JAEGER_BIN) is required: test/toolbin jaeger builds it"))
		}
	case suiteBalance:
		// Only vigil is needed: nginx, wrk, Redis and Jaeger are the proxy
		// suite's.
		c.jaeger, c.nginx, c.wrk, c.redis = "", "", "", ""
		errs = append(errs, c.balance.validate())
	case suitePrefix:
		// Redis: the replicas case's gateways share state through it.
		c.jaeger, c.nginx, c.wrk = "", "", ""
		errs = append(errs, c.prefix.validate())
	case suiteStreams:
		// nginx, Redis and Jaeger are peers or vigil-full's; wrk is not
		// used.
		c.wrk = ""
		if c.jaeger == "" {
			errs = append(errs, errors.New("-jaeger (or $VIGIL_JAEGER_BIN) is required: test/toolbin jaeger builds it"))
		}
		errs = append(errs, c.streamSuite.validate())
	default:
		errs = append(errs, fmt.Errorf("-suite: want proxy, balance, prefix, soak or streams, got %q", c.suite))
	}
	if c.rounds < 1 {
		errs = append(errs, errors.New("-rounds must be at least 1"))
	}
	if c.duration < time.Second {
		errs = append(errs, errors.New("-duration must be at least 1s"))
	}
	if c.streams < 1 || c.chunks < 2 {
		errs = append(errs, errors.New("-streams must be at least 1 and -chunks at least 2"))
	}
	for _, bin := range []*string{&c.vigil, &c.jaeger, &c.nginx, &c.wrk, &c.redis} {
		if *bin == "" {
			continue
		}
		p, err := exec.LookPath(*bin)
		if err == nil {
			p, err = filepath.Abs(p)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*bin = p
	}
	return c, errors.Join(errs...)
}

// phase prints a progress line.
func phase(format string, args ...any) {
	fmt.Printf("== "+format+"\n", args...)
}
