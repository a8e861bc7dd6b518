package sim

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/internal/testutil"
)

type (
	wireTGIToken struct {
		ID      int     `json:"id"`
		Text    string  `json:"text"`
		Logprob float64 `json:"logprob"`
		Special bool    `json:"special"`
	}
	wireTGIDetails struct {
		FinishReason    string  `json:"finish_reason"`
		GeneratedTokens int     `json:"generated_tokens"`
		Seed            *uint64 `json:"seed"`
		InputLength     int     `json:"input_length"`
		Prefill         []struct {
			ID      int      `json:"id"`
			Text    string   `json:"text"`
			Logprob *float64 `json:"logprob"`
		} `json:"prefill"`
		Tokens    []wireTGIToken   `json:"tokens"`
		TopTokens [][]wireTGIToken `json:"top_tokens"`
	}
	wireTGI struct {
		Index         int             `json:"index"`
		Token         *wireTGIToken   `json:"token"`
		TopTokens     []wireTGIToken  `json:"top_tokens"`
		GeneratedText *string         `json:"generated_text"`
		Details       *wireTGIDetails `json:"details"`
	}
)

func TestGenerate(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	tests := []struct {
		name       string
		body       string
		wantTokens int
		wantFinish string
		details    bool
		topN       int
		prefill    int
	}{
		{"plain", `{"inputs":"What is Deep Learning?"}`, 32, "", false, 0, 0},
		{"details", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":5,"details":true,"seed":7}}`, 5, "length", true, 0, 0},
		{"default length", `{"inputs":"What is Deep Learning?","parameters":{"details":true}}`, 32, "eos_token", true, 0, 0},
		{"top_n_tokens", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":4,"details":true,"top_n_tokens":3}}`, 4, "length", true, 3, 0},
		{"decoder_input_details", `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":2,"details":true,"decoder_input_details":true}}`, 2, "length", true, 0, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := testutil.Post(t, ts.URL+"/generate", tt.body)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, body)
			}
			got := decode[wireTGI](t, body)
			if got.GeneratedText == nil || *got.GeneratedText == "" {
				t.Fatalf("no generated_text: %s", body)
			}
			if !tt.details {
				if got.Details != nil {
					t.Errorf("details without being asked: %s", body)
				}
				return
			}
			d := got.Details
			if d.FinishReason != tt.wantFinish || d.GeneratedTokens != tt.wantTokens || len(d.Tokens) != tt.wantTokens {
				t.Errorf("details: finish %q, generated %d, %d tokens", d.FinishReason, d.GeneratedTokens, len(d.Tokens))
			}
			var text strings.Builder
			for _, tok := range d.Tokens {
				text.WriteString(tok.Text)
				if tok.Logprob > 0 || tok.Special {
					t.Errorf("token %+v", tok)
				}
			}
			if text.String() != *got.GeneratedText {
				t.Errorf("tokens make %q, generated_text %q", text.String(), *got.GeneratedText)
			}
			if tt.topN == 0 && d.TopTokens != nil {
				t.Errorf("top_tokens without being asked")
			}
			if tt.topN > 0 {
				if len(d.TopTokens) != tt.wantTokens {
					t.Fatalf("%d top_tokens lists, want %d", len(d.TopTokens), tt.wantTokens)
				}
				for i, top := range d.TopTokens {
					if len(top) != tt.topN || top[0] != d.Tokens[i] {
						t.Errorf("top_tokens[%d] = %+v for token %+v", i, top, d.Tokens[i])
					}
				}
			}
			if len(d.Prefill) != tt.prefill {
				t.Fatalf("prefill %+v, want %d tokens", d.Prefill, tt.prefill)
			}
			for i, p := range d.Prefill {
				if (i == 0) != (p.Logprob == nil) {
					t.Errorf("prefill[%d] = %+v: only the first has no logprob", i, p)
				}
			}
		})
	}
}

