package sim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// Wire shapes the tests decode into: only what they check.
type (
	wireUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	wireTop struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
		Bytes   []int   `json:"bytes"`
	}
	wireLogprob struct {
		wireTop
		TopLogprobs []wireTop `json:"top_logprobs"`
	}
	wireChatChoice struct {
		Index   int `json:"index"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs *struct {
			Content []wireLogprob `json:"content"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	}
	wireChat struct {
		ID             string           `json:"id"`
		Object         string           `json:"object"`
		Created        int64            `json:"created"`
		Model          string           `json:"model"`
		Choices        []wireChatChoice `json:"choices"`
		Usage          *wireUsage       `json:"usage"`
		PromptLogprobs []map[string]struct {
			Logprob      float64 `json:"logprob"`
			Rank         int     `json:"rank"`
			DecodedToken string  `json:"decoded_token"`
		} `json:"prompt_logprobs"`
	}
	wireCompletionChoice struct {
		Index    int    `json:"index"`
		Text     string `json:"text"`
		Logprobs *struct {
			TextOffset    []int                `json:"text_offset"`
			TokenLogprobs []float64            `json:"token_logprobs"`
			Tokens        []string             `json:"tokens"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
		FinishReason   *string `json:"finish_reason"`
		PromptLogprobs []any   `json:"prompt_logprobs"`
	}
	wireCompletion struct {
		ID      string                 `json:"id"`
		Object  string                 `json:"object"`
		Choices []wireCompletionChoice `json:"choices"`
		Usage   *wireUsage             `json:"usage"`
	}
	wireError struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		} `json:"error"`
	}
)

func TestChatCompletions(t *testing.T) {
	const prompt = "Tell me about the weather today." // 32 characters: 8 tokens
	tests := []struct {
		name         string
		body         string
		wantTokens   int
		wantFinish   string
		wantLogprobs int // top_logprobs per token; -1 for none
	}{
		{"default length", `{"model":"sim-model","messages":[{"role":"user","content":"` + prompt + `"}]}`, 32, "stop", -1},
		{"max_tokens", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":5}`, 5, "length", -1},
		{"max_completion_tokens wins", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":9,"max_completion_tokens":4}`, 4, "length", -1},
		{"logprobs", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":6,"logprobs":true,"top_logprobs":3}`, 6, "length", 3},
		{"logprobs without top", `{"messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":6,"logprobs":true}`, 6, "length", 0},
		{"content parts", `{"messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"text","text":"Tell me about "},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"the weather today."}]}],"max_tokens":2}`, 2, "length", -1},
	}
	_, ts := newTestServer(t, DefaultKnobs())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Run("non-streaming", func(t *testing.T) {
				status, h, body := testutil.Post(t, ts.URL+"/v1/chat/completions", tt.body)
				if status != http.StatusOK || h.Get("Content-Type") != "application/json" {
					t.Fatalf("got %d %q: %s", status, h.Get("Content-Type"), body)
				}
				got := decode[wireChat](t, body)
				if !strings.HasPrefix(got.ID, "chatcmpl-") || len(got.ID) != len("chatcmpl-")+32 {
					t.Errorf("id = %q, want chatcmpl- and 32 hex", got.ID)
				}
				if got.Object != "chat.completion" || got.Created != testCreated || got.Model != "sim-model" {
					t.Errorf("object, created, model = %q, %d, %q", got.Object, got.Created, got.Model)
				}
				if diff := cmp.Diff(&wireUsage{8, tt.wantTokens, 8 + tt.wantTokens}, got.Usage); diff != "" {
					t.Errorf("usage (-want +got):\n%s", diff)
				}
				c := got.Choices[0]
				if c.Message.Role != "assistant" || *c.FinishReason != tt.wantFinish {
					t.Errorf("role, finish = %q, %q", c.Message.Role, *c.FinishReason)
				}
				checkChatLogprobs(t, c, tt.wantTokens, tt.wantLogprobs)
			})
			t.Run("streaming", func(t *testing.T) {
				body := strings.TrimSuffix(tt.body, "}") + `,"stream":true}`
				status, h, raw := testutil.Post(t, ts.URL+"/v1/chat/completions", body)
				if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
					t.Fatalf("got %d %q: %s", status, h.Get("Content-Type"), raw)
				}
				events := sseEvents(t, raw, "data: ")
				if string(events[len(events)-1]) != "[DONE]" {
					t.Fatalf("last event %q, want [DONE]", events[len(events)-1])
				}
				chunks := events[:len(events)-1]
				if len(chunks) != tt.wantTokens+1 {
					t.Fatalf("%d chunks, want role chunk + %d", len(chunks), tt.wantTokens)
				}
				first := decode[wireChat](t, chunks[0])
				if d := first.Choices[0].Delta; d.Role == nil || *d.Role != "assistant" || d.Content == nil || *d.Content != "" {
					t.Errorf("first chunk delta = %s, want role assistant and empty content", chunks[0])
				}
				var text strings.Builder
				var all wireChatChoice
				for i, ch := range chunks[1:] {
					c := decode[wireChat](t, ch)
					if c.Object != "chat.completion.chunk" || c.ID != first.ID || c.Usage != nil {
						t.Fatalf("chunk %d: %s", i, ch)
					}
					cc := c.Choices[0]
					text.WriteString(*cc.Delta.Content)
					last := i == tt.wantTokens-1
					if last != (cc.FinishReason != nil) || (last && *cc.FinishReason != tt.wantFinish) {
						t.Errorf("chunk %d finish_reason = %v", i, cc.FinishReason)
					}
					if cc.Logprobs != nil {
						if all.Logprobs == nil {
							all.Logprobs = cc.Logprobs
						} else {
							all.Logprobs.Content = append(all.Logprobs.Content, cc.Logprobs.Content...)
						}
					}
				}
				checkChatLogprobs(t, all, tt.wantTokens, tt.wantLogprobs)
				// The stream says what the non-streaming response says.
				_, _, plain := testutil.Post(t, ts.URL+"/v1/chat/completions", tt.body)
				if want := decode[wireChat](t, plain).Choices[0].Message.Content; text.String() != want {
					t.Errorf("streamed text %q, non-streaming %q", text.String(), want)
				}
			})
		})
	}
}

