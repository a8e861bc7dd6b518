package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// chatBody is the request every load generator sends: small, like a short
// chat turn, so that the proxies' per-request cost dominates; -prompt-chars
// makes its prompt longer (withPrompt).
var chatBody = `{"model":"` + mockModel + `","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16,"temperature":0.7}`

// withPrompt returns chatBody with a user prompt of n characters of
// English prose: what the analyzers read of a longer prompt, input
// drift's content test included.
func withPrompt(n int) string {
	const prose = "The operations team reviewed last night's incident: a configuration change slowed the payment service, retries piled up, and the queue grew until the alert fired. "
	text := strings.Repeat(prose, n/len(prose)+1)[:n]
	return `{"model":"` + mockModel + `","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + text + `"}],"max_tokens":16,"temperature":0.7}`
}

// streamBody is chatBody asking for a stream.
const streamBody = `{"model":"` + mockModel + `","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Count to thirty-two."}],"max_tokens":64,"temperature":0.7,"stream":true}`

const chatPath = "/v1/chat/completions"

// wrkResult is one closed-loop run of wrk.
type wrkResult struct {
	// RPS is wrk's requests per second less the share of errors.
	RPS      float64 `json:"rps"`
	Requests int64   `json:"requests"`
	// Errors counts non-2xx answers and socket errors (connect, read,
	// write, timeout).
	Errors int64 `json:"errors"`
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkRequests = regexp.MustCompile(`(\d+) requests in`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// wrkScript writes the Lua script that makes wrk POST chatBody, and
// returns its path.
func wrkScript(dir string) (string, error) {
	path := filepath.Join(dir, "chat.lua")
	script := "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = [[" + chatBody + "]]\n"
	return path, os.WriteFile(path, []byte(script), 0o644)
}

// runWrk runs wrk against base for d and parses its summary.
func runWrk(ctx context.Context, c config, script, base string, d time.Duration) (wrkResult, error) {
	args := []string{
		"-t", strconv.Itoa(c.wrkThreads), "-c", strconv.Itoa(c.wrkConns),
		// wrk takes whole seconds.
		"-d", fmt.Sprintf("%ds", max(1, int(d.Round(time.Second).Seconds()))), "-s", script, base + chatPath,
	}
	out, err := exec.CommandContext(ctx, c.wrk, args...).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %v: %w\n%s", args, err, out)
	}
	var r wrkResult
	m := wrkRPS.FindSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk: no Requests/sec in its output:\n%s", out)
	}
	r.RPS, _ = strconv.ParseFloat(string(m[1]), 64)
	if m := wrkRequests.FindSubmatch(out); m != nil {
		r.Requests, _ = strconv.ParseInt(string(m[1]), 10, 64)
	}
	if m := wrkNon2xx.FindSubmatch(out); m != nil {
		n, _ := strconv.ParseInt(string(m[1]), 10, 64)
		r.Errors += n
	}
	if m := wrkSocket.FindSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(string(s), 10, 64)
			r.Errors += n
		}
	}
	// wrk counts error answers among its requests; only answers count.
	if r.Requests > 0 {
		r.RPS *= max(0, float64(r.Requests-r.Errors)) / float64(r.Requests)
	}
	return r, nil
}

