package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// arrival is one SSE event and when it reached the client.
type arrival struct {
	at   time.Duration
	data []byte
}

// streamArrivals posts body and returns the payload of every event of the
// response with its arrival time, measured from the request.
func streamArrivals(t *testing.T, url, body string) []arrival {
	t.Helper()
	start := time.Now()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	var out []arrival
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadBytes('\n')
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			out = append(out, arrival{at: time.Since(start), data: bytes.TrimSpace(data)})
		}
		if err != nil {
			return out
		}
	}
}

// TestStall: a stream pauses once, for Stall, after StallAfter tokens of
// each choice and keeps its pace around it; a non-streaming response is
// sent that much later; without Stall nothing pauses.
//
// Tolerance: the stall is 300 ms and the pace 5 ms; the token after the
// pause comes at least 300 ms + its schedule after the request (timers
// never fire early), and every gap but the pause must stay
// under 150 ms, which leaves a loaded -race machine ample scheduling slack.
func TestStall(t *testing.T) {
	const stall, itl, after = 300 * time.Millisecond, 5 * time.Millisecond, 3
	_, ts := newTestServer(t, Knobs{ITL: itl, Stall: stall, StallAfter: after})
	_, steady := newTestServer(t, Knobs{ITL: itl})

	// tokens lists, per choice, the arrival times of the events that carry
	// a token (chat: content deltas; completions: text; TGI: token).
	tokens := func(evs []arrival) map[int][]time.Duration {
		out := map[int][]time.Duration{}
		for _, e := range evs {
			var c struct {
				Token   *struct{ Text string }
				Choices []struct {
					Index int
					Text  string
					Delta struct{ Content string }
				}
			}
			if string(e.data) == "[DONE]" {
				continue
			}
			if err := json.Unmarshal(e.data, &c); err != nil {
				t.Fatalf("event %s: %v", e.data, err)
			}
			if c.Token != nil {
				out[0] = append(out[0], e.at)
			}
			for _, ch := range c.Choices {
				if ch.Text != "" || ch.Delta.Content != "" {
					out[ch.Index] = append(out[ch.Index], e.at)
				}
			}
		}
		return out
	}
	tests := []struct {
		name, path, body string
		choices, n       int // choices and tokens each
	}{
		{"chat n=2", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"x"}],"max_tokens":6,"n":2,"stream":true,"stream_options":{"include_usage":true}}`, 2, 6},
		{"completions", "/v1/completions", `{"prompt":"x","max_tokens":6,"stream":true}`, 1, 6},
		{"tgi", "/generate_stream", `{"inputs":"x","parameters":{"max_new_tokens":6}}`, 1, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tokens(streamArrivals(t, ts.URL+tt.path, tt.body))
			if len(got) != tt.choices {
				t.Fatalf("%d choices streamed, want %d", len(got), tt.choices)
			}
			for c, times := range got {
				if len(times) != tt.n {
					t.Fatalf("choice %d: %d tokens, want %d", c, len(times), tt.n)
				}
				// The sim keeps a schedule (token k at k·ITL, plus the
				// stall from token after+1 on), so a token the client
				// read late makes the next gap shorter: the stall is
				// checked against the request's start, where a timer
				// that never fires early gives a hard lower bound.
				if at, min := times[after], stall+time.Duration(after)*itl; at < min {
					t.Errorf("choice %d: token %d came %v after the request, want at least %v (the stall after %d tokens)", c, after+1, at, min, after)
				}
				for i := 1; i < len(times); i++ {
					gap := times[i] - times[i-1]
					if i != after && gap >= stall/2 {
						t.Errorf("choice %d: token %d came %v after token %d, want the %v pace", c, i+1, gap, i, itl)
					}
				}
			}
			// Without the knob, the same request does not pause.
			for c, times := range tokens(streamArrivals(t, steady.URL+tt.path, tt.body)) {
				if d := times[len(times)-1] - times[0]; d >= stall/2 {
					t.Errorf("without stall: choice %d took %v from its first token to its last", c, d)
				}
			}
		})
	}

	// A request that ends within StallAfter tokens does not stall.
	short := tokens(streamArrivals(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":3,"stream":true}`))[0]
	if len(short) != 3 || short[2] >= stall/2 {
		t.Errorf("3 tokens with a stall after 3: arrivals %v, want 3 within %v", short, stall/2)
	}

	// Non-streaming: sent when the stream would end.
	start := time.Now()
	if status, _, body := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":6}`); status != http.StatusOK {
		t.Fatalf("non-streaming: %d %s", status, body)
	}
	if got := time.Since(start); got < stall+5*itl {
		t.Errorf("non-streaming took %v, want at least stall + 5 ITL = %v", got, stall+5*itl)
	}
}

// TestStallFirstToken: StallAfter 0 delays the first token (on top of
// TTFT) and not the embeddings, which generate none.
func TestStallFirstToken(t *testing.T) {
	const stall = 300 * time.Millisecond
	_, ts := newTestServer(t, Knobs{Stall: stall})
	evs := streamArrivals(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":3,"stream":true}`)
	if len(evs) == 0 || evs[0].at < stall {
		t.Fatalf("first event %v, want after the %v stall", evs, stall)
	}
	if d := evs[len(evs)-1].at - evs[0].at; d >= stall/2 {
		t.Errorf("the stream paused again: %v from its first event to its last", d)
	}
	start := time.Now()
	if status, _, body := testutil.Post(t, ts.URL+"/v1/embeddings", `{"input":"x"}`); status != http.StatusOK {
		t.Fatalf("embeddings: %d %s", status, body)
	}
	if got := time.Since(start); got >= stall {
		t.Errorf("embeddings took %v, want no stall", got)
	}
}
