package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The mock backend is the zero-latency baseline: an OpenAI-compatible
// server that answers at once. Vigil's simulator (vigil sim) paces tokens
// on a schedule and computes logprobs, so even with zero delays it costs
// more per request than the proxies measured against it; this mock costs a
// few microseconds. It runs as its own process (proxybench mock) so that
// the driver's load generator and its garbage collector do not share a
// process with it.

// mockModel is the one model the mock serves.
const mockModel = "bench-model"

// completionBody is the mock's whole answer to a non-streaming request.
var completionBody = []byte(`{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"` + mockModel +
	`","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":14,"completion_tokens":9,"total_tokens":23}}`)

var modelsBody = []byte(`{"object":"list","data":[{"id":"` + mockModel + `","object":"model","created":1700000000,"owned_by":"proxybench"}]}`)

// mockRequest holds the only fields of a chat request the mock reads.
type mockRequest struct {
	Stream        bool `json:"stream"`
	Logprobs      bool `json:"logprobs"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// mock serves the chat completions of the benchmark. Its fields are set
// before it serves and read-only after.
type mock struct {
	// events are the SSE events of a stream, in order: one per content
	// chunk (the last one with finish_reason), without usage or [DONE].
	events [][]byte
	// logprobEvents are events with each token's logprob and its
	// mockTopLogprobs alternatives, for a request with "logprobs": true
	// (the stream suite asks for them on a share of its streams, so that
	// the confidence analyzer has its real work).
	logprobEvents [][]byte
	gap           time.Duration // between content chunks
	usage         []byte        // usage event, sent when the client asks for it
}

func newMock(chunks int, gap time.Duration) *mock {
	m := &mock{gap: gap}
	for i := range chunks {
		finish := "null"
		if i == chunks-1 {
			finish = `"stop"`
		}
		m.events = append(m.events, fmt.Appendf(nil,
			`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"%s","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":%s}]}`+"\n\n",
			mockModel, i, finish))
		m.logprobEvents = append(m.logprobEvents, fmt.Appendf(nil,
			`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"%s","choices":[{"index":0,"delta":{"content":"tok%d "},"logprobs":%s,"finish_reason":%s}]}`+"\n\n",
			mockModel, i, mockLogprobs(i), finish))
	}
	m.usage = fmt.Appendf(nil,
		`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"%s","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		mockModel, chunks, 14+chunks)
	return m
}

// benchChunksHeader shortens a stream to its value's chunks.
const benchChunksHeader = "X-Bench-Chunks"

var doneEvent = []byte("data: [DONE]\n\n")

// mockTopLogprobs is how many alternatives each token's logprobs list,
// whatever top_logprobs asked: the mock's answers are fixed.
const mockTopLogprobs = 5

// mockLogprobs is the logprobs object of token i: the chosen token first
// with a logprob that varies with i (confidence sees neither a constant
// nor noise), then its alternatives, less likely.
func mockLogprobs(i int) string {
	tok := fmt.Sprintf("tok%d ", i)
	lp := -0.05 - 0.6*float64(i%7)/7
	var b strings.Builder
	fmt.Fprintf(&b, `{"content":[{"token":%q,"logprob":%.4f,"bytes":%s,"top_logprobs":[`, tok, lp, byteList(tok))
	for k := range mockTopLogprobs {
		alt := tok
		if k > 0 {
			alt = fmt.Sprintf("alt%d_%d ", k, i)
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"token":%q,"logprob":%.4f,"bytes":%s}`, alt, lp-1.5*float64(k), byteList(alt))
	}
	b.WriteString("]}],\"refusal\":null}")
	return b.String()
}

// byteList is s's UTF-8 bytes as a JSON array.
func byteList(s string) string {
	parts := make([]string, len(s))
	for i := range len(s) {
		parts[i] = strconv.Itoa(int(s[i]))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func (m *mock) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(modelsBody)
	})
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	return mux
}

func (m *mock) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	var req mockRequest
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	if !req.Stream {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(completionBody)))
		w.Write(completionBody)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	events := m.events
	if req.Logprobs {
		events = m.logprobEvents
	}
	// The stream suite's warm-up asks for short streams: a header, not
	// max_tokens, so that no other suite's request changes meaning.
	if n, err := strconv.Atoi(r.Header.Get(benchChunksHeader)); err == nil && n > 0 && n < len(events) {
		events = events[:n]
	}
	for i, ev := range events {
		if i > 0 {
			select {
			case <-time.After(m.gap):
			case <-r.Context().Done():
				return
			}
		}
		if _, err := w.Write(ev); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		w.Write(m.usage)
	}
	w.Write(doneEvent)
}

// runMock is the `proxybench mock` subcommand: it serves until SIGTERM or
// SIGINT.
func runMock(args []string) error {
	fs := flag.NewFlagSet("mock", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen `address`")
	chunks := fs.Int("chunks", 32, "content chunks per stream")
	gap := fs.Duration("gap", time.Millisecond, "pause between a stream's chunks")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *chunks < 1 {
		return errors.New("mock: -chunks must be at least 1")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	return serveUntilSignal(ln, newMock(*chunks, *gap).handler())
}

// serveUntilSignal serves h on ln until SIGTERM or SIGINT: the mock's and
// go-proxy's processes.
func serveUntilSignal(ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
