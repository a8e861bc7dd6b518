package shadow

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

func TestShadowBody(t *testing.T) {
	cfg := config.Default().Analyzers.Precision
	tests := []struct {
		op   exchange.Operation
		in   string
		want map[string]any
	}{
		{exchange.OpChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},
"temperature":0.9,"n":3,"max_completion_tokens":500,"logprobs":false,"stop":["\n"],"prompt_logprobs":2}`,
			map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "stream": false,
				"temperature": 0.0, "n": 1.0, "max_tokens": 32.0, "logprobs": true, "top_logprobs": 5.0, "stop": []any{"\n"}}},
		{exchange.OpCompletion, `{"model":"m","prompt":"once","echo":true,"best_of":4,"logprobs":1,"max_tokens":2,"seed":7}`,
			map[string]any{"model": "m", "prompt": "once", "stream": false, "temperature": 0.0, "n": 1.0,
				"max_tokens": 32.0, "logprobs": 5.0, "seed": 7.0}},
	}
	for _, tt := range tests {
		b, err := shadowBody(tt.op, []byte(tt.in), cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s (-want +got):\n%s", tt.op, d)
		}
	}
	if _, err := shadowBody(exchange.OpChat, []byte(`[1]`), cfg); err == nil {
		t.Error("a non-object body was accepted")
	}
}