// rateResult is one fixed-rate run.
type rateResult struct {
	Rate     int     `json:"rate"`
	Requests int     `json:"requests"` // answered 200
	Errors   int     `json:"errors"`
	P50Ms    float64 `json:"p50_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MaxMs    float64 `json:"max_ms"`
	// CPUUsPerReq is the CPU time of the target's processes over the run
	// divided by the requests answered; 0 when the target has none.
	CPUUsPerReq float64 `json:"cpu_us_per_req"`
	// AuxCPUUsPerReq is the same for helper processes charged to the
	// target (Jaeger and Redis for vigil-full), by name.
	AuxCPUUsPerReq map[string]float64 `json:"aux_cpu_us_per_req,omitempty"`
	// Slowest are the five slowest requests, slowest first, with when
	// they were sent: clustered times point at a pause of the target
	// (garbage collection, a periodic task), scattered ones at the machine.
	Slowest []slowRequest `json:"slowest,omitempty"`
}

// slowRequest is one request of a fixed-rate run.
type slowRequest struct {
	AtS float64 `json:"at_s"` // sent this long after the run began
	Ms  float64 `json:"ms"`
}

// runRate sends chatBody to t at rate requests a second for d (open loop,
// vegeta) after a half-second warm-up at the same rate on the same
// connections, and measures latency and the CPU the target's processes
// used.
func runRate(ctx context.Context, t *target, rate int, d time.Duration) (rateResult, error) {
	r := rateResult{Rate: rate}
	// One client for the warm-up and the measured run, so that the latter
	// reuses the former's connections: keep-alive, HTTP/1.1, no proxy.
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: vegeta.DefaultConnections,
			DisableCompression:  true,
		},
	}
	defer client.CloseIdleConnections()
	tr := vegeta.NewStaticTargeter(vegeta.Target{
		Method: http.MethodPost,
		URL:    t.base + chatPath,
		Body:   []byte(chatBody),
		Header: http.Header{"Content-Type": {"application/json"}},
	})
	pacer := vegeta.ConstantPacer{Freq: rate, Per: time.Second}
	// An attacker stops itself at the end of an attack, so each attack
	// gets its own.
	var slow []slowRequest
	attack := func(d time.Duration) (lat []time.Duration, errs int) {
		atk := vegeta.NewAttacker(vegeta.Client(client))
		stop := context.AfterFunc(ctx, func() { atk.Stop() })
		defer stop()
		lat = make([]time.Duration, 0, int(float64(rate)*d.Seconds())+16)
		slow = slow[:0]
		began := time.Now()
		for res := range atk.Attack(tr, pacer, d, t.name) {
			if res.Code != http.StatusOK || res.Error != "" {
				errs++
				continue
			}
			lat = append(lat, res.Latency)
			if len(slow) < 5 || ms(res.Latency) > slow[len(slow)-1].Ms {
				slow = append(slow, slowRequest{AtS: res.Timestamp.Sub(began).Seconds(), Ms: ms(res.Latency)})
				slices.SortFunc(slow, func(a, b slowRequest) int { return cmp.Compare(b.Ms, a.Ms) })
				slow = slow[:min(len(slow), 5)]
			}
		}
		return lat, errs
	}
	attack(500 * time.Millisecond)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	cpu0, aux0, err := t.cpu()
	if err != nil {
		return r, err
	}
	lat, errs := attack(d)
	cpu1, aux1, err := t.cpu()
	if err != nil {
		return r, err
	}
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.Requests, r.Errors = len(lat), errs
	if len(lat) == 0 {
		return r, nil
	}
	slices.Sort(lat)
	r.P50Ms = ms(percentile(lat, 0.50))
	r.P99Ms = ms(percentile(lat, 0.99))
	r.MaxMs = ms(lat[len(lat)-1])
	r.Slowest = slices.Clone(slow)
	if t.pids != nil {
		r.CPUUsPerReq = float64((cpu1 - cpu0).Microseconds()) / float64(len(lat))
	}
	for name, c1 := range aux1 {
		if r.AuxCPUUsPerReq == nil {
			r.AuxCPUUsPerReq = map[string]float64{}
		}
		r.AuxCPUUsPerReq[name] = float64((c1 - aux0[name]).Microseconds()) / float64(len(lat))
	}
	return r, nil
}

// streamResult is one run of sequential streamed requests.
type streamResult struct {
	Streams int `json:"streams"` // completed with the expected events
	Errors  int `json:"errors"`  // failed, or with a wrong number of events
	// TTFT is from sending the request to reading the first SSE event.
	TTFTP50Ms float64 `json:"ttft_p50_ms"`
	TTFTP99Ms float64 `json:"ttft_p99_ms"`
	// Gaps are between consecutive content events as the client read them.
	GapP50Ms float64 `json:"gap_p50_ms"`
	GapP99Ms float64 `json:"gap_p99_ms"`
	// Coalesced is the share of gaps under a quarter of the backend's gap:
	// two events that reached the client together, the second held back.
	Coalesced float64 `json:"coalesced"`
}

// streamClient reads every stream: one connection, reused, no compression.
var streamClient = &http.Client{
	Timeout:   30 * time.Second,
	Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4},
}

// runStreams sends n streamed requests to t one after another and times
// each event's arrival. A stream counts as an error unless it brings
// exactly chunks content events and [DONE].
func runStreams(ctx context.Context, t *target, n, chunks int, gap time.Duration) (streamResult, error) {
	var r streamResult
	var ttfts, gaps []time.Duration
	arrivals := make([]time.Duration, 0, chunks+2)
	for range n {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		arrivals = arrivals[:0]
		done, err := oneStream(ctx, t.base, &arrivals)
		if err != nil || !done || len(arrivals) != chunks {
			r.Errors++
			continue
		}
		r.Streams++
		ttfts = append(ttfts, arrivals[0])
		for i := 1; i < len(arrivals); i++ {
			gaps = append(gaps, arrivals[i]-arrivals[i-1])
		}
	}
	if len(ttfts) == 0 {
		return r, nil
	}
	slices.Sort(ttfts)
	r.TTFTP50Ms = ms(percentile(ttfts, 0.50))
	r.TTFTP99Ms = ms(percentile(ttfts, 0.99))
	if len(gaps) > 0 {
		slices.Sort(gaps)
		r.GapP50Ms = ms(percentile(gaps, 0.50))
		r.GapP99Ms = ms(percentile(gaps, 0.99))
		held := 0
		for _, g := range gaps {
			if g < gap/4 {
				held++
			}
		}
		r.Coalesced = float64(held) / float64(len(gaps))
	}
	return r, nil
}

// oneStream sends one streamed request and appends to arrivals the time,
// since the request was sent, at which each content event was read. done
// reports whether [DONE] was read.
func oneStream(ctx context.Context, base string, arrivals *[]time.Duration) (done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+chatPath, bytes.NewReader([]byte(streamBody)))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := streamClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return false, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = bytes.TrimSpace(data)
			if bytes.Equal(data, []byte("[DONE]")) {
				done = true
			} else if bytes.Contains(data, []byte(`"content"`)) {
				*arrivals = append(*arrivals, time.Since(start))
			}
		}
		if err == io.EOF {
			return done, nil
		}
		if err != nil {
			return done, err
		}
	}
}

// percentile returns the q-quantile of sorted (nearest rank).
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
