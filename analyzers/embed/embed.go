// Package embed embeds a sample of prompts through an embedding backend's
// /v1/embeddings, off the request path, for input drift's embedding test.
//
// The analyzers' dispatcher offers each sampled prompt (Offer), which
// never blocks: a full queue drops the prompt and counts it. A bounded
// number of workers take prompts in batches, ask the backend for their
// vectors, project them (content.Project) and hand them to the prompt's
// monitors. A slow or failing backend costs dropped and failed prompts,
// never a client's time: the workers back off after a failure, and
// nothing waits for them but the queue.
package embed

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/config"
)

// A Target takes a prompt's projected embedding: an input drift monitor.
type Target interface {
	AddEmbedding(at time.Time, v *[content.VectorDim]float32, chars float64)
}

// A Job is one prompt to embed: when it was seen, its length in
// characters, the text sent (its first max_chars characters) and the
// monitors its vector goes to (nil entries are skipped).
type Job struct {
	At    time.Time
	Chars float64
	Text  string
	To    [2]Target
}

// Outcomes of a prompt offered, as vigil_drift_embeddings_total counts
// them.
const (
	Embedded = "embedded" // its vector went to its monitors
	Dropped  = "dropped"  // the queue was full
	Failed   = "failed"   // its request failed or its answer was unreadable
)

// maxResponseBytes bounds an answer read: a batch of 2,048 vectors of
// 4,096 floats written in full is about 200 MB, far beyond any batch
// Vigil sends (analyzers.drift.text.embeddings.batch).
const maxResponseBytes = 64 << 20

// Backoff after a failed request: it doubles from minBackoff up to
// maxBackoff and resets on a success, so that a backend that is down is
// asked about once every maxBackoff per worker, not at the prompts' rate.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 10 * time.Second
)

// A Client embeds prompts. Offer is called by one goroutine; Run runs the
// workers until its context ends.
type Client struct {
	cfg   config.DriftEmbeddings
	url   string
	http  *http.Client
	log   *slog.Logger
	queue chan Job
	count *prometheus.CounterVec
	// down is set while requests fail, so that a failure is logged once
	// per episode.
	down atomic.Bool
	// counts mirror count, for Stats.
	embedded, dropped, failed atomic.Int64
}

// New returns a Client of cfg (validated, with a backend) that posts to
// baseURL's /v1/embeddings. Its metrics go to reg.
func New(cfg config.DriftEmbeddings, baseURL string, reg prometheus.Registerer, log *slog.Logger) *Client {
	if log == nil {
		log = slog.Default()
	}
	c := &Client{
		cfg: cfg,
		url: strings.TrimRight(baseURL, "/") + "/v1/embeddings",
		http: &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{
			MaxIdleConnsPerHost: cfg.Concurrency, IdleConnTimeout: 90 * time.Second,
		}},
		log:   log,
		queue: make(chan Job, cfg.Queue),
		count: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_drift_embeddings_total",
			Help: "Prompts sampled for the embedding test, by outcome: embedded, dropped (queue full) or failed.",
		}, []string{"outcome"}),
	}
	for _, o := range []string{Embedded, Dropped, Failed} {
		c.count.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(c.count)
	}
	return c
}

// Offer queues j without waiting; it returns false, and counts the
// prompt dropped, when the queue is full.
func (c *Client) Offer(j Job) bool {
	select {
	case c.queue <- j:
		return true
	default:
		c.add(Dropped, 1)
		return false
	}
}

// Stats returns the counts so far and the prompts waiting.
func (c *Client) Stats() inputdrift.EmbedderStats {
	return inputdrift.EmbedderStats{Embedded: c.embedded.Load(), Dropped: c.dropped.Load(), Failed: c.failed.Load(), Queued: len(c.queue)}
}

func (c *Client) add(outcome string, n int) {
	c.count.WithLabelValues(outcome).Add(float64(n))
	switch outcome {
	case Embedded:
		c.embedded.Add(int64(n))
	case Dropped:
		c.dropped.Add(int64(n))
	case Failed:
		c.failed.Add(int64(n))
	}
}

// Run runs the workers until ctx ends; prompts still queued then are
// left (the process is stopping).
func (c *Client) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for range c.cfg.Concurrency {
		wg.Go(func() { c.work(ctx) })
	}
	wg.Wait()
	c.http.CloseIdleConnections()
}

// work takes a batch (the first job waited for, then what is queued, up
// to batch), embeds it, and after a failure waits out its backoff.
func (c *Client) work(ctx context.Context) {
	backoff := time.Duration(0)
	batch := make([]Job, 0, c.cfg.Batch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case j := <-c.queue:
			batch = append(batch, j)
		}
	fill:
		for len(batch) < c.cfg.Batch {
			select {
			case j := <-c.queue:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		if err := c.embed(ctx, batch); err != nil {
			c.add(Failed, len(batch))
			if ctx.Err() != nil {
				return
			}
			if !c.down.Swap(true) {
				c.log.Warn("embedding requests fail: the embedding test loses those prompts until they succeed",
					"backend", c.cfg.Backend, "model", c.cfg.Model, "err", err)
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		if c.down.Swap(false) {
			c.log.Info("embedding requests succeed again", "backend", c.cfg.Backend, "model", c.cfg.Model)
		}
		c.add(Embedded, len(batch))
	}
}

type embeddingRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format"`
}

type embeddingResponse struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
}

// embed asks for the batch's vectors and hands each, projected, to its
// job's monitors. Either every vector is handed over or none is.
func (c *Client) embed(ctx context.Context, batch []Job) error {
	req := embeddingRequest{Model: c.cfg.Model, Input: make([]string, len(batch)), EncodingFormat: "float"}
	for i, j := range batch {
		req.Input[i] = j.Text
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data[:min(len(data), 200)]))
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("answer over %d bytes", maxResponseBytes)
	}
	var er embeddingResponse
	if err := json.Unmarshal(data, &er); err != nil {
		return fmt.Errorf("unreadable answer: %w", err)
	}
	if len(er.Data) != len(batch) {
		return fmt.Errorf("%d vectors for %d inputs", len(er.Data), len(batch))
	}
	vecs := make([][content.VectorDim]float32, len(batch))
	done := make([]bool, len(batch))
	for _, d := range er.Data {
		if d.Index < 0 || d.Index >= len(batch) || done[d.Index] {
			return fmt.Errorf("vector index %d out of range or repeated", d.Index)
		}
		if !content.Project(&vecs[d.Index], d.Embedding) {
			return fmt.Errorf("vector %d is zero or not finite", d.Index)
		}
		done[d.Index] = true
	}
	for i, j := range batch {
		for _, t := range j.To {
			if t != nil {
				t.AddEmbedding(j.At, &vecs[i], j.Chars)
			}
		}
	}
	return nil
}
