package precision

import (
	"fmt"
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

// promptLogprobsCases are scoring responses that the scanner must read as
// encoding/json does, or leave to it.
var promptLogprobsCases = []string{
	scoredBody,
	strings.Replace(scoredBody, `"rank":1,"decoded_token":"d"`, `"rank":1.0,"decoded_token":"d"`, 1),
	strings.Replace(scoredBody, `"rank":1,"decoded_token":"d"`, `"rank":1e0,"decoded_token":"d"`, 1),
	strings.Replace(scoredBody, `{"7":`, `{"\u0037":`, 1),
	strings.Replace(scoredBody, `"8":{`, `"7":{`, 1),
	strings.Replace(scoredBody, `"logprob":-0.2`, `"Logprob":-0.2`, 1),
	strings.Replace(scoredBody, `"logprob":-0.2`, `"logprob":null`, 1),
	strings.Replace(scoredBody, `"logprob":-0.2`, `"logprob":-0.2,"logprob":-0.3`, 1),
	strings.Replace(scoredBody, `"logprob":-0.2`, `"logprob":"x"`, 1),
	strings.Replace(scoredBody, `"logprob":-0.2`, `"logprob":-1e999`, 1),
	strings.Replace(scoredBody, `{"7":{"logprob":-0.2,"rank":1,"decoded_token":"d"},`, `{"7":null,`, 1),
	strings.Replace(scoredBody, `{"4":`, `null,{"4":`, 1),
	strings.Replace(scoredBody, `"prompt_logprobs":[null,`, `"prompt_logprobs":[null,null,`, 1),
	strings.Replace(scoredBody, `"prompt_logprobs":[`, `"Prompt_Logprobs":[`, 1),
	strings.Replace(scoredBody, `{"choices":[`, `{"choices":[],"choices":[`, 1),
	strings.Replace(scoredBody, `}]}]}`, `}]},{"index":1,"prompt_logprobs":[]}]}`, 1),
	strings.Replace(scoredBody, `"text":"x",`, `"prompt_logprobs":null,`, 1),
	scoredBody + ` x`,
	scoredBody[:len(scoredBody)-3],
	`{"choices":[{"text":"x"}]}`,
	`{"choices":[{"prompt_logprobs":null}]}`,
	`{"choices":[]}`,
	`{"choices":{}}`,
	`[]`,
	`{"object":"text_completion","choices":[{"prompt_logprobs":[null,{"1":{"logprob":-0.1,"rank":1}}]}],"usage":{"prompt_tokens":2}}`,
}

// TestScanPromptLogprobsAgrees: ParsePromptLogprobs, which scans, answers
// as encoding/json alone does, positions and errors alike, and the scanner
// reads the ordinary responses itself rather than leaving them all to
// encoding/json.
func TestScanPromptLogprobsAgrees(t *testing.T) {
	for i, body := range promptLogprobsCases {
		for from := 0; from <= 5; from++ {
			checkPromptLogprobs(t, []byte(body), from)
		}
		if i == 0 {
			if _, ok := scanPromptLogprobs([]byte(body), 2); !ok {
				t.Errorf("the scanner declined a plain vLLM response")
			}
		}
	}
}

func FuzzPromptLogprobs(f *testing.F) {
	for _, body := range promptLogprobsCases {
		f.Add([]byte(body), 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, from int) { checkPromptLogprobs(t, body, from) })
}

func checkPromptLogprobs(t *testing.T, body []byte, from int) {
	t.Helper()
	got, gotErr := ParsePromptLogprobs(body, from)
	want, wantErr := decodePromptLogprobs(body, from)
	if (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%s from %d: error %v, encoding/json's %v", body, from, gotErr, wantErr)
	}
	if len(got) != len(want) {
		t.Fatalf("%s from %d: %d positions, encoding/json %d", body, from, len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.TopK != w.TopK || len(g.Top) != len(w.Top) || !math.IsNaN(g.Logprob) || !math.IsNaN(w.Logprob) {
			t.Fatalf("%s from %d: position %d %+v, encoding/json %+v", body, from, i, g, w)
		}
		// Tokens of equal rank may come in either order from the
		// decoder's map; compare them as sets of (token, logprob).
		seen := map[Alt]int{}
		for _, a := range w.Top {
			seen[a]++
		}
		for _, a := range g.Top {
			if seen[a]--; seen[a] < 0 {
				t.Fatalf("%s from %d: position %d %+v, encoding/json %+v", body, from, i, g, w)
			}
		}
	}
}

// BenchmarkParsePromptLogprobs: a scoring response over a 2,000-token prompt
// and an 8-token continuation, five alternatives at each position, as vLLM
// writes it; Decode is encoding/json alone.
func BenchmarkParsePromptLogprobs(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"x","logprobs":null,"prompt_logprobs":[null`)
	const prompt, cont = 2000, 8
	for i := 1; i < prompt+cont; i++ {
		sb.WriteString(`,{`)
		for j := range 6 {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `"%d":{"logprob":-%d.%04d,"rank":%d,"decoded_token":"tok%d"}`, 1000+i*7+j, j, i%9973, j+1, j)
		}
		sb.WriteByte('}')
	}
	sb.WriteString(`]}],"usage":{"prompt_tokens":2008,"completion_tokens":1}}`)
	body := []byte(sb.String())
	b.Logf("body %d KB", len(body)>>10)
	for _, bc := range []struct {
		name  string
		parse func([]byte, int) ([]Position, error)
	}{{"Scan", ParsePromptLogprobs}, {"Decode", decodePromptLogprobs}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if pos, err := bc.parse(body, prompt); err != nil || len(pos) != cont {
					b.Fatal(len(pos), err)
				}
			}
		})
	}
}
