package sim

import (
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

var update = flag.Bool("update", false, "re-record testdata/openai/ from the simulator")

// TestOpenAIGolden pins the OpenAI routes byte for byte: status, headers,
// body (every SSE event) and the counters on /metrics once the request is
// over, for each request on a fresh server. The fixtures were recorded
// before chat and completions shared their generation path; a refactoring
// that changes any byte fails here. Re-record with -update only for a
// change meant to be seen.
func TestOpenAIGolden(t *testing.T) {
	const (
		chat = "/v1/chat/completions"
		cmpl = "/v1/completions"
		msgs = `"messages":[{"role":"system","content":null},{"role":"user","content":[{"type":"text","text":"Why is "},{"type":"image_url"},{"type":"text","text":"the sky blue?"}]}]`
	)
	noisy := DefaultKnobs()
	noisy.Confidence, noisy.Noise = 0.7, 0.2
	short := DefaultKnobs()
	short.MaxModelLen, short.OutputTokens = 12, 8
	failing := DefaultKnobs()
	failing.ErrorRate = 1
	tests := []struct {
		name  string
		knobs Knobs
		path  string
		body  string
	}{
		// chat
		{"chat_default", DefaultKnobs(), chat, `{"model":"sim-model",` + msgs + `}`},
		{"chat_n2_logprobs", noisy, chat, `{` + msgs + `,"max_tokens":5,"n":2,"logprobs":true,"top_logprobs":3}`},
		{"chat_logprobs_no_top", noisy, chat, `{` + msgs + `,"max_completion_tokens":3,"max_tokens":9,"logprobs":true}`},
		{"chat_prompt_logprobs", noisy, chat, `{` + msgs + `,"max_tokens":2,"prompt_logprobs":2}`},
		{"chat_cut_at_context", short, chat, `{"messages":[{"role":"user","content":"abcdefghijklmnopqrstuvwxyz"}],"n":2}`},
		{"chat_stream", DefaultKnobs(), chat, `{` + msgs + `,"max_tokens":3,"stream":true}`},
		{"chat_stream_n2_logprobs_usage", noisy, chat, `{` + msgs + `,"max_tokens":4,"n":2,"logprobs":true,"top_logprobs":2,"stream":true,"stream_options":{"include_usage":true}}`},
		{"chat_stream_continuous", DefaultKnobs(), chat, `{` + msgs + `,"max_tokens":3,"n":2,"stream":true,"stream_options":{"continuous_usage_stats":true}}`},
		{"chat_stream_usage_off", DefaultKnobs(), chat, `{` + msgs + `,"max_tokens":2,"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`},
		{"chat_stream_cut_at_context", short, chat, `{"messages":[{"role":"user","content":"abcdefghijklmnopqrstuvwxyz"}],"stream":true,"logprobs":true,"top_logprobs":0}`},
		// completions
		{"cmpl_default", DefaultKnobs(), cmpl, `{"model":"sim-model","prompt":"Why is the sky blue?"}`},
		{"cmpl_batch_n2_logprobs", noisy, cmpl, `{"prompt":["Why is the sky blue?","Why not?"],"n":2,"max_tokens":5,"logprobs":2}`},
		{"cmpl_logprobs_0", noisy, cmpl, `{"prompt":"Why is the sky blue?","max_tokens":4,"logprobs":0}`},
		{"cmpl_prompt_logprobs", noisy, cmpl, `{"prompt":[[5,6,7,8],"Why is the sky blue?"],"max_tokens":2,"n":2,"prompt_logprobs":1}`},
		{"cmpl_token_ids", DefaultKnobs(), cmpl, `{"prompt":[[1,2,3],[4]],"max_tokens":2}`},
		{"cmpl_cut_at_context", short, cmpl, `{"prompt":["abcdefghijklmnopqrstuvwxyz","ab"]}`},
		{"cmpl_stream", DefaultKnobs(), cmpl, `{"prompt":"Why is the sky blue?","max_tokens":3,"stream":true}`},
		{"cmpl_stream_batch_n2_logprobs_usage", noisy, cmpl, `{"prompt":["Why is the sky blue?","Why not?"],"n":2,"max_tokens":3,"logprobs":3,"stream":true,"stream_options":{"include_usage":true}}`},
		{"cmpl_stream_continuous", DefaultKnobs(), cmpl, `{"prompt":["Why","not?"],"max_tokens":2,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`},
		{"cmpl_stream_cut_at_context", short, cmpl, `{"prompt":["abcdefghijklmnopqrstuvwxyz","ab"],"stream":true,"logprobs":1}`},
		// errors, in the order the handlers check them
		{"chat_err_json", DefaultKnobs(), chat, `{"messages":`},
		{"chat_err_model", DefaultKnobs(), chat, `{"model":"gpt-9"}`},
		{"chat_err_messages", DefaultKnobs(), chat, `{"messages":[],"n":0}`},
		{"chat_err_content", DefaultKnobs(), chat, `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`},
		{"chat_err_n", DefaultKnobs(), chat, `{` + msgs + `,"n":0,"top_logprobs":-1}`},
		{"chat_err_top_negative", DefaultKnobs(), chat, `{` + msgs + `,"top_logprobs":-1,"max_tokens":100000000}`},
		{"chat_err_top_without_logprobs", DefaultKnobs(), chat, `{` + msgs + `,"top_logprobs":1}`},
		{"chat_err_top_too_many", DefaultKnobs(), chat, `{` + msgs + `,"logprobs":true,"top_logprobs":21}`},
		{"chat_err_prompt_logprobs", DefaultKnobs(), chat, `{` + msgs + `,"prompt_logprobs":21}`},
		{"chat_err_stream_options", DefaultKnobs(), chat, `{` + msgs + `,"stream_options":{}}`},
		{"chat_err_context", short, chat, `{` + msgs + `,"max_tokens":9,"logprobs":true,"top_logprobs":21}`},
		{"chat_err_context_alone", short, chat, `{"messages":[{"role":"user","content":"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmn"}],"top_logprobs":0}`},
		{"chat_err_choices", DefaultKnobs(), chat, `{` + msgs + `,"n":129}`},
		{"chat_err_rate", failing, chat, `{` + msgs + `,"max_tokens":1}`},
		{"chat_err_rate_after_checks", failing, chat, `{` + msgs + `,"max_tokens":0}`},
		{"cmpl_err_prompt", DefaultKnobs(), cmpl, `{"prompt":[],"logprobs":-1}`},
		{"cmpl_err_token_id", DefaultKnobs(), cmpl, `{"prompt":[[1],[2,-3]]}`},
		{"cmpl_err_n", DefaultKnobs(), cmpl, `{"prompt":"x","n":-1,"logprobs":-1}`},
		{"cmpl_err_logprobs_negative", DefaultKnobs(), cmpl, `{"prompt":"x","logprobs":-1,"max_tokens":100000000}`},
		{"cmpl_err_logprobs_too_many", DefaultKnobs(), cmpl, `{"prompt":"x","logprobs":21}`},
		{"cmpl_err_prompt_logprobs_stream", DefaultKnobs(), cmpl, `{"prompt":"x","prompt_logprobs":1,"stream":true}`},
		{"cmpl_err_context", short, cmpl, `{"prompt":["x","abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmn"],"logprobs":30}`},
		{"cmpl_err_context_alone", short, cmpl, `{"prompt":"abcdefghijklmnopqrstuvwxyz","max_tokens":6,"logprobs":20}`},
		{"cmpl_err_choices", DefaultKnobs(), cmpl, `{"prompt":["a","b"],"n":65}`},
		{"cmpl_err_rate", failing, cmpl, `{"prompt":"x","max_tokens":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{Model: "sim-model", Seed: 42, Created: testCreated, Knobs: tt.knobs})
			ts := newServerFor(t, s)
			status, h, body := testutil.Post(t, ts.URL+tt.path, tt.body)
			// A stream's handler ends after its last event reaches the client.
			testutil.WaitFor(t, "the request to end", func() bool { return s.Stats().Running == 0 })
			_, metrics := testutil.Get(t, ts.URL+"/metrics")
			var got strings.Builder
			got.WriteString(tt.path + " " + tt.body + "\n" + strconv.Itoa(status) + " " + http.StatusText(status) + "\n")
			for _, k := range []string{"Content-Type", "Cache-Control"} {
				got.WriteString(k + ": " + h.Get(k) + "\n")
			}
			got.WriteString("\n" + string(body) + "\n\n")
			for line := range strings.Lines(string(metrics)) {
				if !strings.HasPrefix(line, "#") {
					got.WriteString(line)
				}
			}
			file := filepath.Join("testdata", "openai", tt.name+".txt")
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (record it with -update)", err)
			}
			if diff := cmp.Diff(string(want), got.String()); diff != "" {
				t.Errorf("%s (-want +got):\n%s", file, diff)
			}
		})
	}
}
