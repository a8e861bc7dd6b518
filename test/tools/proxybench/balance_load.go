package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// sample is one request of the balance and prefix suites' load.
type sample struct {
	at      time.Duration // sent, since the load began
	backend string        // X-Vigil-Backend of the answer
	ttft    time.Duration // to the first SSE event with content
	err     string        // why it failed; empty when it streamed content to the end
	// tenant is the prefix suite's tenant of the request (0 in the
	// balance suite); prompt and cached are the usage the stream ended
	// with (prompt_tokens, prompt_tokens_details.cached_tokens), 0 when it
	// reported none.
	tenant         int
	prompt, cached int
}

// request is what a client sends next: the URL, the JSON body and, for
// the prefix suite, the tenant it is sent for.
type request struct {
	url, body string
	tenant    int
}

// requestSource returns client i's requests, one per call; each client
// calls its own from its goroutine only.
type requestSource func(client int) func() request

// loadRun is closed-loop streaming load on one gateway: clients each send
// a request, read the stream to its end and send the next at once, on
// connections kept alive. Its methods are for the goroutine that started
// it; the clients append samples under mu.
type loadRun struct {
	began  time.Time
	client *http.Client
	quit   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	samples []sample

	stopped bool
	sorted  []sample // set by the first stop
}

// startLoad starts clients sending the requests of next until stop or
// until ctx is done.
func startLoad(ctx context.Context, clients int, next requestSource) *loadRun {
	l := &loadRun{
		began: time.Now(),
		client: &http.Client{
			Timeout:   30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true},
		},
		quit: make(chan struct{}),
	}
	for i := range clients {
		next := next(i)
		l.wg.Go(func() {
			for {
				select {
				case <-l.quit:
					return
				case <-ctx.Done():
					return
				default:
				}
				rq := next()
				s := sample{at: time.Since(l.began), tenant: rq.tenant}
				var err error
				s.backend, s.ttft, s.prompt, s.cached, err = chatStream(ctx, l.client, rq.url, rq.body)
				if err != nil {
					s.err = err.Error()
				}
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
				if err != nil {
					// A gateway that fails fast (503: no backend) must
					// not turn the clients into a busy loop.
					sleep(ctx, 10*time.Millisecond)
				}
			}
		})
	}
	return l
}

// elapsed is the time since the load began.
func (l *loadRun) elapsed() time.Duration { return time.Since(l.began) }

// snapshot returns the samples so far: the requests answered to the end.
func (l *loadRun) snapshot() []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.samples)
}

// stop stops the clients after their requests in flight, which are read
// to the end and kept, and returns every sample ordered by the time it
// was sent. Later calls return the same.
func (l *loadRun) stop() []sample {
	if l.stopped {
		return l.sorted
	}
	l.stopped = true
	close(l.quit)
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.sorted = l.snapshot()
	slices.SortFunc(l.sorted, func(a, b sample) int { return cmp.Compare(a.at, b.at) })
	return l.sorted
}

// chatStream sends one streamed chat request and reads its answer to the
// end. ttft is the time to the first SSE event carrying content: the
// simulator, as vLLM, opens with a chunk holding the role and empty
// content, which does not count. prompt and cached are the usage of the
// stream's usage chunk (stream_options.include_usage), 0 without one.
func chatStream(ctx context.Context, client *http.Client, url, body string) (backend string, ttft time.Duration, prompt, cached int, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return "", 0, 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, 0, 0, err
	}
	defer resp.Body.Close()
	backend = resp.Header.Get("X-Vigil-Backend")
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return backend, 0, 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			switch {
			case bytes.Equal(data, []byte("[DONE]")):
				done = true
			case ttft == 0 && hasContent(data):
				ttft = time.Since(start)
			case bytes.Contains(data, []byte(`"usage":{`)):
				prompt, cached = streamUsage(data)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return backend, ttft, prompt, cached, err
		}
	}
	switch {
	case ttft == 0:
		return backend, 0, prompt, cached, errors.New("stream without content")
	case !done:
		return backend, ttft, prompt, cached, errors.New("stream without [DONE]")
	}
	return backend, ttft, prompt, cached, nil
}