func checkChatLogprobs(t *testing.T, c wireChatChoice, tokens, top int) {
	t.Helper()
	if top < 0 {
		if c.Logprobs != nil {
			t.Errorf("logprobs present without being asked")
		}
		return
	}
	if c.Logprobs == nil || len(c.Logprobs.Content) != tokens {
		t.Fatalf("logprobs = %+v, want %d entries", c.Logprobs, tokens)
	}
	for i, lp := range c.Logprobs.Content {
		if lp.Logprob > 0 || string(bytesOf(lp.Bytes)) != lp.Token {
			t.Errorf("token %d: logprob %v, bytes %v for %q", i, lp.Logprob, lp.Bytes, lp.Token)
		}
		if len(lp.TopLogprobs) != top {
			t.Fatalf("token %d: %d top_logprobs, want %d", i, len(lp.TopLogprobs), top)
		}
		for j, alt := range lp.TopLogprobs {
			if j > 0 && alt.Logprob > lp.TopLogprobs[j-1].Logprob {
				t.Errorf("token %d: top_logprobs not in decreasing order: %+v", i, lp.TopLogprobs)
			}
		}
		// Without noise the generated token is the most likely one.
		if top > 0 && (lp.TopLogprobs[0].Token != lp.Token || lp.TopLogprobs[0].Logprob != lp.Logprob) {
			t.Errorf("token %d: %q (%v) is not top-1 %+v", i, lp.Token, lp.Logprob, lp.TopLogprobs[0])
		}
	}
}

func bytesOf(b []int) []byte {
	out := make([]byte, len(b))
	for i, v := range b {
		out[i] = byte(v)
	}
	return out
}

