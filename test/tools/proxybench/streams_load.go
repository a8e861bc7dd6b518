package main

// The stream suite's load generator, `proxybench streamload`: a process of
// its own, so that neither its CPU nor its garbage collector is in the
// driver's samples or the peer's figures. Each client is one connection and
// one stream at a time, written as raw HTTP/1.1 (a prepared request,
// http.ReadResponse over a bufio.Reader, events read line by line): no
// http.Transport, no pool, no goroutine per connection but the client's
// own, so that 10,000 clients cost little more than their sockets. Clients
// start evenly over -ramp and each sends -per-client streams back to back
// on its connection, so that between the last client's start and the first
// client's end all of them are in flight at once (the steady window). It
// prints one JSON object, a streamLoadResult, on stdout.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"
)

// streamLoadConfig is what one run of the load generator does.
type streamLoadConfig struct {
	addr             string // host:port of the peer
	clients          int
	perClient        int // streams each client sends, back to back
	chunks           int // content events a whole stream has
	ramp             time.Duration
	logprobShare     float64 // share of streams that ask for logprobs
	streamTimeout    time.Duration
	warmup           bool // short streams (4 chunks) only, nothing timed
	warmupChunks     int
	requestTemplates [2][]byte // without and with logprobs
}

// streamLoadResult is what the load generator measured; times are wall
// clock (Unix nanoseconds), so that the driver can place its own samples.
type streamLoadResult struct {
	Clients int `json:"clients"`
	// Streams counts those that came whole: 200, every content event
	// (with logprobs when asked for) and [DONE].
	Streams       int      `json:"streams"`
	Errors        int      `json:"errors"`
	ErrorExamples []string `json:"error_examples,omitempty"`
	// Events counts the SSE events read (data: lines), whole streams or
	// not; ContentEvents those with a delta's content.
	Events        int64 `json:"events"`
	ContentEvents int64 `json:"content_events"`
	LogprobStream int   `json:"logprob_streams"`
	// Gaps are between consecutive content events of a stream as read.
	GapP50Ms  float64 `json:"gap_p50_ms"`
	GapP99Ms  float64 `json:"gap_p99_ms"`
	GapP999Ms float64 `json:"gap_p999_ms"`
	GapMaxMs  float64 `json:"gap_max_ms"`
	// Duration is from writing the request to reading [DONE]; TTFT to the
	// first content event.
	DurationP50Ms float64 `json:"duration_p50_ms"`
	DurationP99Ms float64 `json:"duration_p99_ms"`
	TTFTP50Ms     float64 `json:"ttft_p50_ms"`
	TTFTP99Ms     float64 `json:"ttft_p99_ms"`
	StartNs       int64   `json:"start_ns"`
	// SteadyFromNs is when the last client sent its first request,
	// SteadyToNs when the first client finished its last stream: between
	// them every client has a stream in flight (0 and 0 when that window is
	// empty).
	SteadyFromNs int64 `json:"steady_from_ns"`
	SteadyToNs   int64 `json:"steady_to_ns"`
	EndNs        int64 `json:"end_ns"`
	// CPUSeconds is the load generator's own user+system time.
	CPUSeconds float64 `json:"cpu_s"`
}

// streamRequestBody is the suite's chat request; logprobs adds "logprobs":
// true and "top_logprobs": 5.
func streamRequestBody(maxTokens int, logprobs bool) string {
	lp := ""
	if logprobs {
		lp = `,"logprobs":true,"top_logprobs":5`
	}
	return fmt.Sprintf(`{"model":"%s","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Tell a long story."}],"max_tokens":%d,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}%s}`,
		mockModel, maxTokens, lp)
}

// rawRequest is a whole HTTP/1.1 POST of body to chatPath on host; extra
// is more header lines, each ending in CRLF.
func rawRequest(host, extra, body string) []byte {
	return fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n%sContent-Length: %d\r\n\r\n%s",
		chatPath, host, extra, len(body), body)
}

// wantsLogprobs reports whether stream id (0, 1, 2, ...) asks for
// logprobs, so that exactly share of every run of streams does, spread
// evenly: stream id does when floor((id+1)·share) > floor(id·share).
func wantsLogprobs(id int, share float64) bool {
	if share <= 0 {
		return false
	}
	if share >= 1 {
		return true
	}
	return int(float64(id+1)*share) > int(float64(id)*share)
}

// clientStats is one client's share of a streamLoadResult; the client's
// goroutine writes it, the merge reads it after the client returns.
type clientStats struct {
	gaps          []int32 // µs
	durations     []int32 // µs
	ttfts         []int32 // µs
	events        int64
	contentEvents int64
	streams       int
	logprob       int
	errors        int
	errExamples   []string
	firstSent     time.Time
	lastDone      time.Time
}

