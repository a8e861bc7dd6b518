package gateway

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

func TestContentChoices(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		mask  uint64
		extra int
	}{
		{"chat role chunk", `{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`, 0, 0},
		{"chat content", `{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}`, 1, 0},
		{"chat second choice", `{"choices":[{"index":1,"delta":{"content":" there"}}]}`, 2, 0},
		{"chat finish", `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`, 0, 0},
		{"chat usage chunk", `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}`, 0, 0},
		{"chat reasoning", `{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}`, 1, 0},
		{"chat tool call", `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, 1, 0},
		{"chat empty tool calls", `{"choices":[{"index":0,"delta":{"tool_calls":[ ]}}]}`, 0, 0},
		// logprobs.content is an array, not the delta's content.
		{"chat logprobs content only", `{"choices":[{"index":0,"delta":{"content":""},"logprobs":{"content":[{"token":"a","logprob":-1}]}}]}`, 0, 0},
		{"chat logprobs before delta", `{"choices":[{"logprobs":{"content":[{"token":"\"}","logprob":-1}]},"index":0,"delta":{"content":"\"}"}}]}`, 1, 0},
		{"completion text", `{"id":"x","object":"text_completion","choices":[{"index":0,"text":" sky","logprobs":null,"finish_reason":null}]}`, 1, 0},
		{"completion two choices", `{"choices":[{"index":0,"text":"a"},{"index":3,"text":"b"}]}`, 1 | 8, 0},
		{"completion empty text", `{"choices":[{"index":0,"text":"","finish_reason":"length"}]}`, 0, 0},
		{"no index: position", `{"choices":[{"text":"a"},{"text":"b"}]}`, 3, 0},
		{"index beyond timing", `{"choices":[{"index":70,"text":"a"}]}`, 0, 1},
		{"escaped text", `{"choices":[{"index":0,"delta":{"content":"\\\""}}]}`, 1, 0},
		{"whitespace", "{ \"choices\" : [ { \"index\" : 2 , \"delta\" : { \"content\" : \"x\" } } ] }", 4, 0},
		{"tgi token", `{"index":3,"token":{"id":5,"text":"a","logprob":-0.1,"special":false},"generated_text":null,"details":null}`, 1, 0},
		{"tgi error", `{"error":"boom","error_type":"generation"}`, 0, 0},
		{"nested choices ignored", `{"x":{"choices":[{"index":0,"text":"a"}]}}`, 0, 0},
		{"not an object", `[1,2]`, 0, 0},
		{"truncated", `{"choices":[{"index":0,"text":"ab`, 0, 0},
		{"garbage", `{"choices":[{"index":0,"text":"a"},}`, 1, 0},
		{"DONE", `[DONE]`, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mask, extra := contentChoices([]byte(tt.doc))
			if mask != tt.mask || extra != tt.extra {
				t.Errorf("contentChoices = %b, %d; want %b, %d", mask, extra, tt.mask, tt.extra)
			}
		})
	}
}

func TestContentChoicesAllocs(t *testing.T) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" token"},"logprobs":{"content":[{"token":" token","logprob":-0.2,"bytes":[32],"top_logprobs":[{"token":" token","logprob":-0.2}]}]},"finish_reason":null}]}`)
	if n := testing.AllocsPerRun(100, func() { contentChoices(doc) }); n != 0 {
		t.Errorf("contentChoices allocates %v times per chunk, want 0", n)
	}
}

func BenchmarkContentChoices(b *testing.B) {
	doc := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1730000000,"model":"llama-3-8b","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		contentChoices(doc)
	}
}

// FuzzContentChoices checks that the scanner never panics and agrees with
// encoding/json on valid chat and completion chunks.
func FuzzContentChoices(f *testing.F) {
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`))
	f.Add([]byte(`{"choices":[{"index":1,"text":"a"},{"index":0,"text":""}]}`))
	f.Add([]byte(`{"token":{"id":1}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		mask, extra := contentChoices(doc)
		var d struct {
			Choices []struct {
				Index *int `json:"index"`
				Text  any  `json:"text"`
				Delta *struct {
					Content          any   `json:"content"`
					ReasoningContent any   `json:"reasoning_content"`
					Reasoning        any   `json:"reasoning"`
					ToolCalls        []any `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Token any `json:"token"`
		}
		if json.Unmarshal(doc, &d) != nil || d.Token != nil {
			return
		}
		var want uint64
		wantExtra := 0
		for pos, c := range d.Choices {
			idx := pos
			if c.Index != nil {
				idx = *c.Index
			}
			content := nonEmpty(c.Text)
			if c.Delta != nil {
				content = content || nonEmpty(c.Delta.Content) || nonEmpty(c.Delta.ReasoningContent) || nonEmpty(c.Delta.Reasoning) || len(c.Delta.ToolCalls) > 0
			}
			switch {
			case !content || idx < 0:
			case idx < maxChoiceTimes:
				want |= 1 << idx
			default:
				wantExtra++
			}
		}
		// Raw keys with escapes, duplicate keys and huge indexes are where
		// the scanner and a full parser may differ; compare only the
		// plain, common shape.
		if mask != want || extra != wantExtra {
			if plainChunk(doc) {
				t.Errorf("contentChoices(%s) = %b, %d; encoding/json says %b, %d", doc, mask, extra, want, wantExtra)
			}
		}
	})
}

