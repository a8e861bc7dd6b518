// Package shadow compares backends with their references (signal 5,
// precision divergence): sampled shadow copies of clients' requests,
// teacher forcing and the greedy walk, run by a bounded pool of workers
// off the request path.
package shadow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// Shadow comparison (signal 5, precision divergence): for a sampled share
// of the successful chat and completions requests served by a backend that
// names a reference, after the client has its response and off its
// goroutine, the gateway has the reference score the backend's own
// continuation (teacher forcing, forced.go) or, where the two cannot do
// that, sends a greedy copy of the request (with token logprobs and a
// capped length) to both (the greedy walk), and hands the answers to a
// Sink. The client's request and response
// are untouched; a slow or failing reference costs nothing but the
// comparison. At most precision.concurrency comparisons run at once; a
// sampled request beyond that, or whose reference is unhealthy (failing its
// checks or ejected), is skipped and counted.

// A Sink receives finished shadow comparisons. It is called from
// shadow workers, concurrently.
type Sink interface {
	OnShadow(*exchange.Shadow)
}

// shadowMaxBody bounds each shadow response read.
const shadowMaxBody = 4 << 20

// shadowPath is the route each shadowed operation is sent to.
var shadowPath = map[exchange.Operation]string{exchange.OpChat: "/v1/chat/completions", exchange.OpCompletion: "/v1/completions"}

// A Shadower runs the shadow comparisons of the backends that name a
// reference. Its methods are safe for concurrent use; Sample, Paired,
// NamesIDs and Close also on a nil Shadower (no backend compared).
type Shadower struct {
	cfg    config.Precision
	sink   Sink
	client *http.Client
	log    *slog.Logger
	ref    map[string]*upstream.Backend // backend name → its reference
	sem    chan struct{}
	// unable holds, by backend or reference name, until when teacher
	// forcing is not tried with it; ids holds the backends whose answers
	// named token ids when asked (forced.go). Both under mu.
	unable  map[string]time.Time
	ids     map[string]bool
	outcome *prometheus.CounterVec // backend, outcome

	mu     sync.Mutex
	closed bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns nil when no backend is compared (or the signal is off).
func New(cfg config.Precision, backends []config.Backend, pool *upstream.Pool, sink Sink, client *http.Client, log *slog.Logger, reg prometheus.Registerer) *Shadower {
	if !cfg.Enabled || sink == nil || cfg.SampleRatio == 0 {
		return nil
	}
	byName := map[string]*upstream.Backend{}
	for _, b := range pool.Backends() {
		byName[b.Name] = b
	}
	ref := map[string]*upstream.Backend{}
	for _, b := range backends {
		if r := byName[b.Reference]; r != nil && byName[b.Name] != nil {
			ref[b.Name] = r
		}
	}
	if len(ref) == 0 {
		return nil
	}
	sh := &Shadower{cfg: cfg, sink: sink, client: client, log: log, ref: ref, sem: make(chan struct{}, cfg.Concurrency), unable: map[string]time.Time{}, ids: map[string]bool{},
		outcome: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vigil_shadow_comparisons_total",
			Help: "Shadow comparisons of a backend against its reference, by outcome: done, skipped (too many in flight, or the reference unhealthy), failed (a shadow request failed), incomplete (not finished within precision.timeout, cancelled, or an answer cut); only done ones are scored.",
		}, []string{"backend", "outcome"})}
	reg.MustRegister(sh.outcome)
	for name := range ref {
		for _, o := range []string{"done", "skipped", "failed", "incomplete"} {
			sh.outcome.WithLabelValues(name, o)
		}
	}
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	return sh
}

// Sample reports whether a request of operation op to backend is compared.
func (sh *Shadower) Sample(op exchange.Operation, backend *upstream.Backend) bool {
	if sh == nil || backend == nil || sh.ref[backend.Name] == nil {
		return false
	}
	if _, ok := shadowPath[op]; !ok {
		return false
	}
	return rand.Float64() < sh.cfg.SampleRatio
}

// Paired reports whether backend has a reference to be compared with.
func (sh *Shadower) Paired(backend *upstream.Backend) bool {
	return sh != nil && backend != nil && sh.ref[backend.Name] != nil
}

