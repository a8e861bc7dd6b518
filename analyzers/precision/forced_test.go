package precision

import (
	"math"
	"strings"
	"testing"
)

// scoredBody is a vLLM completions answer with prompt_logprobs over a
// 2-token prompt and a 2-token continuation (ids 7 then 9). At the last
// position the continuation's token ranks 3rd, below the top-2 listed.
const scoredBody = `{"choices":[{"index":0,"text":"x","prompt_logprobs":[null,
 {"5":{"logprob":-3.0,"rank":4,"decoded_token":"b"},"1":{"logprob":-0.5,"rank":1,"decoded_token":"a"},"2":{"logprob":-1.5,"rank":2,"decoded_token":"c"}},
 {"7":{"logprob":-0.2,"rank":1,"decoded_token":"d"},"8":{"logprob":-2.0,"rank":2,"decoded_token":"e"}},
 {"4":{"logprob":-0.4,"rank":1,"decoded_token":"f"},"6":{"logprob":-1.6,"rank":2,"decoded_token":"g"},"9":{"logprob":-2.5,"rank":3,"decoded_token":"h"}}]}]}`

func TestParsePromptLogprobs(t *testing.T) {
	pos, err := ParsePromptLogprobs([]byte(scoredBody), 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(pos) != 2 || len(pos[0].Top) != 2 || pos[0].TopK != 2 || len(pos[1].Top) != 3 || pos[1].TopK != 3 {
		t.Fatalf("positions %+v", pos)
	}
	if pos[0].Top[0] != (Alt{"token_id:7", -0.2}) {
		t.Errorf("most likely first: %+v", pos[0].Top)
	}
	for _, from := range []int{0, 5} {
		if _, err := ParsePromptLogprobs([]byte(scoredBody), from); err == nil {
			t.Errorf("from %d: no error", from)
		}
	}
	if _, err := ParsePromptLogprobs([]byte(`{"choices":[{"text":"x"}]}`), 1); err == nil {
		t.Error("no prompt_logprobs: no error")
	}
	// A prompt token ranked below the listed top-k: a gap in the ranks.
	gap := strings.Replace(scoredBody, `"rank":3,"decoded_token":"h"`, `"rank":9,"decoded_token":"h"`, 1)
	if pos, _ := ParsePromptLogprobs([]byte(gap), 2); pos[1].TopK != 2 {
		t.Errorf("TopK with the prompt's token ranked 9th: %d, want 2", pos[1].TopK)
	}
}

func TestCompareForced(t *testing.T) {
	backend := []Position{
		{Token: "token_id:7", Logprob: -0.3, Top: []Alt{{"token_id:7", -0.3}, {"token_id:8", -1.5}}},
		{Token: "token_id:9", Logprob: -0.7, Top: []Alt{{"token_id:9", -0.7}, {"token_id:4", -0.9}}},
	}
	ref, _ := ParsePromptLogprobs([]byte(scoredBody), 2)
	c, err := CompareForced(backend, ref)
	if err != nil {
		t.Fatal(err)
	}
	// Position 2: the backend's token 9 is the reference's 3rd; their
	// most likely tokens (9 and 4) differ.
	if c.Compared != 2 || c.Method != MethodTeacherForced || c.Top1[0] != 1 || c.Top1[1] != 0 || !c.Split {
		t.Fatalf("comparison %+v", c)
	}
	if d := c.Delta[1]; math.Abs(d-(-0.7+2.5)) > 1e-12 {
		t.Errorf("delta at position 2: %v, want %v", d, -0.7+2.5)
	}
	for i := range c.KL {
		if !(c.KLLower[i] >= 0 && c.KLLower[i] <= c.KL[i]) || math.IsInf(c.KL[i], 0) {
			t.Errorf("position %d: KL %v, lower bound %v", i, c.KL[i], c.KLLower[i])
		}
	}

	ref, _ = ParsePromptLogprobs([]byte(scoredBody), 2)
	if _, err := CompareForced(backend[:1], ref); err == nil {
		t.Error("lengths differ: no error")
	}
	text := []Position{{Token: "the", Logprob: -1}, backend[1]}
	if _, err := CompareForced(text, ref); err == nil {
		t.Error("a token that is not an id: no error")
	}
	unscored := []Position{backend[0], {Token: "token_id:3", Logprob: -1}}
	if _, err := CompareForced(unscored, ref); err == nil {
		t.Error("a token the reference did not list: no error")
	}
}
