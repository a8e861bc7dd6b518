// Package sim is a simulated inference backend: a real HTTP server that
// answers the OpenAI API the way vLLM does and the native API of Hugging
// Face TGI, with latency, errors and token log-probabilities driven by
// runtime-adjustable [Knobs]. It backs `vigil sim`, the demo, users' load
// tests and Vigil's own tests.
//
// # Routes
//
// OpenAI, as vLLM answers it:
//
//	POST /v1/chat/completions   streaming (SSE) or not; logprobs, top_logprobs,
//	                            stream_options.include_usage, vLLM's prompt_logprobs
//	POST /v1/completions        legacy logprobs: N, prompt_logprobs, streaming
//	POST /v1/embeddings         deterministic unit vectors, close for texts that
//	                            share words; float or base64
//	GET  /v1/models             the model, then its LoRA adapters
//	POST /tokenize              vLLM's, prompt or chat messages: one token per byte
//	POST /detokenize            vLLM's, token ids back to text
//	POST /v1/responses          the Responses API, streaming (named SSE events,
//	                            sequence_number, no [DONE]) or not; include
//	                            message.output_text.logprobs, top_logprobs,
//	                            previous_response_id, store
//	GET    /v1/responses/{id}              a stored response
//	DELETE /v1/responses/{id}
//	POST   /v1/responses/{id}/cancel       always 400 (see below)
//	GET    /v1/responses/{id}/input_items  order, limit, after
//
// Anthropic's Messages API, as vLLM serves it:
//
//	POST /v1/messages               streaming (message_start ... message_stop) or not
//	POST /v1/messages/count_tokens  the input tokens of the same request
//
// The Responses and Messages APIs use the chat generation path: the prompt
// is the text of the instructions (system) and of every input item
// (message) concatenated, so the same conversation gets the same tokens on
// all three APIs, under the same knobs (latency, stall, errors, logprob
// confidence and noise, MaxNumSeqs) and metrics. A Responses request's
// max_output_tokens is the length, as chat's max_tokens is; the Messages
// API requires max_tokens, so there it is a cap: the answer has
// OutputTokens tokens (stop_reason end_turn) or max_tokens when fewer
// (max_tokens). Errors come in each API's shape (Anthropic's
// {"type":"error","error":{...}} on /v1/messages).
//
// Responses are stored, unless the request says store: false, in memory
// of the Server that made them, the most recently used maxStoredResponses
// of them (vLLM keeps them without bound). previous_response_id puts the
// stored conversation (its input and output, not its instructions) after
// the new instructions and before the new input, as vLLM does; an id this
// Server does not hold is vLLM's 404 with param previous_response_id,
// which is what makes a gateway route a follow-up to the instance that
// made the response. The simulator runs no background responses, so a
// stored response is complete and cancelling it is vLLM's 400 "Cannot
// cancel a synchronous response.". As response ids are drawn from the
// body, identical requests make the same id, and the second replaces the
// first in the store (they are equal under the same knobs). Not modelled:
// status "incomplete" (a response cut by max_output_tokens is "completed"),
// tools, reasoning items, background mode and the Responses API's other
// output item types.
//
// Chat and completions take vLLM's return_tokens_as_token_ids: logprobs then
// name tokens "token_id:<id>". A prompt that /tokenize tokenized, given back
// as token ids (with a continuation's ids after it), is the same text and so
// the same context: prompt_logprobs over it score a generated continuation
// exactly as it was generated (teacher forcing, as Vigil's precision
// comparison does it).
//
// TGI: POST /generate, POST /generate_stream, GET /info.
// Operations: GET /health, GET /metrics (vLLM gauge names).
// Administration: GET /sim/knobs, POST or PATCH /sim/knobs (partial update),
// GET /sim/stats, POST /sim/cache/reset (empties the prefix cache, as
// vLLM's /reset_prefix_cache; the counters keep counting).
//
// # Prefix caching
//
// With Knobs.PrefixCacheBlocks above zero, a Server models vLLM's automatic
// prefix caching. A prompt, the text whose ⌈characters/4⌉ tokens usage
// reports (for chat, Responses and Messages the concatenated text below,
// so a shared start is a shared prefix and a changed early message changes
// everything after it; a completions prompt of token ids, its ids), is cut
// into full blocks of Knobs.BlockSize tokens. Each block's hash covers its
// tokens and its parent block's hash, so it stands for everything before
// it; a LoRA adapter's chains start from its own root, as vLLM hashes the
// adapter into every block. The cache is an LRU of block hashes holding at
// most PrefixCacheBlocks of them. When a request gets its MaxNumSeqs slot
// (as vLLM's scheduler looks the cache up), its cached tokens are the
// leading blocks found × BlockSize, at most (prompt tokens - 1)/BlockSize
// blocks: vLLM always computes the last prompt token, to have logits to
// sample from, so a prompt of exactly k cached blocks reuses k-1. Then all
// the prompt's full blocks become the most recently used, the first block
// last, so that a prompt's late blocks are evicted before its early ones
// (vLLM frees a request's blocks tail first). A request whose
// prompt_logprobs (TGI: decoder_input_details) need the whole prompt
// reads nothing and counts no query but still caches its blocks;
// embeddings do not use the cache. Only prompts are cached: the
// simulator's generated tokens do not tokenize as its prompts do.
//
// The first token then waits Knobs.TTFT plus Knobs.PrefillPerToken for
// every uncached prompt token, while the request holds its slot, so a
// server at MaxNumSeqs queues the others behind long prefills. Usage
// reports the cached tokens: chat and completions in
// usage.prompt_tokens_details.cached_tokens (vLLM with
// --enable-prompt-tokens-details; the simulator sends it whenever caching
// is on, 0 included, where vLLM leaves out a 0 — the final usage only, not
// continuous_usage_stats chunks), Responses in
// usage.input_tokens_details.cached_tokens, Messages as Anthropic defines
// it and vLLM maps it: cache_read_input_tokens the cached tokens,
// cache_creation_input_tokens 0 and input_tokens the uncached rest. With
// caching off, the output is what it was without it. /metrics counts
// vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total in
// tokens, as vLLM v1 does, and vllm:kv_cache_usage_perc is the larger of
// the running requests' share of the KV cache and the cached blocks' share
// of PrefixCacheBlocks: both live in the one KV cache and a running
// request's prompt blocks are cache blocks, so the larger counts them
// once. (vLLM counts cached blocks no request holds as free; the simulator
// shows them so that a balancer sees where prefixes live.) The
// kv_cache_usage knob still overrides it. Changing PrefixCacheBlocks at run
// time evicts down to it; changing BlockSize empties the cache.
//
// # LoRA adapters
//
// [Options.LoRAModules] lists adapters on /v1/models after the base model,
// as vLLM's --lora-modules does (parent the base model, root a made-up
// path, no max_model_len). Requests may name the base model or an
// adapter, and a response names the model it was asked for; any other
// model is vLLM's 404. An adapter generates what the base model does.
//
// # The model
//
// There is no tokenizer. A prompt counts ceil(characters/4) tokens, where
// characters are Unicode code points of all message contents (chat), the
// instructions and input items (responses), the system text and messages
// (Anthropic messages), the prompt (completions) or the inputs (TGI),
// concatenated. Prompt tokens are
// the consecutive 4-character pieces of that text.
//
// Generated tokens come from a small built-in vocabulary of English words.
// The simulated language model is a pure function of (Seed, context): the
// token chosen at each position, and the probabilities of its alternatives,
// are drawn from a PCG generator seeded with Seed and an FNV-1a hash of the
// text so far (prompt plus tokens generated before it). So two simulators
// with the same Seed produce the same tokens for the same prompt, whatever
// other request fields say, and differ only in what their Knobs change; two
// backends set apart only by Noise look like a full-precision model and its
// quantized copy. The chosen token is the most likely one before noise. Its
// probability is drawn around Knobs.Confidence; alternatives share the rest
// in decreasing amounts; Knobs.Noise adds gaussian noise to every logprob
// and then shifts the listed ones together so that their total
// probability is what it was, as noise on logits followed by a softmax.
//
// Response ids are drawn from a PCG seeded with Seed and an FNV-1a hash of
// the request body, so a successful response is a pure function of (Seed,
// request body, Knobs, Options.Created): identical requests get identical
// bytes. The hash leaves out the body's top-level "logprobs" and
// "top_logprobs" members (with the comma that joins each to its neighbour):
// asking for logprobs changes nothing else in the response, as with a real
// engine, whose tokens do not depend on it. A request with logprobs and the
// same request without them get the same ids and tokens, and their bytes
// differ only in the value of each choice's "logprobs" (null when not
// asked), which is what Vigil's logprob injection relies on. Whether a request fails under ErrorRate is drawn per request from a
// sequence fixed by Seed (the n-th request of the server draws the n-th
// number), so identical requests fail at the configured rate.
package sim