// streamUsage reads prompt_tokens and prompt_tokens_details.cached_tokens
// from an SSE event's JSON; 0 for what it lacks.
func streamUsage(data []byte) (prompt, cached int) {
	var ev struct {
		Usage *struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails *struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Usage == nil {
		return 0, 0
	}
	if d := ev.Usage.PromptTokensDetails; d != nil {
		cached = d.CachedTokens
	}
	return ev.Usage.PromptTokens, cached
}

// hasContent reports whether an SSE event's JSON holds a non-empty
// "content" string.
func hasContent(data []byte) bool {
	key := []byte(`"content":"`)
	i := bytes.Index(data, key)
	return i >= 0 && i+len(key) < len(data) && data[i+len(key)] != '"'
}

// summarize fills r's counts, shares and TTFT percentiles from the
// samples sent in [from, to); names are the backends, shown with a zero
// share when they served nothing.
func (r *balanceRun) summarize(samples []sample, names []string, from, to time.Duration) {
	r.Counts = map[string]int{}
	r.Shares = map[string]float64{}
	for _, n := range names {
		r.Counts[n] = 0
	}
	var ttfts []time.Duration
	for _, s := range samples {
		if s.at < from || s.at >= to {
			continue
		}
		if s.err != "" {
			r.Errors++
			if len(r.ErrorExamples) < 3 && !slices.Contains(r.ErrorExamples, s.err) {
				r.ErrorExamples = append(r.ErrorExamples, s.err)
			}
			continue
		}
		r.Requests++
		r.Counts[s.backend]++
		ttfts = append(ttfts, s.ttft)
	}
	for n, c := range r.Counts {
		if r.Requests > 0 {
			r.Shares[n] = float64(c) / float64(r.Requests)
		} else {
			r.Shares[n] = 0
		}
	}
	slices.Sort(ttfts)
	r.TTFTP50Ms = ms(percentile(ttfts, 0.50))
	r.TTFTP99Ms = ms(percentile(ttfts, 0.99))
}

// minWindowSamples is the fewest answered requests a share window needs
// to count.
const minWindowSamples = 20

// windowShare is backend's share of the answered requests sent in
// (t-shareWindow, t], and how many there were. ok holds the answered
// samples ordered by the time they were sent.
func windowShare(ok []sample, backend string, t time.Duration) (share float64, total int) {
	lo, _ := slices.BinarySearchFunc(ok, t-shareWindow+1, func(s sample, at time.Duration) int { return cmp.Compare(s.at, at) })
	hi, _ := slices.BinarySearchFunc(ok, t+1, func(s sample, at time.Duration) int { return cmp.Compare(s.at, at) })
	n := 0
	for _, s := range ok[lo:hi] {
		if s.backend == backend {
			n++
		}
	}
	total = hi - lo
	if total == 0 {
		return 0, 0
	}
	return float64(n) / float64(total), total
}

// answered returns the samples that streamed to the end, ordered by the
// time they were sent.
func answered(samples []sample) []sample {
	ok := slices.DeleteFunc(slices.Clone(samples), func(s sample) bool { return s.err != "" })
	slices.SortFunc(ok, func(a, b sample) int { return cmp.Compare(a.at, b.at) })
	return ok
}

// recoveryTime is how long after recoveredAt the backend's share over the
// sliding window first reached recoveredShare of an even share among n
// backends, looked at every 100 ms up to the last request sent; false
// when it did not.
func recoveryTime(samples []sample, backend string, n int, recoveredAt time.Duration) (time.Duration, bool) {
	ok := answered(samples)
	if len(ok) == 0 {
		return 0, false
	}
	last := ok[len(ok)-1].at
	for t := recoveredAt; t <= last; t += 100 * time.Millisecond {
		if share, total := windowShare(ok, backend, t); total >= minWindowSamples && share >= recoveredShare/float64(n) {
			return t - recoveredAt, true
		}
	}
	return 0, false
}

// newRecovery evaluates case d's run: the share before the recovery, the
// time to recover, and the share over time from the end of the warm-up.
func newRecovery(samples []sample, backend string, n int, recoveredAt, warmup time.Duration) *recovery {
	rc := &recovery{RecoveredAtS: recoveredAt.Seconds(), CapS: recoveryCap.Seconds(), WindowS: shareWindow.Seconds()}
	ok := answered(samples)
	rc.ShareBefore, _ = windowShare(ok, backend, recoveredAt)
	if t, found := recoveryTime(samples, backend, n, recoveredAt); found && t <= recoveryCap {
		s := t.Seconds()
		rc.Seconds = &s
	}
	if len(ok) == 0 {
		return rc
	}
	for t := warmup + shareWindow; t <= ok[len(ok)-1].at; t += 500 * time.Millisecond {
		if share, total := windowShare(ok, backend, t); total >= minWindowSamples {
			rc.Timeline = append(rc.Timeline, sharePoint{T: (t - recoveredAt).Seconds(), Share: share})
		}
	}
	return rc
}
