package tracing

// Attribute keys and event names from the OpenTelemetry semantic
// conventions, as the gateway uses them on its spans. They are untyped
// string constants so that they work both as attribute.String(key, v) and
// as attribute.Key(key).
//
// The GenAI names follow semantic conventions v1.40.0 (the newest GenAI
// set shipped with go.opentelemetry.io/otel v1.47.0 as semconv/v1.40.0;
// GenAI conventions are still "Development"). Since v1.37.0 the
// conventions no longer define the gen_ai.content.prompt /
// gen_ai.content.completion span events (gen_ai.prompt, gen_ai.completion):
// content goes into gen_ai.input.messages, gen_ai.output.messages and
// gen_ai.system_instructions, recorded either on the inference span (a
// JSON string is allowed there) or on the opt-in event
// gen_ai.client.inference.operation.details. See
// https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-events/ and
// https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/#recording-content-on-attributes.
const (
	// AttrGenAIOperationName is the GenAI operation, e.g. OperationChat.
	AttrGenAIOperationName = "gen_ai.operation.name"
	// AttrGenAIProviderName names the GenAI provider (e.g. "openai"); it
	// replaces gen_ai.system since semconv v1.37.0.
	AttrGenAIProviderName = "gen_ai.provider.name"
	// AttrGenAIRequestModel is the model named in the request.
	AttrGenAIRequestModel = "gen_ai.request.model"
	// AttrGenAIRequestMaxTokens is the request's max_tokens (int).
	AttrGenAIRequestMaxTokens = "gen_ai.request.max_tokens"
	// AttrGenAIRequestTemperature is the request's temperature (double).
	AttrGenAIRequestTemperature = "gen_ai.request.temperature"
	// AttrGenAIRequestTopP is the request's top_p (double).
	AttrGenAIRequestTopP = "gen_ai.request.top_p"
	// AttrGenAIResponseModel is the model that produced the response.
	AttrGenAIResponseModel = "gen_ai.response.model"
	// AttrGenAIResponseID is the response id (e.g. "chatcmpl-…").
	AttrGenAIResponseID = "gen_ai.response.id"
	// AttrGenAIResponseFinishReasons lists the finish reasons, one per
	// choice (string slice).
	AttrGenAIResponseFinishReasons = "gen_ai.response.finish_reasons"
	// AttrGenAIUsageInputTokens is the prompt token count (int).
	AttrGenAIUsageInputTokens = "gen_ai.usage.input_tokens"
	// AttrGenAIUsageOutputTokens is the completion token count (int).
	AttrGenAIUsageOutputTokens = "gen_ai.usage.output_tokens"

	// AttrGenAIInputMessages holds the chat history sent to the model,
	// following the semconv input-messages JSON schema. It may hold
	// personal data: only with config.Tracing.CaptureContent.
	AttrGenAIInputMessages = "gen_ai.input.messages"
	// AttrGenAIOutputMessages holds the model's output messages (one per
	// choice), following the semconv output-messages JSON schema. Only
	// with config.Tracing.CaptureContent.
	AttrGenAIOutputMessages = "gen_ai.output.messages"
	// AttrGenAISystemInstructions holds system instructions sent apart
	// from the chat history. Only with config.Tracing.CaptureContent.
	AttrGenAISystemInstructions = "gen_ai.system_instructions"

	// AttrServerAddress is the upstream host name or address.
	AttrServerAddress = "server.address"
	// AttrServerPort is the upstream port (int).
	AttrServerPort = "server.port"
	// AttrErrorType is the class of error that ended the operation, or
	// ErrorTypeOther.
	AttrErrorType = "error.type"
	// AttrHTTPRequestMethod is the HTTP method.
	AttrHTTPRequestMethod = "http.request.method"
	// AttrHTTPResponseStatusCode is the HTTP status code (int).
	AttrHTTPResponseStatusCode = "http.response.status_code"
	// AttrURLPath is the path of the request URL (no query: it may carry
	// secrets).
	AttrURLPath = "url.path"
)

// Event names.
const (
	// EventGenAIInferenceDetails is the opt-in event that carries the
	// captured content of one inference (AttrGenAIInputMessages,
	// AttrGenAIOutputMessages, AttrGenAISystemInstructions) together with
	// the request and response attributes. Vigil records it as a span
	// event on the inference span, with the messages as JSON strings,
	// because span events, unlike log records, are what trace backends
	// such as Jaeger show next to the span.
	EventGenAIInferenceDetails = "gen_ai.client.inference.operation.details"
)

// Well-known attribute values.
const (
	// OperationChat is gen_ai.operation.name for chat completions.
	OperationChat = "chat"
	// OperationTextCompletion is gen_ai.operation.name for legacy
	// completions and TGI /generate.
	OperationTextCompletion = "text_completion"
	// OperationEmbeddings is gen_ai.operation.name for embeddings.
	OperationEmbeddings = "embeddings"
	// ErrorTypeOther is error.type when no better class is known.
	ErrorTypeOther = "_OTHER"
)