func TestIncludeUsage(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	tests := []struct {
		name, path, body string
		continuous       bool
	}{
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"12345678"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, false},
		{"chat default true", "/v1/chat/completions", `{"messages":[{"role":"user","content":"12345678"}],"max_tokens":3,"stream":true,"stream_options":{}}`, false},
		{"chat continuous", "/v1/chat/completions", `{"messages":[{"role":"user","content":"12345678"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`, true},
		{"completions", "/v1/completions", `{"prompt":"12345678","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, raw := testutil.Post(t, ts.URL+tt.path, tt.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, raw)
			}
			events := sseEvents(t, raw, "data: ")
			last := decode[struct {
				Choices []any      `json:"choices"`
				Usage   *wireUsage `json:"usage"`
			}](t, events[len(events)-2])
			if last.Choices == nil || len(last.Choices) != 0 {
				t.Errorf("usage chunk choices = %v, want []", last.Choices)
			}
			if diff := cmp.Diff(&wireUsage{2, 3, 5}, last.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			for _, ev := range events[:len(events)-2] {
				has := bytes.Contains(ev, []byte(`"usage"`))
				if has != tt.continuous {
					t.Errorf("chunk %s: usage present = %v, want %v", ev, has, tt.continuous)
				}
			}
		})
	}
	// Without stream_options there is no usage chunk.
	_, _, raw := testutil.Post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"stream":true}`)
	if bytes.Contains(raw, []byte(`"usage"`)) {
		t.Errorf("usage without stream_options: %s", raw)
	}
}

