package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// AgentLoad is a node's load as its agent (`vigil agent`, GET /v1/load)
// last reported it. It is immutable once stored. Fractions are in [0, 1];
// NaN means the agent did not report the value (GPU values on a node
// without a GPU).
type AgentLoad struct {
	CPU, Mem, GPU, GPUMem float64
	// Sampled is the agent's own time of the sample; zero when it sent none.
	Sampled time.Time
	// AsOf is when this gateway first saw this sample: the signal's age is
	// measured from it on this gateway's clock, so an agent whose sampler
	// stops (it keeps answering with the same sample) goes stale whatever
	// the clocks' skew.
	AsOf time.Time
}

// ServerLoad is what the backend's Prometheus endpoint last reported. It is
// immutable once stored. NaN means the endpoint did not expose the value.
type ServerLoad struct {
	// Waiting and Running are request counts: vllm:num_requests_waiting and
	// vllm:num_requests_running, or TGI's tgi_queue_size and
	// tgi_batch_current_size (summed over the series, e.g. over models).
	Waiting, Running float64
	// KVCache is vllm:kv_cache_usage_perc (older vLLM:
	// vllm:gpu_cache_usage_perc), a fraction, averaged over the series.
	KVCache float64
	// PrefixQueries and PrefixHits are the server's prefix-cache counters
	// in tokens, summed over the series: vllm:prefix_cache_queries and
	// vllm:prefix_cache_hits, with or without the _total suffix (older
	// vLLM: vllm:gpu_prefix_cache_queries and _hits). Counters: they
	// reset when the server restarts (see [Backend.PrefixCache]).
	PrefixQueries, PrefixHits float64
	// AsOf is when it was read.
	AsOf time.Time
}

// AgentLoad returns the backend's last agent reading; nil before any.
func (b *Backend) AgentLoad() *AgentLoad { return b.agentLoad.Load() }

// StoreAgentLoad replaces the backend's agent reading.
func (b *Backend) StoreAgentLoad(l *AgentLoad) { b.agentLoad.Store(l) }

// ServerLoad returns the backend's last metrics reading; nil before any.
func (b *Backend) ServerLoad() *ServerLoad { return b.serverLoad.Load() }

// StoreServerLoad replaces the backend's metrics reading.
func (b *Backend) StoreServerLoad(l *ServerLoad) { b.serverLoad.Store(l) }

// A Scraper reads every backend's agent and metrics endpoint and stores what
// it reads on the backend. A failed read stores nothing: the last reading
// ages until the balancer finds it stale. Scrapers never touch the request
// path; the balancer reads what they stored.
type Scraper struct {
	Pool   *Pool
	Client *http.Client
	// Timeout bounds each read (the gateway gives it
	// balancer.scrape_interval). Zero: only ctx bounds it.
	Timeout time.Duration
	// StaleAfter is balancer.stale_after: an older metrics reading is not
	// used for the prefix-cache hit rate. Zero: readings never go stale.
	StaleAfter time.Duration
	// ModelsEvery is how many ScrapeAll rounds pass between reads of the
	// model lists (models.go), the first round reading them. Zero: model
	// lists are not read.
	ModelsEvery int
	// ModelsStaleAfter is how long a model list read last is used: a
	// backend whose list cannot be read for longer stops narrowing the
	// routing. Zero: three times ModelsEvery rounds' worth of Timeout, at
	// least a minute.
	ModelsStaleAfter time.Duration
	// OnError, if set, is called for each failed read; source is "agent",
	// "metrics" or "models".
	OnError func(b *Backend, source string, err error)

	rounds atomic.Int64 // ScrapeAll calls
}

// maxScrapeBytes bounds a response read from an agent or metrics endpoint.
const maxScrapeBytes = 4 << 20

