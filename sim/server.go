package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 16 << 20

// Options configure a Server. The zero value serves "sim-model" with seed 0,
// the current time as "created", and [DefaultKnobs].
type Options struct {
	// Model is the served model name; empty means "sim-model". OpenAI
	// requests naming another model get vLLM's 404; requests naming none
	// are served.
	Model string
	// Seed selects the simulated model; see the package documentation.
	Seed int64
	// Created, when not zero, is the "created" timestamp of every response,
	// for byte-identical tests; zero means the time of the response.
	Created int64
	// Knobs are the initial knobs. Zero Confidence, OutputTokens,
	// MaxNumSeqs and BlockSize mean their defaults (see [DefaultKnobs]);
	// the other zero values mean what they say.
	Knobs Knobs
	// LoRAModules are the names of LoRA adapters served on top of Model,
	// as vLLM's --lora-modules: /v1/models lists them with Model as their
	// parent, and requests may name them. An adapter answers as the base
	// model does, under its own name, with prefix cache blocks of its own.
	LoRAModules []string
	// AnyModel serves every model name a request gives, answering under
	// that name, as a server that routes by model does (LiteLLM, a
	// gateway of gateways): for tests of what unbounded model names do.
	// False: names other than Model and LoRAModules get vLLM's 404.
	AnyModel bool
}

// Stats counts the requests on the inference routes (OpenAI, Anthropic and
// TGI).
type Stats struct {
	// Requests is the number of requests received.
	Requests int64 `json:"requests"`
	// Running is the number of requests generating now.
	Running int64 `json:"running"`
	// Waiting is the number of requests queued behind MaxNumSeqs now.
	Waiting int64 `json:"waiting"`
	// Cancelled is the number of requests whose client went away before
	// the response was complete.
	Cancelled int64 `json:"cancelled"`
	// Errors is the number of requests answered with an error status,
	// 4xx or 5xx, whether drawn by ErrorRate or caused by the request.
	Errors int64 `json:"errors"`
	// Hanging is the number of requests held unanswered by the Hang knob
	// now.
	Hanging int64 `json:"hanging"`
}

// A Server is a simulated inference backend. Its methods are safe for
// concurrent use; knobs can change while requests are in flight.
type Server struct {
	model   string
	seed    int64
	created int64
	knobs   atomic.Pointer[Knobs]
	seqs    *limiter
	mux     *http.ServeMux
	// stored holds the Responses API's stored responses.
	stored *responseStore
	// adapters are the LoRA adapters' names, in Options order.
	adapters []string
	anyModel bool // Options.AnyModel
	cache    *prefixCache

	requests, running, waiting, cancelled, errors atomic.Int64
	// hanging counts the requests held unanswered by the Hang knob.
	hanging atomic.Int64
	// draws counts error-rate decisions; see failNext.
	draws atomic.Int64
	// kvTokens is the number of tokens held by running requests.
	kvTokens atomic.Int64
	// Counters exported on /metrics.
	promptTokens, generationTokens atomic.Int64
	finishedStop, finishedLength   atomic.Int64
}

