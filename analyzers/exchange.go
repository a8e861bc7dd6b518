package analyzers

import (
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Request describes one proxied request. It is immutable once handed to an
// Observer and may be retained.
type Request struct {
	ID      string
	TraceID string
	// Span is the request's server span, the parent of the analyzers'
	// postprocess span.
	Span      trace.SpanContext
	Route     string // the route pattern, e.g. /v1/chat/completions
	Operation string // chat, text_completion, embeddings, generate, other
	Model     string
	Backend   string
	Stream    bool
	Start     time.Time
	// Body is the request body as the client sent it (upstream too, unless
	// Injected). Observers must not modify it.
	Body []byte
	// Injected says that the gateway asked the backend for token logprobs
	// the client did not ask for (analyzers.confidence.inject). Body is then
	// the client's body; upstream it carried "logprobs" (and for chat
	// "top_logprobs") appended, and the response's logprobs reach the
	// observer but not the client.
	Injected bool
}

// Response describes how a proxied request ended. It is immutable once
// handed to an Observer.
type Response struct {
	Status           int
	Latency          time.Duration
	TTFT             time.Duration // zero when no body byte arrived
	PromptTokens     int
	CompletionTokens int
	Events           int    // SSE data events seen
	ErrorClass       string // empty on success
	// Body is a copy of a non-streaming response body, at most
	// analyzers.max_capture_bytes; Truncated says whether it was cut.
	Body      []byte
	Truncated bool
}

// Shadow is one shadow comparison for signal 5: the same greedy request,
// with logprobs, answered by a backend and by its reference. It is
// immutable once handed to the Pipeline.
type Shadow struct {
	Backend, Reference string
	// Operation is chat or text_completion: the format of both bodies.
	Operation string
	// Time is when the comparison finished.
	Time time.Time
	// BackendBody and ReferenceBody are the two non-streaming response bodies.
	BackendBody, ReferenceBody []byte
}