// ScrapeAll reads every configured agent and metrics endpoint once (and,
// every ModelsEvery rounds, the model lists), concurrently, and waits for
// the results; then it samples each backend's prefix-cache counters.
func (s *Scraper) ScrapeAll(ctx context.Context) {
	round := s.rounds.Add(1) - 1
	models := s.ModelsEvery > 0 && round%int64(s.ModelsEvery) == 0
	var wg sync.WaitGroup
	for _, b := range s.Pool.backends {
		if models && b.discovers() {
			wg.Go(func() {
				if err := s.scrapeModels(ctx, b); err != nil && s.OnError != nil && ctx.Err() == nil {
					s.OnError(b, "models", err)
				}
			})
		}
		if b.Agent != nil {
			wg.Go(func() {
				if err := s.scrapeAgent(ctx, b); err != nil && s.OnError != nil && ctx.Err() == nil {
					s.OnError(b, "agent", err)
				}
			})
		}
		if b.Metrics != nil {
			wg.Go(func() {
				if err := s.scrapeMetrics(ctx, b); err != nil && s.OnError != nil && ctx.Err() == nil {
					s.OnError(b, "metrics", err)
				}
			})
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	if s.ModelsEvery > 0 {
		s.Pool.expireModels(now, s.modelsStaleAfter())
	}
	for _, b := range s.Pool.backends {
		b.samplePrefix(now, s.StaleAfter)
	}
}

func (s *Scraper) modelsStaleAfter() time.Duration {
	if s.ModelsStaleAfter > 0 {
		return s.ModelsStaleAfter
	}
	return max(3*time.Duration(s.ModelsEvery)*s.Timeout, time.Minute)
}

func (s *Scraper) get(ctx context.Context, url string) ([]byte, error) {
	return s.getLimit(ctx, url, maxScrapeBytes)
}

// getLimit reads url's answer, at most limit bytes of it.
func (s *Scraper) getLimit(ctx context.Context, url string, limit int) ([]byte, error) {
	if s.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	if err == nil && len(body) > limit {
		err = fmt.Errorf("response over %d bytes", limit)
	}
	return body, err
}

// agentJSON is the agent's GET /v1/load answer (nodeload.Load), read without
// importing package nodeload. Absent values are unknown.
type agentJSON struct {
	CPU    *float64  `json:"cpu"`
	Mem    *float64  `json:"mem"`
	GPU    *float64  `json:"gpu"`
	GPUMem *float64  `json:"gpu_mem"`
	HasGPU *bool     `json:"has_gpu"`
	Time   time.Time `json:"time"`
}

func (s *Scraper) scrapeAgent(ctx context.Context, b *Backend) error {
	body, err := s.get(ctx, b.Agent.JoinPath("/v1/load").String())
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	l, err := ParseAgentLoad(body)
	if err != nil {
		return err
	}
	now := time.Now()
	l.AsOf = now
	// The same sample again (the agent's sampler stopped) keeps its age.
	if prev := b.agentLoad.Load(); prev != nil && !l.Sampled.IsZero() && l.Sampled.Equal(prev.Sampled) {
		l.AsOf = prev.AsOf
	}
	b.agentLoad.Store(l)
	return nil
}

// ParseAgentLoad reads an agent's GET /v1/load JSON. Values outside [0, 1]
// are clamped; GPU values of a node reporting "has_gpu": false are unknown.
func ParseAgentLoad(body []byte) (*AgentLoad, error) {
	var j agentJSON
	if err := json.Unmarshal(body, &j); err != nil {
		return nil, fmt.Errorf("agent: invalid load JSON: %w", err)
	}
	l := &AgentLoad{CPU: fraction(j.CPU), Mem: fraction(j.Mem), GPU: fraction(j.GPU), GPUMem: fraction(j.GPUMem), Sampled: j.Time}
	if j.HasGPU != nil && !*j.HasGPU {
		l.GPU, l.GPUMem = math.NaN(), math.NaN()
	}
	return l, nil
}

// fraction clamps a reported value into [0, 1]; NaN when absent or not a number.
func fraction(v *float64) float64 {
	if v == nil || math.IsNaN(*v) {
		return math.NaN()
	}
	return min(max(*v, 0), 1)
}

func (s *Scraper) scrapeMetrics(ctx context.Context, b *Backend) error {
	body, err := s.get(ctx, b.Metrics.String())
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	l, err := ParseServerMetrics(body)
	if err != nil {
		return err
	}
	l.AsOf = time.Now()
	b.serverLoad.Store(l)
	return nil
}

// ErrNoLoadMetrics means a metrics endpoint exposed none of the series the
// balancer reads.
var ErrNoLoadMetrics = errors.New("metrics: none of vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc, tgi_queue_size, tgi_batch_current_size, vllm:prefix_cache_queries")

// ParseServerMetrics reads the load series of vLLM and TGI from the
// Prometheus text format. Counts are summed over series (one per model or
// engine); cache usage is averaged.
func ParseServerMetrics(body []byte) (*ServerLoad, error) {
	var (
		waiting, running, kv, gpuKV        acc
		queries, hits, gpuQueries, gpuHits acc
	)
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, v, ok := sample(line)
		if !ok {
			continue
		}
		switch string(name) {
		case "vllm:num_requests_waiting", "tgi_queue_size":
			waiting.add(v)
		case "vllm:num_requests_running", "tgi_batch_current_size":
			running.add(v)
		case "vllm:kv_cache_usage_perc":
			kv.add(v)
		case "vllm:gpu_cache_usage_perc":
			gpuKV.add(v)
		case "vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries":
			queries.add(v)
		case "vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits":
			hits.add(v)
		case "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries":
			gpuQueries.add(v)
		case "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits":
			gpuHits.add(v)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	if kv.n == 0 {
		kv = gpuKV
	}
	if queries.n == 0 && hits.n == 0 {
		queries, hits = gpuQueries, gpuHits
	}
	if waiting.n+running.n+kv.n+queries.n == 0 {
		return nil, ErrNoLoadMetrics
	}
	l := &ServerLoad{Waiting: waiting.sum(), Running: running.sum(), KVCache: kv.mean(), PrefixQueries: queries.sum(), PrefixHits: hits.sum()}
	if !math.IsNaN(l.KVCache) {
		l.KVCache = min(max(l.KVCache, 0), 1)
	}
	return l, nil
}

type acc struct {
	s float64
	n int
}

func (a *acc) add(v float64) {
	if !math.IsNaN(v) && !math.IsInf(v, 0) {
		a.s += v
		a.n++
	}
}

func (a acc) sum() float64 {
	if a.n == 0 {
		return math.NaN()
	}
	return max(a.s, 0)
}

func (a acc) mean() float64 {
	if a.n == 0 {
		return math.NaN()
	}
	return a.s / float64(a.n)
}

// sample splits a text-format sample line, `name{labels} value [timestamp]`,
// into its name and value.
func sample(line []byte) (name []byte, v float64, ok bool) {
	i := bytes.IndexAny(line, "{ \t")
	if i <= 0 {
		return nil, 0, false
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		end := labelsEnd(rest)
		if end < 0 {
			return nil, 0, false
		}
		rest = rest[end+1:]
	}
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	return name, v, err == nil
}

// labelsEnd returns the index of the '}' closing the label set that b
// starts with, -1 if none; a quoted value may hold '}' and escaped quotes.
func labelsEnd(b []byte) int {
	inQuote := false
	for j := 1; j < len(b); j++ {
		switch c := b[j]; {
		case inQuote && c == '\\':
			j++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '}':
			return j
		}
	}
	return -1
}