func TestCompletions(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	tests := []struct {
		name       string
		body       string
		wantChoice int
		wantTokens int
		wantPrompt int
		wantTop    int // legacy logprobs N; -1 for none
	}{
		{"string", `{"prompt":"12345678","max_tokens":4}`, 1, 4, 2, -1},
		{"logprobs", `{"prompt":"12345678","max_tokens":4,"logprobs":2}`, 1, 4, 2, 2},
		{"logprobs 0", `{"prompt":"12345678","max_tokens":4,"logprobs":0}`, 1, 4, 2, 0},
		{"batch and n", `{"prompt":["1234","12345678"],"max_tokens":3,"n":2}`, 4, 3, 3, -1},
		{"token ids", `{"prompt":[1,2,3],"max_tokens":2}`, 1, 2, 3, -1},
		{"batch of token ids", `{"prompt":[[1,2],[3]],"max_tokens":2}`, 2, 2, 3, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := testutil.Post(t, ts.URL+"/v1/completions", tt.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			got := decode[wireCompletion](t, body)
			if got.Object != "text_completion" || !strings.HasPrefix(got.ID, "cmpl-") {
				t.Errorf("object %q id %q", got.Object, got.ID)
			}
			if len(got.Choices) != tt.wantChoice {
				t.Fatalf("%d choices, want %d", len(got.Choices), tt.wantChoice)
			}
			n := tt.wantChoice * tt.wantTokens
			if diff := cmp.Diff(&wireUsage{tt.wantPrompt, n, tt.wantPrompt + n}, got.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			for i, c := range got.Choices {
				if c.Index != i || *c.FinishReason != "length" {
					t.Errorf("choice %d: index %d finish %q", i, c.Index, *c.FinishReason)
				}
				if tt.wantTop < 0 {
					if c.Logprobs != nil {
						t.Errorf("logprobs without being asked")
					}
					continue
				}
				lp := c.Logprobs
				if len(lp.Tokens) != tt.wantTokens || len(lp.TokenLogprobs) != tt.wantTokens ||
					len(lp.TopLogprobs) != tt.wantTokens || len(lp.TextOffset) != tt.wantTokens {
					t.Fatalf("logprobs lengths: %+v", lp)
				}
				offset := 0
				for j, tok := range lp.Tokens {
					if lp.TextOffset[j] != offset {
						t.Errorf("text_offset[%d] = %d, want %d", j, lp.TextOffset[j], offset)
					}
					offset += utf8.RuneCountInString(tok)
					if len(lp.TopLogprobs[j]) != max(tt.wantTop, 1) {
						t.Errorf("top_logprobs[%d] = %v, want %d entries", j, lp.TopLogprobs[j], max(tt.wantTop, 1))
					}
					if v, ok := lp.TopLogprobs[j][tok]; !ok || v != lp.TokenLogprobs[j] {
						t.Errorf("top_logprobs[%d] = %v lacks %q: %v", j, lp.TopLogprobs[j], tok, lp.TokenLogprobs[j])
					}
				}
				if strings.Join(lp.Tokens, "") != c.Text {
					t.Errorf("tokens %q do not make text %q", lp.Tokens, c.Text)
				}
			}
		})
	}
	t.Run("choices of n differ", func(t *testing.T) {
		_, _, body := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"hello","max_tokens":8,"n":2}`)
		got := decode[wireCompletion](t, body)
		if got.Choices[0].Text == got.Choices[1].Text {
			t.Errorf("n=2 gave the same text twice: %q", got.Choices[0].Text)
		}
	})
	t.Run("streaming", func(t *testing.T) {
		status, _, raw := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"12345678","max_tokens":4,"logprobs":1,"stream":true}`)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, raw)
		}
		events := sseEvents(t, raw, "data: ")
		if len(events) != 5 || string(events[4]) != "[DONE]" {
			t.Fatalf("events: %q", events)
		}
		var text strings.Builder
		offset := 0
		for i, ev := range events[:4] {
			c := decode[wireCompletion](t, ev).Choices[0]
			if c.Logprobs.TextOffset[0] != offset {
				t.Errorf("chunk %d text_offset %d, want %d", i, c.Logprobs.TextOffset[0], offset)
			}
			offset += utf8.RuneCountInString(c.Text)
			text.WriteString(c.Text)
			if (i == 3) != (c.FinishReason != nil) {
				t.Errorf("chunk %d finish_reason %v", i, c.FinishReason)
			}
		}
		_, _, plain := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"12345678","max_tokens":4}`)
		if want := decode[wireCompletion](t, plain).Choices[0].Text; text.String() != want {
			t.Errorf("streamed %q, non-streaming %q", text.String(), want)
		}
	})
}

func TestPromptLogprobs(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	t.Run("chat", func(t *testing.T) {
		_, _, body := testutil.Post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"abcdefghij"}],"max_tokens":1,"prompt_logprobs":2}`)
		got := decode[wireChat](t, body)
		if len(got.PromptLogprobs) != 3 || got.PromptLogprobs[0] != nil {
			t.Fatalf("prompt_logprobs = %+v, want null then 2 entries", got.PromptLogprobs)
		}
		pieces := []string{"", "efgh", "ij"}
		for i, d := range got.PromptLogprobs[1:] {
			var actual, ranked int
			for _, lp := range d {
				if lp.Logprob > 0 || lp.Rank < 1 {
					t.Errorf("entry %d: %+v", i+1, lp)
				}
				if lp.DecodedToken == pieces[i+1] {
					actual++
				} else {
					ranked++
				}
			}
			if actual != 1 || ranked != 2 {
				t.Errorf("entry %d = %+v, want the prompt token and 2 ranked", i+1, d)
			}
		}
	})
	t.Run("completions", func(t *testing.T) {
		_, _, body := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"abcdefgh","max_tokens":1,"prompt_logprobs":0}`)
		got := decode[wireCompletion](t, body)
		pl := got.Choices[0].PromptLogprobs
		if len(pl) != 2 || pl[0] != nil || len(pl[1].(map[string]any)) != 1 {
			t.Errorf("prompt_logprobs = %v", pl)
		}
	})
	t.Run("absent is null", func(t *testing.T) {
		_, _, body := testutil.Post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`)
		if !bytes.Contains(body, []byte(`"prompt_logprobs":null`)) {
			t.Errorf("body %s", body)
		}
	})
	t.Run("teacher forcing", func(t *testing.T) {
		// Scoring a prompt made of generated tokens (as token ids) gives
		// back the logprobs they were generated with.
		_, _, gen := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":[5,9],"max_tokens":3,"logprobs":1}`)
		g := decode[wireCompletion](t, gen).Choices[0].Logprobs
		ids := []string{"5", "9"}
		for _, tok := range g.Tokens {
			ids = append(ids, itoa(vocabID(t, tok)))
		}
		_, _, scored := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":[`+strings.Join(ids, ",")+`],"max_tokens":1,"prompt_logprobs":1}`)
		pl := decode[struct {
			Choices []struct {
				PromptLogprobs []map[string]struct {
					Logprob float64 `json:"logprob"`
					Rank    int     `json:"rank"`
				} `json:"prompt_logprobs"`
			} `json:"choices"`
		}](t, scored).Choices[0].PromptLogprobs
		for i := range g.Tokens {
			got := pl[2+i][ids[2+i]]
			if got.Rank != 1 || got.Logprob != g.TokenLogprobs[i] {
				t.Errorf("token %d: scored %+v, generated with %v", i, got, g.TokenLogprobs[i])
			}
		}
	})
}