func TestGenerateStream(t *testing.T) {
	_, ts := newTestServer(t, DefaultKnobs())
	for _, details := range []bool{false, true} {
		body := `{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":4,"top_n_tokens":2,"details":` + map[bool]string{false: "false", true: "true"}[details] + `}}`
		status, h, raw := testutil.Post(t, ts.URL+"/generate_stream", body)
		if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("got %d %q: %s", status, h.Get("Content-Type"), raw)
		}
		events := sseEvents(t, raw, "data:")
		if len(events) != 4 {
			t.Fatalf("%d events, want 4: %s", len(events), raw)
		}
		var text strings.Builder
		for i, ev := range events {
			e := decode[wireTGI](t, ev)
			text.WriteString(e.Token.Text)
			if e.Index != i+1 || len(e.TopTokens) != 2 {
				t.Errorf("event %d: index %d, %d top_tokens", i, e.Index, len(e.TopTokens))
			}
			if i < 3 && (e.GeneratedText != nil || e.Details != nil) {
				t.Errorf("event %d carries the end: %s", i, ev)
			}
		}
		last := decode[wireTGI](t, events[3])
		if last.GeneratedText == nil || *last.GeneratedText != text.String() {
			t.Errorf("generated_text %v, tokens make %q", last.GeneratedText, text.String())
		}
		if !details {
			if last.Details != nil {
				t.Errorf("details without being asked: %s", events[3])
			}
			continue
		}
		want := &wireTGIDetails{FinishReason: "length", GeneratedTokens: 4, InputLength: 6}
		if diff := cmp.Diff(want, last.Details); diff != "" {
			t.Errorf("details (-want +got):\n%s", diff)
		}
	}
}

func TestTGIErrors(t *testing.T) {
	_, ts := newTestServer(t, Knobs{MaxModelLen: 10})
	tests := []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"too long", "/generate", `{"inputs":"abcdefghijklmnopqrstuvwxyz0123","parameters":{"max_new_tokens":5}}`, 422,
			`{"error":"Input validation error: ` + "`inputs` tokens + `max_new_tokens` must be <= 10. Given: 8 `inputs` tokens and 5 `max_new_tokens`" + `","error_type":"validation"}`},
		{"too long stream", "/generate_stream", `{"inputs":"abcdefghijklmnopqrstuvwxyz0123","parameters":{"max_new_tokens":5}}`, 422,
			`{"error":"Input validation error: ` + "`inputs` tokens + `max_new_tokens` must be <= 10. Given: 8 `inputs` tokens and 5 `max_new_tokens`" + `","error_type":"validation"}`},
		{"input alone too long", "/generate", `{"inputs":"` + strings.Repeat("x", 40) + `"}`, 422,
			`{"error":"Input validation error: ` + "`inputs` must have less than 9 tokens. Given: 10" + `","error_type":"validation"}`},
		{"empty", "/generate", `{"inputs":""}`, 422, `{"error":"Input validation error: ` + "`inputs` cannot be empty" + `","error_type":"validation"}`},
		{"top_n_tokens", "/generate", `{"inputs":"x","parameters":{"top_n_tokens":6}}`, 422,
			`{"error":"Input validation error: ` + "`top_n_tokens` must be >= 0 and <= 5. Given: 6" + `","error_type":"validation"}`},
		{"max_new_tokens 0", "/generate", `{"inputs":"x","parameters":{"max_new_tokens":0}}`, 422,
			`{"error":"Input validation error: ` + "`max_new_tokens` must be strictly positive" + `","error_type":"validation"}`},
		{"decoder_input_details stream", "/generate_stream", `{"inputs":"x","parameters":{"decoder_input_details":true}}`, 422,
			`{"error":"Input validation error: ` + "`decoder_input_details` == true is not supported when streaming tokens" + `","error_type":"validation"}`},
		{"missing inputs", "/generate", `{}`, 422,
			`{"error":"Failed to deserialize the JSON body into the target type: missing field ` + "`inputs`" + `","error_type":"validation"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := testutil.Post(t, ts.URL+tt.path, tt.body)
			if status != tt.status {
				t.Errorf("status %d, want %d", status, tt.status)
			}
			if diff := cmp.Diff(tt.want, string(body)); diff != "" {
				t.Errorf("body (-want +got):\n%s", diff)
			}
		})
	}

	_, errs := newTestServer(t, Knobs{ErrorRate: 1})
	status, _, body := testutil.Post(t, errs.URL+"/generate", `{"inputs":"x"}`)
	want := `{"error":"Request failed during generation: simulated backend error (error_rate)","error_type":"generation"}`
	if status != http.StatusInternalServerError || string(body) != want {
		t.Errorf("error_rate 1: got %d %s", status, body)
	}
}

func TestInfoAndHealth(t *testing.T) {
	_, ts := newTestServer(t, Knobs{MaxModelLen: 2048, MaxNumSeqs: 8})
	status, body := testutil.Get(t, ts.URL+"/info")
	got := decode[map[string]any](t, body)
	if status != http.StatusOK || got["model_id"] != "sim-model" || got["max_total_tokens"] != 2048.0 || got["max_concurrent_requests"] != 8.0 {
		t.Errorf("/info: %d %s", status, body)
	}
	if status, body := testutil.Get(t, ts.URL+"/health"); status != http.StatusOK {
		t.Errorf("/health: %d %s", status, body)
	}
}