// New returns a Server ready to serve [Server.Handler].
func New(opts Options) *Server {
	s := &Server{model: opts.Model, seed: opts.Seed, created: opts.Created, stored: newResponseStore(maxStoredResponses), cache: newPrefixCache(), anyModel: opts.AnyModel}
	if s.model == "" {
		s.model = "sim-model"
	}
	for _, a := range opts.LoRAModules {
		if a != "" && a != s.model && !slices.Contains(s.adapters, a) {
			s.adapters = append(s.adapters, a)
		}
	}
	k := opts.Knobs.normalized()
	s.knobs.Store(&k)
	s.cache.sync(&k)
	s.seqs = &limiter{
		limit:   func() int { return s.knobs.Load().MaxNumSeqs },
		waiting: &s.waiting,
	}
	s.mux = s.routes()
	return s
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.handleChat)
	mux.HandleFunc("POST /v1/completions", s.handleCompletions)
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	mux.HandleFunc("GET /v1/responses/{id}", s.handleGetResponse)
	mux.HandleFunc("DELETE /v1/responses/{id}", s.handleDeleteResponse)
	mux.HandleFunc("POST /v1/responses/{id}/cancel", s.handleCancelResponse)
	mux.HandleFunc("GET /v1/responses/{id}/input_items", s.handleInputItems)
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/messages/count_tokens", s.handleCountTokens)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("POST /generate", s.handleGenerate)
	mux.HandleFunc("POST /generate_stream", s.handleGenerateStream)
	mux.HandleFunc("GET /info", s.handleInfo)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", s.handleMetrics)
	mux.HandleFunc("GET /sim/knobs", s.handleGetKnobs)
	mux.HandleFunc("POST /sim/knobs", s.handlePatchKnobs)
	mux.HandleFunc("PATCH /sim/knobs", s.handlePatchKnobs)
	mux.HandleFunc("POST /sim/cache/reset", func(w http.ResponseWriter, _ *http.Request) {
		s.ResetPrefixCache()
		writeJSON(w, http.StatusOK, map[string]bool{"reset": true})
	})
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	return mux
}

// Handler returns the HTTP handler of every route.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

// serve routes r, or holds it unanswered while the Hang knob is on. The
// simulator's own routes always answer, so that a hung simulator can be
// inspected and released.
func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.Knobs().Hang && !strings.HasPrefix(r.URL.Path, "/sim/") {
		s.hanging.Add(1)
		defer s.hanging.Add(-1)
		// net/http notices a client that went away only once the body
		// is read: read it (as a server reads a request before it
		// wedges), bounded as the handlers bound it.
		io.Copy(io.Discard, io.LimitReader(r.Body, maxBodyBytes))
		// The hang is the feature: nothing is written until the client
		// gives up (its timeout, or the connection closing).
		<-r.Context().Done()
		return
	}
	s.mux.ServeHTTP(w, r)
}

// Knobs returns the current knobs.
func (s *Server) Knobs() Knobs { return *s.knobs.Load() }

// SetKnobs replaces the knobs atomically; requests already in flight keep
// the knobs they started with. Zero Confidence, OutputTokens and MaxNumSeqs
// mean their defaults; other out-of-range values are clamped (use
// [Knobs.Validate] first to refuse them instead). A higher MaxNumSeqs admits
// waiting requests at once; a lower one lets running requests finish.
func (s *Server) SetKnobs(k Knobs) {
	k = k.normalized()
	s.knobs.Store(&k)
	s.seqs.wake()
	s.cache.sync(s.knobs.Load())
}

// ResetPrefixCache empties the prefix cache, as vLLM's POST
// /reset_prefix_cache does; its counters on /metrics keep counting.
func (s *Server) ResetPrefixCache() { s.cache.reset() }

// failNext decides whether the next request gets a simulated error. The
// n-th decision of a server draws from a PCG seeded with (Seed, n), so a seed
// fixes the sequence of failures whatever the request bodies are, and
// identical requests fail at the configured rate rather than all or none.
func (s *Server) failNext(rate float64) bool {
	if rate <= 0 {
		return false
	}
	n := s.draws.Add(1)
	return rand.New(rand.NewPCG(uint64(s.seed), uint64(n)^0x9e3779b97f4a7c15)).Float64() < rate
}

// Stats returns the current counters.
func (s *Server) Stats() Stats {
	return Stats{
		Requests:  s.requests.Load(),
		Running:   s.running.Load(),
		Waiting:   s.waiting.Load(),
		Cancelled: s.cancelled.Load(),
		Errors:    s.errors.Load(),
		Hanging:   s.hanging.Load(),
	}
}

func (s *Server) createdAt() int64 {
	if s.created != 0 {
		return s.created
	}
	return time.Now().Unix()
}

func (s *Server) handleGetKnobs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Knobs())
}

