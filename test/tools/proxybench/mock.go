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
	gap    time.Duration // between content chunks
	usage  []byte        // usage event, sent when the client asks for it
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
	}
	m.usage = fmt.Appendf(nil,
		`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"%s","choices":[],"usage":{"prompt_tokens":14,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		mockModel, chunks, 14+chunks)
	return m
}

var doneEvent = []byte("data: [DONE]\n\n")

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
	for i, ev := range m.events {
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