func (s *clientStats) fail(err error) {
	s.errors++
	if len(s.errExamples) < 3 {
		s.errExamples = append(s.errExamples, err.Error())
	}
}

// runStreamLoad runs cfg's clients and merges what they measured.
func runStreamLoad(ctx context.Context, cfg streamLoadConfig) streamLoadResult {
	start := time.Now()
	stats := make([]clientStats, cfg.clients)
	var wg sync.WaitGroup
	for i := range cfg.clients {
		at := start.Add(time.Duration(int64(cfg.ramp) * int64(i) / int64(cfg.clients)))
		wg.Go(func() { rawStreamClient(ctx, cfg, i, at, &stats[i]) })
	}
	wg.Wait()
	r := streamLoadResult{Clients: cfg.clients, StartNs: start.UnixNano(), EndNs: time.Now().UnixNano()}
	var gaps, durs, ttfts []int32
	var steadyFrom, steadyTo time.Time
	for i := range stats {
		s := &stats[i]
		r.Streams += s.streams
		r.Errors += s.errors
		r.Events += s.events
		r.ContentEvents += s.contentEvents
		r.LogprobStream += s.logprob
		for _, e := range s.errExamples {
			if len(r.ErrorExamples) < 5 && !slices.Contains(r.ErrorExamples, e) {
				r.ErrorExamples = append(r.ErrorExamples, e)
			}
		}
		gaps = append(gaps, s.gaps...)
		durs = append(durs, s.durations...)
		ttfts = append(ttfts, s.ttfts...)
		if s.firstSent.After(steadyFrom) {
			steadyFrom = s.firstSent
		}
		if steadyTo.IsZero() || s.lastDone.Before(steadyTo) {
			steadyTo = s.lastDone
		}
	}
	if !steadyFrom.IsZero() && steadyTo.After(steadyFrom) {
		r.SteadyFromNs, r.SteadyToNs = steadyFrom.UnixNano(), steadyTo.UnixNano()
	}
	slices.Sort(gaps)
	slices.Sort(durs)
	slices.Sort(ttfts)
	usMs := func(us int32) float64 { return float64(us) / 1000 }
	r.GapP50Ms, r.GapP99Ms, r.GapP999Ms = usMs(nearestRank(gaps, 0.50)), usMs(nearestRank(gaps, 0.99)), usMs(nearestRank(gaps, 0.999))
	if len(gaps) > 0 {
		r.GapMaxMs = usMs(gaps[len(gaps)-1])
	}
	r.DurationP50Ms, r.DurationP99Ms = usMs(nearestRank(durs, 0.50)), usMs(nearestRank(durs, 0.99))
	r.TTFTP50Ms, r.TTFTP99Ms = usMs(nearestRank(ttfts, 0.50)), usMs(nearestRank(ttfts, 0.99))
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		r.CPUSeconds = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return r
}