func nonEmpty(v any) bool { s, ok := v.(string); return ok && s != "" }

// plainChunk reports whether doc has no backslash (escaped keys), no
// number outside 0..999 and no repeated "choices"/"index"/"delta" keys.
func plainChunk(doc []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(doc, &m) != nil {
		return false
	}
	for _, c := range doc {
		if c == '\\' || c == '-' || c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	n := 0
	for i := range doc {
		if i+9 <= len(doc) && string(doc[i:i+9]) == `"choices"` {
			n++
		}
	}
	return n <= 1
}

func TestChunkCounterGaps(t *testing.T) {
	var c chunkCounter
	ms := time.Millisecond
	// Choice 0 every 10 ms, one 200 ms stall; choice 1 every 30 ms.
	at := 5 * ms
	for i := range 20 {
		c.add(1, 0, at)
		if i == 10 {
			at += 200 * ms
		} else {
			at += 10 * ms
		}
	}
	for i := range 5 {
		c.add(2, 0, time.Duration(i)*30*ms+ms)
	}
	if c.tokens != 25 {
		t.Errorf("tokens = %d, want 25", c.tokens)
	}
	n, p50, p95, mx := c.summary()
	if n != 19+4 || p50 != 10*ms || mx != 200*ms {
		t.Errorf("gaps: n %d p50 %v p95 %v max %v; want 23, 10ms, -, 200ms", n, p50, p95, mx)
	}
	// Ranks: 15 × 10 ms, 4 × 30 ms... nearest rank 22 of 23, read from
	// its histogram bucket's midpoint: within 6.25 %.
	if math.Abs(float64(p95-30*ms)) > 0.0625*float64(30*ms) {
		t.Errorf("p95 = %v, want about 30ms", p95)
	}
	if c.hist != nil {
		t.Error("summary kept the gap histogram")
	}
	var empty chunkCounter
	if n, _, _, _ := empty.summary(); n != 0 {
		t.Errorf("empty summary: %d gaps", n)
	}
}

// TestGapHistogram: the histogram's quantiles are within 6.25 % of the
// exact nearest-rank quantiles of the same gaps, over gaps from
// microseconds to minutes; an even stream's are exact; a long stream
// costs no more memory than a short one, and counts that would overflow
// halve without changing the answer.
func TestGapHistogram(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		n := 1 + rng.IntN(3000)
		scale := math.Pow(10, 3+rng.Float64()*7) // 1 µs to 10 s
		var c chunkCounter
		gaps := make([]time.Duration, n)
		for i := range gaps {
			gaps[i] = time.Duration(scale * rng.ExpFloat64())
			c.gap(gaps[i])
		}
		slices.Sort(gaps)
		exact := func(q float64) time.Duration {
			i := int(math.Ceil(q*float64(n))) - 1
			return gaps[min(max(i, 0), n-1)]
		}
		_, p50, p95, mx := c.summary()
		for _, x := range []struct {
			name      string
			got, want time.Duration
		}{{"p50", p50, exact(0.5)}, {"p95", p95, exact(0.95)}} {
			// Gaps below the first bucket (1.024 µs) all read as it.
			if x.want < 1<<gapMinExp {
				continue
			}
			if d := math.Abs(float64(x.got-x.want)) / float64(x.want); d > 0.0625 {
				t.Fatalf("trial %d (%d gaps): %s %v, exact %v (%.1f %% off)", trial, n, x.name, x.got, x.want, 100*d)
			}
		}
		if mx != gaps[n-1] {
			t.Fatalf("max %v, want %v", mx, gaps[n-1])
		}
	}

	var even chunkCounter
	for range 500 {
		even.gap(20 * time.Millisecond)
	}
	if _, p50, p95, _ := even.summary(); p50 != 20*time.Millisecond || p95 != 20*time.Millisecond {
		t.Errorf("even stream: p50 %v p95 %v, want 20ms", p50, p95)
	}

	// 200,000 gaps in one bucket: the counts halve rather than wrap.
	var long chunkCounter
	for i := range 200_000 {
		d := 10 * time.Millisecond
		if i%10 == 0 {
			d = 40 * time.Millisecond
		}
		long.gap(d)
	}
	if n, p50, p95, _ := long.summary(); n != 200_000 || p50 != 10*time.Millisecond || math.Abs(float64(p95-40*time.Millisecond)) > 0.0625*float64(40*time.Millisecond) {
		t.Errorf("long stream: %d gaps, p50 %v p95 %v; want 10ms and about 40ms", n, p50, p95)
	}
	if size := unsafe.Sizeof(gapHist{}); size > 512 {
		t.Errorf("a gap histogram takes %d bytes", size)
	}
}
