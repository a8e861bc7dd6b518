// Package exchange is the contract between the gateway and the analyzers:
// what one proxied request, its response and a shadow comparison look
// like, and the closed sets of operations and error classes both sides
// name. It imports no other Vigil package, so that the gateway does not
// depend on the analyzers and a renamed operation or class fails to
// compile on both sides instead of silently stopping an alert.
package exchange

import (
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Operation is an API operation, used as gen_ai.operation.name.
type Operation string

// The operations the gateway tells apart.
const (
	OpChat       Operation = "chat"
	OpCompletion Operation = "text_completion"
	OpEmbeddings Operation = "embeddings"
	OpGenerate   Operation = "generate"  // TGI native
	OpResponses  Operation = "responses" // OpenAI Responses API
	OpMessages   Operation = "messages"  // Anthropic Messages API
	OpOther      Operation = "other"
)

// Generates reports whether op's response carries generated tokens.
func (op Operation) Generates() bool {
	switch op {
	case OpChat, OpCompletion, OpGenerate, OpResponses, OpMessages:
		return true
	}
	return false
}

// HasPrompt reports whether op's request carries a prompt whose features
// the drift signal reads.
func (op Operation) HasPrompt() bool { return op.Generates() || op == OpEmbeddings }

// ErrorClass is how a request failed, a label of the access log and the
// metrics: a small, fixed set. The zero value means success.
type ErrorClass string

// The error classes.
const (
	ClassNone          ErrorClass = ""
	ClassBadRequest    ErrorClass = "bad_request"
	ClassPromptTooLong ErrorClass = "prompt_too_long"
	ClassNoBackend     ErrorClass = "no_backend"    // no healthy backend for a served model
	ClassUnknownModel  ErrorClass = "unknown_model" // no backend serves the model: the client's error
	ClassUpstream4xx   ErrorClass = "upstream_4xx"
	ClassUpstream5xx   ErrorClass = "upstream_5xx"
	ClassTimeout       ErrorClass = "timeout"
	ClassClientCancel  ErrorClass = "client_cancel"
	// ClassRateLimited: a tenant quota refused it (the client's doing);
	// ClassQuotaUnavailable: the quota store did not answer and
	// quotas.fail is closed (the gateway's failure).
	ClassRateLimited      ErrorClass = "rate_limited"
	ClassQuotaUnavailable ErrorClass = "quota_unavailable"
)

// Failed reports whether c is a failure of the backends or of the gateway
// that the client saw, as error rates count them: upstream 5xx (broken
// streams included), timeouts, no healthy backend; not clients' bad
// requests, unknown models or cancellations.
func (c ErrorClass) Failed() bool {
	switch c {
	case ClassUpstream5xx, ClassTimeout, ClassNoBackend, ClassQuotaUnavailable:
		return true
	}
	return false
}

// Request describes one proxied request. The gateway hands it to an
// observer with OnRequest once its backend is settled (or with OnResponse
// when the gateway answered itself), and writes it no more: observers may
// read and retain it.
type Request struct {
	ID      string
	TraceID string
	// Span is the request's server span, the parent of the analyzers'
	// postprocess span.
	Span      trace.SpanContext
	Route     string // the route pattern, e.g. /v1/chat/completions
	Operation Operation
	Model     string
	Backend   string // empty when no backend was chosen (the gateway answered itself)
	Stream    bool
	Start     time.Time
	// Body is the request body as the client sent it (upstream too, unless
	// Injected). Observers must not modify it.
	Body []byte
	// Tenant is the caller as the usage accounting names it: the value of
	// the usage.tenant_header header, bounded (gateway/request.Tenants) and
	// never a raw credential; empty when the header is absent.
	Tenant string
	// Injected says that the gateway asked the backend for token logprobs
	// the client did not ask for (analyzers.confidence.inject). Body is then
	// the client's body; upstream it carried "logprobs" (and for chat
	// "top_logprobs") appended, and the response's logprobs reach the
	// observer but not the client.
	Injected bool
}

// Response describes how a proxied request ended. It is immutable once
// handed to an observer.
type Response struct {
	Status  int
	Latency time.Duration
	TTFT    time.Duration // zero when no body byte arrived
	// FirstToken is a stream's time to its first content chunk (a token),
	// since the request started; zero when none arrived or not a stream.
	// It differs from TTFT where the API opens a stream with events of
	// its own (Responses' response.created, Messages' message_start).
	FirstToken       time.Duration
	PromptTokens     int
	CompletionTokens int
	// UsageSource says where the token counts came from.
	UsageSource UsageSource
	Events      int        // SSE data events seen
	ErrorClass  ErrorClass // ClassNone on success
	// Body is a copy of a non-streaming response body, at most
	// analyzers.max_capture_bytes; Truncated says whether it was cut.
	Body      []byte
	Truncated bool
	// Gaps are the times between consecutive content chunks of the same
	// choice of a stream, measured as they arrived at the gateway; zero
	// Count when fewer than two content chunks arrived.
	Gaps Gaps
}

// UsageSource is where a response's token counts came from.
type UsageSource string

// The usage sources.
const (
	// UsageNone: no token count is known (an error, an embedding, a body
	// too large to read).
	UsageNone UsageSource = "none"
	// UsageReported: the backend's own usage (OpenAI "usage", TGI
	// "details"), asked for by the client or by the gateway.
	UsageReported UsageSource = "reported"
	// UsageCounted: completion tokens counted from the stream's content
	// chunks (one per chunk and choice) because the backend reported none,
	// e.g. a stream cut short; prompt tokens are then unknown (zero).
	UsageCounted UsageSource = "counted"
)

// Gaps summarizes the inter-chunk gaps of one streamed response.
type Gaps struct {
	Count         int // gaps measured
	P50, P95, Max time.Duration
}

// Shadow is one shadow comparison for signal 5: the same greedy request,
// with logprobs, answered by a backend and by its reference. It is
// immutable once handed over.
type Shadow struct {
	Backend, Reference string
	// Operation is OpChat or OpCompletion: the format of both bodies.
	Operation Operation
	// Time is when the comparison finished.
	Time time.Time
	// Method is how the two were compared: ShadowTeacherForced or
	// ShadowGreedyWalk.
	Method string
	// For the greedy walk, BackendBody and ReferenceBody are the two
	// answers to the same greedy request. For teacher forcing, each is
	// that side's scoring of the prompt and the backend's continuation
	// (a /v1/completions response with vLLM's prompt_logprobs), asked of
	// both at once, whose first PromptTokens positions are the prompt;
	// Continuation holds the continuation's token ids.
	BackendBody, ReferenceBody []byte
	PromptTokens               int
	Continuation               []int
}

// Methods of a shadow comparison.
const (
	// ShadowTeacherForced: the reference scored the backend's own
	// continuation, token ids aligned, every position compared.
	ShadowTeacherForced = "teacher_forced"
	// ShadowGreedyWalk: both generated greedily and the walk stopped at
	// their first disagreement.
	ShadowGreedyWalk = "greedy_walk"
)

// ErrUnknownResponse is what feedback about a response id that is not (or
// no longer) remembered fails with.
var ErrUnknownResponse = errors.New("unknown response id")

// BackendState is a backend as the gateway sees it at one moment: the
// balancer's weight and load, health and the gateway's own observations.
// The analyzers keep it in their history. Nil pointers are unknown.
type BackendState struct {
	Name     string  `json:"name"`
	Healthy  bool    `json:"healthy"`
	Weight   float64 `json:"weight"`
	Inflight int64   `json:"inflight"`
	// Picks counts the requests (attempts) this gateway sent to the backend
	// since it started; the difference between two states is the traffic
	// in between.
	Picks int64 `json:"picks"`
	// Load holds the fresh load signals in [0, 1] (cpu, mem, gpu,
	// gpu_mem, queue, kv_cache).
	Load map[string]float64 `json:"load"`
	// LoadBlend is the node load, the weighted mean of the fresh node
	// signals that sets the weight: base weight × (1 − load_blend).
	LoadBlend float64 `json:"load_blend"`
	// ErrorRate is the EWMA of the share of failed attempts; TTFBMs the
	// peak-EWMA time to the first response byte.
	ErrorRate *float64 `json:"error_rate"`
	TTFBMs    *float64 `json:"ttfb_ms"`
	// PrefixHitRate is the backend's prefix-cache hit rate over the last
	// minute (nil: no prompt tokens in it); PrefixWindowQueries and
	// PrefixWindowHits the prompt tokens looked up and found over that
	// minute, from which a fleet's rate is summed.
	PrefixHitRate       *float64 `json:"prefix_hit_rate,omitempty"`
	PrefixWindowQueries float64  `json:"prefix_window_queries,omitempty"`
	PrefixWindowHits    float64  `json:"prefix_window_hits,omitempty"`
}
