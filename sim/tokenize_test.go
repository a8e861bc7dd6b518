package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestTeacherForcing: a chat prompt tokenized by /tokenize and a greedy
// continuation named by token id (return_tokens_as_token_ids), given back
// as one completions prompt of ids with prompt_logprobs, are scored on
// the same contexts the continuation was generated on: at every position
// of the continuation the scored token, its logprob and the top list are
// the generation's own.
func TestTeacherForcing(t *testing.T) {
	k := DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	_, ts := newTestServer(t, k)
	msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Tell me about the sea, ünïcödé included"}]`

	code, _, b := testutil.Post(t, ts.URL+"/tokenize", `{"model":"sim-model","messages":`+msgs+`,"add_generation_prompt":true}`)
	if code != 200 {
		t.Fatalf("/tokenize: %d %s", code, b)
	}
	tok := decode[tokenizeResponse](t, b)
	if tok.Count != len(tok.Tokens) || tok.Count == 0 {
		t.Fatalf("/tokenize: %+v", tok)
	}

	code, _, b = testutil.Post(t, ts.URL+"/v1/chat/completions", `{"model":"sim-model","messages":`+msgs+
		`,"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":5,"return_tokens_as_token_ids":true}`)
	if code != 200 {
		t.Fatalf("chat: %d %s", code, b)
	}
	var chat struct {
		Choices []struct {
			Logprobs struct {
				Content []struct {
					Token       string
					Logprob     float64
					TopLogprobs []struct {
						Token   string
						Logprob float64
					} `json:"top_logprobs"`
				}
			}
		}
	}
	if err := json.Unmarshal(b, &chat); err != nil {
		t.Fatal(err)
	}
	gen := chat.Choices[0].Logprobs.Content
	ids := append([]int(nil), tok.Tokens...)
	for i, c := range gen {
		id, err := strconv.Atoi(strings.TrimPrefix(c.Token, "token_id:"))
		if err != nil || !strings.HasPrefix(c.Token, "token_id:") {
			t.Fatalf("token %d is %q, want token_id:<id>", i, c.Token)
		}
		for _, a := range c.TopLogprobs {
			if !strings.HasPrefix(a.Token, "token_id:") {
				t.Fatalf("token %d: alternative %q, want token_id:<id>", i, a.Token)
			}
		}
		ids = append(ids, id)
	}
	if len(gen) != 12 {
		t.Fatalf("%d tokens generated, want 12", len(gen))
	}

	prompt, _ := json.Marshal(ids)
	code, _, b = testutil.Post(t, ts.URL+"/v1/completions", `{"model":"sim-model","prompt":`+string(prompt)+`,"max_tokens":1,"temperature":0,"prompt_logprobs":5}`)
	if code != 200 {
		t.Fatalf("scoring: %d %s", code, b)
	}
	var scored struct {
		Choices []struct {
			PromptLogprobs []map[string]struct {
				Logprob float64
				Rank    int
			} `json:"prompt_logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(b, &scored); err != nil {
		t.Fatal(err)
	}
	pl := scored.Choices[0].PromptLogprobs
	if len(pl) != len(ids) {
		t.Fatalf("prompt_logprobs: %d positions, want %d", len(pl), len(ids))
	}
	for i, c := range gen {
		at := pl[len(tok.Tokens)+i]
		id := strings.TrimPrefix(c.Token, "token_id:")
		got, ok := at[id]
		if !ok || math.Abs(got.Logprob-c.Logprob) > 1e-9 || got.Rank != 1 {
			t.Fatalf("position %d: scored %v (listed %v), generated logprob %v at rank 1", i, got, ok, c.Logprob)
		}
		for _, a := range c.TopLogprobs {
			e, ok := at[strings.TrimPrefix(a.Token, "token_id:")]
			if !ok || math.Abs(e.Logprob-a.Logprob) > 1e-9 {
				t.Fatalf("position %d: alternative %s scored %v (listed %v), generated %v", i, a.Token, e.Logprob, ok, a.Logprob)
			}
		}
	}
}

// TestTokenizeErrors: vLLM's error body for what /tokenize cannot take.
func TestTokenizeErrors(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	for _, tt := range []struct{ body, want string }{
		{`{"model":"sim-model"}`, "prompt or messages: field required"},
		{`{"model":"sim-model","prompt":"a","messages":[]}`, "give either prompt or messages, not both"},
		{`{"model":"other","prompt":"a"}`, "The model `other` does not exist."},
		{`{"prompt":1}`, "prompt: expected a string"},
	} {
		code, _, b := testutil.Post(t, ts.URL+"/tokenize", tt.body)
		if code < 400 || !strings.Contains(string(b), tt.want) {
			t.Errorf("%s: %d %s, want an error saying %q", tt.body, code, b, tt.want)
		}
	}
	code, _, b := testutil.Post(t, ts.URL+"/tokenize", `{"prompt":"héllo"}`)
	if want := fmt.Sprintf(`"tokens":[%d,%d,%d,%d,%d,%d]`, byteIDBase+'h', byteIDBase+0xc3, byteIDBase+0xa9, byteIDBase+'l', byteIDBase+'l', byteIDBase+'o'); code != 200 || !strings.Contains(string(b), want) {
		t.Errorf("/tokenize héllo: %d %s, want %s", code, b, want)
	}
}