// handlePatchKnobs merges the fields of the body into the current knobs.
// Concurrent updates do not lose each other's fields: the merge retries on
// a compare-and-swap.
func (s *Server) handlePatchKnobs(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		adminError(w, http.StatusBadRequest, "reading body: "+err.Error())
		return
	}
	for {
		old := s.knobs.Load()
		k := *old
		if err := json.Unmarshal(body, &k); err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := k.Validate(); err != nil {
			adminError(w, http.StatusBadRequest, err.Error())
			return
		}
		if s.knobs.CompareAndSwap(old, &k) {
			s.seqs.wake()
			s.cache.sync(s.knobs.Load())
			writeJSON(w, http.StatusOK, k)
			return
		}
	}
}

// adminError writes the OpenAI error body, as the gateway's own errors do.
func adminError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "code": http.StatusText(status),
	}})
}

// marshal encodes v as JSON without encoding/json's HTML escaping of <, >
// and &, which neither vLLM (Python) nor TGI (serde) apply.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshal(v)
	if err != nil {
		// Every response type here marshals; a failure is a bug, and the
		// client still gets a well-formed answer.
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"sim: encoding response","type":"InternalServerError","param":null,"code":500}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// readBody reads a bounded request body.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
}

// A run is one admitted request from the moment it starts waiting for a
// sequence slot to its end. It is used by one request's goroutine only.
type run struct {
	s         *Server
	ctx       context.Context
	k         Knobs
	kv        int64
	cancelled bool
	// cached is the number of prompt tokens the prefix cache held; the
	// others are prefilled before the first token.
	cached int
	// prefill is the time prefilling the uncached prompt tokens takes.
	prefill time.Duration
	// due is when the last token was due: tokens are paced against a
	// schedule (start + TTFT + i·ITL), as an engine's steps are, so a
	// late wake-up makes the next gap shorter instead of delaying every
	// later token.
	due time.Time
}

// admission is what a request prefills: its prompts with their token counts,
// the model it named (the base model or an adapter) and whether it may read
// the prefix cache.
type admission struct {
	plans  []choicePlan
	model  string
	noRead bool
	// noCache keeps the prompts out of the cache altogether.
	noCache bool
}

// onePrompt is the admission of a request with one prompt of n tokens.
func onePrompt(p promptText, n int, model string) admission {
	return admission{plans: []choicePlan{{prompt: p, tokens: n}}, model: model}
}

// begin waits for a sequence slot, then looks the prompts up in the prefix
// cache, which sets the run's cached tokens and its prefill time: the
// lookup happens when the request is scheduled, as vLLM's scheduler does
// it, so a request that waited sees the blocks of those served before it.
// It returns nil when the client went away first, having counted the
// cancellation.
func (s *Server) begin(ctx context.Context, k Knobs, ps admission) *run {
	if err := s.seqs.acquire(ctx); err != nil {
		s.cancelled.Add(1)
		return nil
	}
	s.running.Add(1)
	total := 0
	r := &run{s: s, ctx: ctx, k: k}
	root := uint64(0)
	if ps.model != s.model {
		root = modelRoot(ps.model)
	}
	for _, p := range ps.plans {
		total += p.tokens
		if !ps.noCache {
			r.cached += s.cache.lookup(root, p.prompt, p.tokens, !ps.noRead)
		}
	}
	s.promptTokens.Add(int64(total))
	r.prefill = prefillTime(k.PrefillPerToken, total-r.cached)
	r.hold(int64(total))
	r.due = time.Now()
	return r
}

// prefillTime is per × tokens, saturated rather than overflowing.
func prefillTime(per time.Duration, tokens int) time.Duration {
	if per <= 0 || tokens <= 0 {
		return 0
	}
	if int64(tokens) > math.MaxInt64/int64(per) {
		return math.MaxInt64
	}
	return per * time.Duration(tokens)
}

// hold adds n tokens to the KV cache the run holds.
func (r *run) hold(n int64) {
	r.kv += n
	r.s.kvTokens.Add(n)
}