// Start compares backend with its reference on a copy of body in the
// background; auth is the client's Authorization header, passed on.
// answer is the client's own non-streaming response, or nil: when its
// logprobs name token ids its tokens are the continuation a teacher-forced
// comparison scores, and the backend generates no shadow copy.
func (sh *Shadower) Start(backend *upstream.Backend, op exchange.Operation, body, answer []byte, auth string) {
	ref := sh.ref[backend.Name]
	if !ref.Healthy() {
		// Failing health checks or ejected: leave it alone.
		sh.outcome.WithLabelValues(backend.Name, "skipped").Inc()
		return
	}
	select {
	case sh.sem <- struct{}{}:
	default:
		sh.outcome.WithLabelValues(backend.Name, "skipped").Inc()
		return
	}
	sh.mu.Lock()
	if sh.closed {
		sh.mu.Unlock()
		<-sh.sem
		return
	}
	sh.wg.Add(1)
	sh.mu.Unlock()
	go func() {
		defer sh.wg.Done()
		defer func() { <-sh.sem }()
		if err := sh.compare(backend, ref, op, body, answer, auth); err != nil {
			outcome := "failed"
			if incomplete(err) {
				outcome = "incomplete"
			}
			sh.outcome.WithLabelValues(backend.Name, outcome).Inc()
			sh.log.Debug("shadow comparison "+outcome, "backend", backend.Name, "reference", ref.Name, "err", err)
			return
		}
		sh.outcome.WithLabelValues(backend.Name, "done").Inc()
	}()
}

// compare runs one comparison: teacher forcing where the backend and the
// reference support it (forced.go), else the greedy walk.
func (sh *Shadower) compare(backend, ref *upstream.Backend, op exchange.Operation, body, answer []byte, auth string) error {
	shadow, err := shadowBody(op, body, sh.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(sh.ctx, sh.cfg.Timeout)
	defer cancel()
	if sh.canForce(backend, ref) {
		res, err := sh.force(ctx, backend, ref, op, body, shadow, answer, auth)
		if err == nil {
			sh.sink.OnShadow(res)
			return nil
		}
		if !errors.Is(err, errCannotForce) {
			return err
		}
		sh.log.Debug("teacher forcing unavailable: greedy walk", "backend", backend.Name, "reference", ref.Name, "err", err)
	}
	var bodies [2][]byte
	var errs [2]error
	var wg sync.WaitGroup
	for i, b := range []*upstream.Backend{backend, ref} {
		wg.Go(func() { bodies[i], errs[i] = sh.post(ctx, b, shadowPath[op], shadow, auth) })
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return err
	}
	sh.sink.OnShadow(&exchange.Shadow{Backend: backend.Name, Reference: ref.Name, Operation: op, Method: exchange.ShadowGreedyWalk,
		Time: time.Now(), BackendBody: bodies[0], ReferenceBody: bodies[1]})
	return nil
}

func (sh *Shadower) post(ctx context.Context, b *upstream.Backend, path string, body []byte, auth string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.URL.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Vigil-Shadow", "1")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := sh.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, shadowMaxBody+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.Name, err)
	}
	if len(out) > shadowMaxBody {
		return nil, fmt.Errorf("%s: %w", b.Name, errCut)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &statusError{backend: b.Name, status: resp.StatusCode}
	}
	return out, nil
}

// errCut is a shadow answer longer than shadowMaxBody: what was read of it
// is not handed on.
var errCut = fmt.Errorf("answer over %d bytes", shadowMaxBody)

// incomplete reports whether a comparison failed for want of a whole
// answer rather than for an error answer: one not finished within
// precision.timeout, cancelled (Close), or cut. Such a comparison says
// nothing about either model and is counted apart (outcome "incomplete");
// like every comparison that did not finish, nothing of it is scored.
func incomplete(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, errCut)
}

// statusError is a shadow request answered with a status other than 200.
type statusError struct {
	backend string
	status  int
}

func (e *statusError) Error() string { return fmt.Sprintf("%s: status %d", e.backend, e.status) }

// Close stops new comparisons, cancels those in flight and waits for them.
func (sh *Shadower) Close() {
	if sh == nil {
		return
	}
	sh.mu.Lock()
	sh.closed = true
	sh.mu.Unlock()
	sh.cancel()
	sh.wg.Wait()
}

// shadowBody is the client's request made greedy and bounded, with token
// logprobs: not streamed, temperature 0, one choice, at most max_tokens
// tokens; for chat "logprobs": true and "top_logprobs": k, for legacy
// completions "logprobs": k without echo. Members that would change the
// tokens or the response's shape are removed (sampling alternatives,
// stream options, vLLM's prompt_logprobs); the rest (messages or prompt,
// model, stop, seed…) is kept, so both backends see the client's prompt.
func shadowBody(op exchange.Operation, body []byte, cfg config.Precision) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("shadow body: %w", err)
	}
	for _, k := range []string{"stream_options", "best_of", "use_beam_search", "prompt_logprobs", "echo",
		"max_completion_tokens", "logit_bias", "suffix"} {
		delete(m, k)
	}
	k := json.RawMessage(strconv.Itoa(cfg.TopLogprobs))
	m["stream"] = json.RawMessage("false")
	m["temperature"] = json.RawMessage("0")
	m["n"] = json.RawMessage("1")
	m["max_tokens"] = json.RawMessage(strconv.Itoa(cfg.MaxTokens))
	if op == exchange.OpChat {
		m["logprobs"], m["top_logprobs"] = json.RawMessage("true"), k
	} else {
		m["logprobs"] = k
	}
	return json.Marshal(m)
}