func vocabID(t *testing.T, tok string) int {
	t.Helper()
	for i, v := range vocab {
		if v == tok {
			return i
		}
	}
	t.Fatalf("%q not in vocab", tok)
	return 0
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestEmbeddings(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	type wireEmb struct {
		Object string `json:"object"`
		Data   []struct {
			Index     int       `json:"index"`
			Object    string    `json:"object"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage *wireUsage `json:"usage"`
	}
	_, _, body := testutil.Post(t, ts.URL+"/v1/embeddings", `{"model":"sim-model","input":["hello world","something else","hello world"]}`)
	got := decode[wireEmb](t, body)
	if got.Object != "list" || len(got.Data) != 3 {
		t.Fatalf("body %s", body)
	}
	if diff := cmp.Diff(&wireUsage{3 + 4 + 3, 0, 10}, got.Usage); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	for i, d := range got.Data {
		var norm float64
		for _, x := range d.Embedding {
			norm += x * x
		}
		// float32 rounding of 64 components stays well inside 1e-5.
		if d.Index != i || d.Object != "embedding" || len(d.Embedding) != embeddingDim || math.Abs(norm-1) > 1e-5 {
			t.Errorf("data[%d]: index %d object %q dim %d norm %v", i, d.Index, d.Object, len(d.Embedding), norm)
		}
	}
	if diff := cmp.Diff(got.Data[0].Embedding, got.Data[2].Embedding); diff != "" {
		t.Errorf("same text, different embeddings:\n%s", diff)
	}
	if cmp.Equal(got.Data[0].Embedding, got.Data[1].Embedding) {
		t.Errorf("different texts, same embedding")
	}

	_, _, b64 := testutil.Post(t, ts.URL+"/v1/embeddings", `{"input":"hello world","encoding_format":"base64","dimensions":8}`)
	enc := decode[struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}](t, b64)
	raw, err := base64.StdEncoding.DecodeString(enc.Data[0].Embedding)
	if err != nil || len(raw) != 8*4 {
		t.Fatalf("base64 embedding %q: %v", enc.Data[0].Embedding, err)
	}
	var norm float64
	for i := range 8 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])))
		norm += x * x
	}
	if math.Abs(norm-1) > 1e-5 {
		t.Errorf("8-dimensional embedding has norm %v", norm)
	}
}

func TestModels(t *testing.T) {
	s := New(Options{Model: "m1", Created: testCreated, Knobs: Knobs{MaxModelLen: 4096}})
	ts := newServerFor(t, s)
	status, body := testutil.Get(t, ts.URL+"/v1/models")
	got := decode[struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string `json:"id"`
			Object      string `json:"object"`
			OwnedBy     string `json:"owned_by"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}](t, body)
	if status != http.StatusOK || got.Object != "list" || len(got.Data) != 1 ||
		got.Data[0].ID != "m1" || got.Data[0].Object != "model" || got.Data[0].OwnedBy != "vllm" || got.Data[0].MaxModelLen != 4096 {
		t.Errorf("got %d %s", status, body)
	}
}

func TestOpenAIErrors(t *testing.T) {
	_, ts := newTestServer(t, Knobs{MaxModelLen: 10})
	msgs := `"messages":[{"role":"user","content":"abcdefghijklmnopqrstuvwxyz0123"}]` // 30 characters: 8 tokens
	tests := []struct {
		name, path, body string
		status           int
		message          string // exact when it does not end in "*"
	}{
		{"bad JSON", "/v1/chat/completions", `{"messages":`, 400, "invalid JSON body: *"},
		{"not an object", "/v1/chat/completions", `[1]`, 400, "request body must be a JSON object"},
		{"missing messages", "/v1/chat/completions", `{"model":"sim-model"}`, 400, "messages: field required and must not be empty"},
		{"wrong type", "/v1/chat/completions", `{` + msgs + `,"max_tokens":"3"}`, 400, "max_tokens: expected an integer, got JSON string"},
		{"stream not bool", "/v1/chat/completions", `{` + msgs + `,"stream":1}`, 400, "stream: expected a boolean, got JSON number"},
		{"bad content", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, 400, "messages[0].content: must be a string or an array of content parts"},
		{"missing role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, 400, "messages[0].role: field required"},
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9",` + msgs + `}`, 404, "The model `gpt-9` does not exist."},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1,"top_logprobs":2}`, 400, "when using `top_logprobs`, `logprobs` must be set to true."},
		{"too many top_logprobs", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1,"logprobs":true,"top_logprobs":21}`, 400, "Requested sample logprobs of 21, which is greater than max allowed: 20"},
		{"stream_options without stream", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1,"stream_options":{"include_usage":true}}`, 400, "Stream options can only be defined when `stream=True`."},
		{"prompt_logprobs with stream", "/v1/chat/completions", `{` + msgs + `,"max_tokens":1,"stream":true,"prompt_logprobs":1}`, 400, "`prompt_logprobs` are not available when `stream=True`."},
		{"max_tokens 0", "/v1/chat/completions", `{` + msgs + `,"max_tokens":0}`, 400, "max_tokens must be at least 1, got 0."},
		{"n 0", "/v1/chat/completions", `{` + msgs + `,"n":0}`, 400, "n must be at least 1, got 0."},
		{"context length", "/v1/chat/completions", `{` + msgs + `,"max_tokens":5}`, 400,
			"This model's maximum context length is 10 tokens. However, you requested 13 tokens (8 in the messages, 5 in the completion). Please reduce the length of the messages or completion."},
		{"context length completions", "/v1/completions", `{"prompt":"abcdefghijklmnopqrstuvwxyz0123","max_tokens":3}`, 400,
			"This model's maximum context length is 10 tokens. However, you requested 11 tokens (8 in the messages, 3 in the completion). Please reduce the length of the messages or completion."},
		{"prompt alone too long", "/v1/chat/completions", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 40) + `"}]}`, 400,
			"This model's maximum context length is 10 tokens. However, you requested 10 tokens in the messages, Please reduce the length of the messages."},
		{"missing prompt", "/v1/completions", `{"max_tokens":1}`, 400, "prompt: field required"},
		{"bad prompt", "/v1/completions", `{"prompt":{"a":1}}`, 400, "prompt: must be a string, an array of strings, an array of token ids or an array of arrays of token ids"},
		{"negative token id", "/v1/completions", `{"prompt":[1,-2]}`, 400, "prompt: token ids must not be negative, got -2"},
		{"missing input", "/v1/embeddings", `{}`, 400, "input: field required"},
		{"bad input", "/v1/embeddings", `{"input":true}`, 400, "input: must be a string, an array of strings, an array of token ids or an array of arrays of token ids"},
		{"bad encoding", "/v1/embeddings", `{"input":"x","encoding_format":"hex"}`, 400, `encoding_format: must be "float" or "base64", got "hex"`},
		{"embedding too long", "/v1/embeddings", `{"input":"` + strings.Repeat("x", 44) + `"}`, 400,
			"This model's maximum context length is 10 tokens. However, you requested 11 tokens in the input for embedding generation. Please reduce the length of the input."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, h, body := testutil.Post(t, ts.URL+tt.path, tt.body)
			if status != tt.status || h.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q: %s", status, h.Get("Content-Type"), body)
			}
			got := decode[wireError](t, body)
			var want wireError
			want.Error.Message, want.Error.Type, want.Error.Code = tt.message, "BadRequestError", tt.status
			if tt.status == 404 {
				want.Error.Type = "NotFoundError"
			}
			if prefix, ok := strings.CutSuffix(tt.message, "*"); ok && strings.HasPrefix(got.Error.Message, prefix) {
				want.Error.Message = got.Error.Message
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("error body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestContextLengthBody pins the whole body byte for byte: gateways and
// clients match on vLLM's text.
func TestContextLengthBody(t *testing.T) {
	_, ts := newTestServer(t, Knobs{MaxModelLen: 100})
	body := `{"model":"sim-model","messages":[{"role":"user","content":"` + strings.Repeat("abcd", 90) + `"}],"max_tokens":20}`
	status, _, got := testutil.Post(t, ts.URL+"/v1/chat/completions", body)
	want := `{"error":{"message":"This model's maximum context length is 100 tokens. However, you requested 110 tokens (90 in the messages, 20 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}}`
	if status != http.StatusBadRequest {
		t.Errorf("status %d, want 400", status)
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

func TestErrorRate(t *testing.T) {
	s, ts := newTestServer(t, Knobs{ErrorRate: 1})
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		status, _, body := testutil.Post(t, ts.URL+path, `{"messages":[{"role":"user","content":"x"}],"prompt":"x","input":"x"}`)
		want := `{"error":{"message":"simulated backend error (error_rate)","type":"InternalServerError","param":null,"code":500}}`
		if status != http.StatusInternalServerError || string(body) != want {
			t.Errorf("%s: got %d %s", path, status, body)
		}
	}
	if got := s.Stats(); got.Requests != 3 || got.Errors != 3 {
		t.Errorf("stats = %+v, want 3 requests, 3 errors", got)
	}

	// About a share ErrorRate of distinct requests fail. With 400 requests
	// at 0.3 the standard deviation is 9.2: ±46 is five of them.
	s.SetKnobs(Knobs{ErrorRate: 0.3})
	failed := 0
	for i := range 400 {
		status, _, _ := testutil.Post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":1,"user":"`+itoa(i)+`"}`)
		if status == http.StatusInternalServerError {
			failed++
		}
	}
	if failed < 120-46 || failed > 120+46 {
		t.Errorf("%d of 400 failed at error_rate 0.3", failed)
	}
}

// TestPromptLogprobListJSON: the hand-written prompt_logprobs are byte for
// byte what encoding/json writes for the same entries (as marshal, without
// HTML escaping), for floats in both of its formats and tokens that need
// escaping or replacing.
func TestPromptLogprobListJSON(t *testing.T) {
	tokens := []string{"a", "Привет", "你好", `"q"`, `back\slash`, "tab\t", "\x01", "<&>", "line\u2028sep", "bad\xffutf8", ""}
	floats := []float64{-0.5, -12.25, -1e-7, -3.5e-21, -2e21, 0, math.Copysign(0, -1), -1.0000000000000002}
	var l promptLogprobList
	l = append(l, nil)
	for i, tok := range tokens {
		var d promptDict
		for j, f := range floats {
			d = append(d, promptDictEntry{i*100 + j, promptLogprob{f, j + 1, tok}})
		}
		l = append(l, d)
	}
	var want bytes.Buffer
	want.WriteString(`{"prompt_logprobs":[null`)
	for _, d := range l[1:] {
		want.WriteString(",{")
		for j, e := range d {
			if j > 0 {
				want.WriteByte(',')
			}
			v, err := marshal(e.lp)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&want, `"%d":%s`, e.id, v)
		}
		want.WriteString("}")
	}
	want.WriteString("]}")
	// encoding/json compacts a Marshaler's output and, by default,
	// escapes HTML in it; marshal (the simulator's writer) does not.
	var wantPlain bytes.Buffer
	if err := json.Compact(&wantPlain, want.Bytes()); err != nil {
		t.Fatal(err)
	}
	got, err := marshal(struct {
		P promptLogprobList `json:"prompt_logprobs"`
	}{l})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, wantPlain.Bytes()) {
		t.Errorf("got\n%s\nwant\n%s", got, wantPlain.Bytes())
	}
	if b, _ := marshal(struct {
		P promptLogprobList `json:"p"`
	}{}); string(b) != `{"p":null}` {
		t.Errorf("nil list: %s", b)
	}
	if b, err := (promptLogprobList{}).MarshalJSON(); err != nil || string(b) != "[]" {
		t.Errorf("empty list (an empty prompt): %s %v", b, err)
	}
	if _, err := (promptLogprobList{nil, {{1, promptLogprob{math.NaN(), 1, "x"}}}}).MarshalJSON(); err == nil {
		t.Error("NaN: no error")
	}
}

// TestAnyModel: with AnyModel every name is served, and the answer names
// the model asked for; without it the same name gets vLLM's 404.
func TestAnyModel(t *testing.T) {
	body := `{"model":"made-up-7","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for _, anyModel := range []bool{true, false} {
		h := New(Options{Model: "base", AnyModel: anyModel}).Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body)))
		var out struct{ Model string }
		json.Unmarshal(rec.Body.Bytes(), &out)
		switch {
		case anyModel && (rec.Code != http.StatusOK || out.Model != "made-up-7"):
			t.Errorf("AnyModel: %d %s, want 200 naming made-up-7", rec.Code, rec.Body)
		case !anyModel && rec.Code != http.StatusNotFound:
			t.Errorf("without AnyModel: %d, want 404", rec.Code)
		}
	}
}