// nearestRank returns the q-quantile of sorted by nearest rank (as
// percentile does for durations); the zero value for none.
func nearestRank[T cmp.Ordered](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// rawStreamClient is client i: from at on, cfg.perClient streams on one
// connection (a new one after an error or a close).
func rawStreamClient(ctx context.Context, cfg streamLoadConfig, i int, at time.Time, s *clientStats) {
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	if !cfg.warmup {
		s.gaps = make([]int32, 0, cfg.perClient*(cfg.chunks-1))
		s.durations = make([]int32, 0, cfg.perClient)
		s.ttfts = make([]int32, 0, cfg.perClient)
	}
	var conn net.Conn
	var br, lines *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	// A cancelled run closes the connection, which ends a blocked read.
	stop := context.AfterFunc(ctx, func() {
		if c := conn; c != nil {
			c.Close()
		}
	})
	defer stop()
	for k := range cfg.perClient {
		if ctx.Err() != nil {
			return
		}
		lp := wantsLogprobs(k*cfg.clients+i, cfg.logprobShare)
		if conn == nil {
			c, err := net.DialTimeout("tcp", cfg.addr, 10*time.Second)
			if err != nil {
				s.fail(fmt.Errorf("dial: %w", err))
				s.lastDone = time.Now()
				continue
			}
			conn = c
			if br == nil {
				br = bufio.NewReaderSize(conn, 4<<10)
				lines = bufio.NewReaderSize(nil, 4<<10)
			} else {
				br.Reset(conn)
			}
		}
		req := cfg.requestTemplates[0]
		if lp {
			req = cfg.requestTemplates[1]
			s.logprob++
		}
		reuse, err := oneRawStream(conn, br, lines, req, lp, cfg, s)
		s.lastDone = time.Now()
		if err != nil {
			s.fail(fmt.Errorf("stream %d of the client: %w", k+1, err))
		}
		if err != nil || !reuse {
			conn.Close()
			conn = nil
		}
	}
}

var (
	dataPrefix   = []byte("data:")
	doneData     = []byte("[DONE]")
	contentDelta = []byte(`"delta":{"content":`)
	topLogprobs  = []byte(`"top_logprobs"`)
)

// oneRawStream writes req on conn and reads the answer's events to the
// end, timing each content event. reuse reports whether the connection may
// carry the next request. A stream that is not whole is an error.
func oneRawStream(conn net.Conn, br, lines *bufio.Reader, req []byte, lp bool, cfg streamLoadConfig, s *clientStats) (reuse bool, err error) {
	conn.SetDeadline(time.Now().Add(cfg.streamTimeout))
	sent := time.Now()
	if s.firstSent.IsZero() {
		s.firstSent = sent
	}
	if _, err := conn.Write(req); err != nil {
		return false, fmt.Errorf("write: %w", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false, fmt.Errorf("read response: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// The start of the answer says why (an error's JSON).
		head, _ := io.ReadAll(io.LimitReader(resp.Body, 160))
		io.Copy(io.Discard, resp.Body)
		return !resp.Close, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(head))
	}
	lines.Reset(resp.Body)
	want := cfg.chunks
	if cfg.warmup {
		want = cfg.warmupChunks
	}
	var last time.Time
	content, missingLP := 0, 0
	done, midLine := false, false
	for {
		line, err := lines.ReadSlice('\n')
		// A line longer than the buffer comes in pieces: only the first
		// is looked at.
		if !midLine && bytes.HasPrefix(line, dataPrefix) {
			now := time.Now()
			s.events++
			data := bytes.TrimSpace(line[len(dataPrefix):])
			switch {
			case bytes.Equal(data, doneData):
				done = true
			case bytes.Contains(data, contentDelta):
				content++
				s.contentEvents++
				if lp && !bytes.Contains(data, topLogprobs) {
					missingLP++
				}
				if !cfg.warmup {
					if last.IsZero() {
						s.ttfts = append(s.ttfts, usOf(now.Sub(sent)))
					} else {
						s.gaps = append(s.gaps, usOf(now.Sub(last)))
					}
				}
				last = now
			}
		}
		midLine = errors.Is(err, bufio.ErrBufferFull)
		if err == io.EOF {
			break
		}
		if err != nil && !midLine {
			return false, fmt.Errorf("read events after %d of %d content events: %w", content, want, err)
		}
	}
	switch {
	case !done:
		return false, fmt.Errorf("no [DONE] after %d of %d content events", content, want)
	case content != want:
		return !resp.Close, fmt.Errorf("%d content events, want %d", content, want)
	case missingLP > 0:
		return !resp.Close, fmt.Errorf("%d content events without the logprobs asked for", missingLP)
	}
	s.streams++
	if !cfg.warmup {
		s.durations = append(s.durations, usOf(time.Since(sent)))
	}
	return !resp.Close, nil
}

// usOf is d in whole microseconds, capped to what an int32 holds (35
// minutes).
func usOf(d time.Duration) int32 {
	return int32(min(d.Microseconds(), 1<<31-1))
}

// runStreamLoadCmd is `proxybench streamload`.
func runStreamLoadCmd(args []string) error {
	fs := flag.NewFlagSet("streamload", flag.ContinueOnError)
	var cfg streamLoadConfig
	fs.StringVar(&cfg.addr, "addr", "", "peer `host:port`")
	fs.IntVar(&cfg.clients, "clients", 1000, "concurrent streams")
	fs.IntVar(&cfg.perClient, "per-client", 3, "streams each client sends, back to back")
	fs.IntVar(&cfg.chunks, "chunks", 200, "content events of a whole stream")
	fs.DurationVar(&cfg.ramp, "ramp", 2*time.Second, "clients start evenly over this time")
	fs.Float64Var(&cfg.logprobShare, "logprobs", 0.5, "share of streams that ask for logprobs")
	fs.DurationVar(&cfg.streamTimeout, "timeout", 5*time.Minute, "longest a stream may take")
	fs.BoolVar(&cfg.warmup, "warmup", false, "short streams (4 chunks, the mock's "+benchChunksHeader+" header), nothing timed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if cfg.addr == "" || cfg.clients < 1 || cfg.perClient < 1 || cfg.chunks < 2 {
		return errors.New("streamload: want -addr, -clients ≥ 1, -per-client ≥ 1, -chunks ≥ 2")
	}
	extra := ""
	if cfg.warmup {
		cfg.warmupChunks = min(4, cfg.chunks)
		extra = fmt.Sprintf("%s: %d\r\n", benchChunksHeader, cfg.warmupChunks)
	}
	for i, lp := range []bool{false, true} {
		cfg.requestTemplates[i] = rawRequest(cfg.addr, extra, streamRequestBody(cfg.chunks, lp))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := runStreamLoad(ctx, cfg)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}