// wait sleeps until token i of each choice is due: TTFT and the prefill
// of the uncached prompt tokens before the first, ITL before each later
// one, and Stall more before token StallAfter. It returns false, having
// counted the cancellation, if the client went away.
func (r *run) wait(i int) bool {
	d := r.k.ITL
	if i == 0 {
		d = r.ttft()
	}
	// Choices advance in step, so token i of every choice follows the
	// first i of each: one stall per request.
	if i == r.k.StallAfter {
		d += r.k.Stall
	}
	r.due = r.due.Add(d)
	return r.pause(time.Until(r.due))
}

// ttft is the delay before the first token: TTFT plus the prefill,
// saturated.
func (r *run) ttft() time.Duration {
	if r.prefill > math.MaxInt64-r.k.TTFT {
		return math.MaxInt64
	}
	return r.k.TTFT + r.prefill
}

// pause sleeps d. It returns false, having counted the cancellation, if the
// client went away.
func (r *run) pause(d time.Duration) bool {
	if err := sleep(r.ctx, d); err != nil {
		r.cancel()
		return false
	}
	return true
}

// generated records n tokens produced at one step.
func (r *run) generated(n int) {
	r.s.generationTokens.Add(int64(n))
	r.hold(int64(n))
}

// cancel counts the run as cancelled, once.
func (r *run) cancel() {
	if !r.cancelled {
		r.cancelled = true
		r.s.cancelled.Add(1)
	}
}

// finished counts a choice that completed with reason.
func (r *run) finished(reason string) {
	if reason == "length" {
		r.s.finishedLength.Add(1)
	} else {
		r.s.finishedStop.Add(1)
	}
}

// end frees the run's slot and KV cache.
func (r *run) end() {
	r.s.kvTokens.Add(-r.kv)
	r.s.running.Add(-1)
	r.s.seqs.release()
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// limiter admits up to limit() requests at once and queues the others in
// FIFO order. It is a mutex-guarded counter rather than a buffered channel
// because MaxNumSeqs changes at run time and a channel's capacity cannot.
type limiter struct {
	limit   func() int
	waiting *atomic.Int64

	mu    sync.Mutex
	inUse int
	queue []chan struct{}
}

func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.queue) == 0 && l.inUse < l.limit() {
		l.inUse++
		l.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	l.queue = append(l.queue, ready)
	l.waiting.Add(1)
	l.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	for i, c := range l.queue {
		if c == ready {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			l.waiting.Add(-1)
			l.mu.Unlock()
			return ctx.Err()
		}
	}
	l.mu.Unlock()
	// Granted while giving up: hand the slot on.
	l.release()
	return ctx.Err()
}

func (l *limiter) release() {
	l.mu.Lock()
	l.inUse--
	l.grantLocked()
	l.mu.Unlock()
}

// wake admits waiting requests after the limit rose.
func (l *limiter) wake() {
	l.mu.Lock()
	l.grantLocked()
	l.mu.Unlock()
}

func (l *limiter) grantLocked() {
	for len(l.queue) > 0 && l.inUse < l.limit() {
		ready := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.inUse++
		l.waiting.Add(-1)
		close(ready)
	}
}

// sseWriter writes server-sent events, sending the headers with the first
// event as vLLM does, and flushing after every event.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	prefix  string
	started bool
}

func newSSE(w http.ResponseWriter, prefix string) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w), prefix: prefix}
}

// event writes one "data:" event holding v, or the raw text when v is a
// string.
func (e *sseWriter) event(v any) error { return e.send("", v) }

// named writes an event holding v under an "event:" line naming it, as the
// Responses API and Anthropic's Messages API stream.
func (e *sseWriter) named(name string, v any) error { return e.send(name, v) }

func (e *sseWriter) send(name string, v any) error {
	var data []byte
	if s, ok := v.(string); ok {
		data = []byte(s)
	} else {
		var err error
		if data, err = marshal(v); err != nil {
			return err
		}
	}
	if !e.started {
		e.started = true
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
	}
	buf := make([]byte, 0, len(name)+len(e.prefix)+len(data)+10)
	if name != "" {
		buf = append(append(append(buf, "event: "...), name...), '\n')
	}
	buf = append(append(append(buf, e.prefix...), data...), '\n', '\n')
	if _, err := e.w.Write(buf); err != nil {
		return err
	}
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
