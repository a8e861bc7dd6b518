package embed

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/config"
)

// sink is a Target that records what it is given.
type sink struct {
	mu    sync.Mutex
	chars []float64
	got   chan struct{}
}

func (s *sink) AddEmbedding(_ time.Time, v *[content.VectorDim]float32, chars float64) {
	s.mu.Lock()
	s.chars = append(s.chars, chars)
	s.mu.Unlock()
	s.got <- struct{}{}
}

// backend answers /v1/embeddings with answer(inputs), after release is
// closed when it is set; arrived, when set, hears of each request.
func backend(t *testing.T, release, arrived chan struct{}, answer func(inputs []string) any) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" {
			http.NotFound(w, r)
			return
		}
		var req embeddingRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "e" || req.EncodingFormat != "float" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		select {
		case arrived <- struct{}{}:
		default:
		}
		if release != nil {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		json.NewEncoder(w).Encode(answer(req.Input))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// vectors answers each input with a vector of 3 components.
func vectors(inputs []string) any {
	type d struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	out := struct {
		Data []d `json:"data"`
	}{}
	for i := range inputs {
		out.Data = append(out.Data, d{Index: len(inputs) - 1 - i, Embedding: []float32{1, float32(len(inputs[len(inputs)-1-i])), 0}})
	}
	return out
}

func testCfg() config.DriftEmbeddings {
	c := config.DefaultDriftEmbeddings()
	c.Backend, c.Model, c.Concurrency, c.Queue, c.Batch = "emb", "e", 1, 4, 2
	return c
}

// TestClientEmbeds: queued prompts are embedded in batches and each
// vector reaches both of its targets, matched to its prompt by index.
func TestClientEmbeds(t *testing.T) {
	srv := backend(t, nil, nil, vectors)
	c := New(testCfg(), srv.URL, nil, nil)
	a, b := &sink{got: make(chan struct{}, 16)}, &sink{got: make(chan struct{}, 16)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for i, text := range []string{"one", "three", "fifty"} {
		if !c.Offer(Job{At: time.Now(), Chars: float64(i), Text: text, To: [2]Target{a, b}}) {
			t.Fatalf("offer %d dropped", i)
		}
	}
	for range 3 {
		<-a.got
		<-b.got
	}
	if st := c.Stats(); st.Embedded != 3 || st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("stats %+v, want 3 embedded", st)
	}
}

// TestClientBounded: while the backend hangs, the queue takes Queue
// prompts and drops the rest without waiting; a failing backend's prompts
// count as failed; an answer with too few or repeated vectors is a failure.
func TestClientBounded(t *testing.T) {
	release, arrived := make(chan struct{}), make(chan struct{}, 1)
	srv := backend(t, release, arrived, vectors)
	c := New(testCfg(), srv.URL, nil, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	s := &sink{got: make(chan struct{}, 64)}
	// The worker takes the first batch and hangs on it; the queue then
	// fills; Offer never waits.
	c.Offer(Job{Text: "first", To: [2]Target{s}})
	<-arrived
	start := time.Now()
	dropped := 0
	for range 100 {
		if !c.Offer(Job{Text: "x", To: [2]Target{s}}) {
			dropped++
		}
	}
	if dropped != 100-4 {
		t.Errorf("%d of 100 dropped with a queue of 4", dropped)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("100 offers took %v", d)
	}
	close(release)
	for range 5 {
		<-s.got
	}
	cancel()
	<-done
	if st := c.Stats(); st.Embedded != 5 || st.Dropped != 96 {
		t.Errorf("stats %+v, want 5 embedded and 96 dropped", st)
	}

	for name, answer := range map[string]func([]string) any{
		"too few": func([]string) any { return map[string]any{"data": []any{}} },
		"repeated": func(in []string) any {
			return map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{1}}, map[string]any{"index": 0, "embedding": []float32{1}}}}
		},
		"zero": func(in []string) any {
			return map[string]any{"data": []any{map[string]any{"index": 0, "embedding": []float32{0, 0}}}}
		},
		"status": nil,
	} {
		var srv *httptest.Server
		if answer == nil {
			srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, `{"error":{"message":"no such model"}}`, http.StatusNotFound)
			}))
			t.Cleanup(srv.Close)
		} else {
			srv = backend(t, nil, nil, answer)
		}
		c := New(testCfg(), srv.URL, nil, nil)
		if err := c.embed(t.Context(), []Job{{Text: "a"}, {Text: "b"}}[:1+boolInt(name == "repeated")]); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
