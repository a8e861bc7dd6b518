package logprob

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/gateway/sse"
	"github.com/vigil-gw/vigil/sim"
)

var update = flag.Bool("update", false, "re-record testdata/ from the simulator")

// simOptions fix the simulator behind every fixture: seeded, with a pinned
// "created" so that bodies are byte-identical, and with enough noise that
// the chosen token sometimes falls out of the listed top-k and some
// alternatives are capped at logprob 0 (listed mass above 1).
var simOptions = sim.Options{
	Model: "sim-model", Seed: 7, Created: 1700000000,
	Knobs: sim.Knobs{Confidence: 0.75, Noise: 0.15},
}

// A fixture is a recorded simulator response: a streaming one and the
// non-streaming request it must agree with share a pair name.
type fixture struct {
	name   string // file under testdata/
	format Format
	path   string
	body   string
	stream bool
}

const (
	chatMsgs = `"messages":[{"role":"user","content":"How does the gateway know the model is getting worse?"}]`
	cmplArgs = `"prompt":"The latency of the backend","logprobs":3,"max_tokens":24`
	tgiArgs  = `"inputs":"What is Deep Learning?","parameters":{"details":true,"top_n_tokens":5,"max_new_tokens":20}`
)

var fixtures = []fixture{
	{"chat_stream_top5.sse", OpenAIChat, "/v1/chat/completions",
		`{"model":"sim-model",` + chatMsgs + `,"logprobs":true,"top_logprobs":5,"stream":true,"stream_options":{"include_usage":true}}`, true},
	{"chat_top5.json", OpenAIChat, "/v1/chat/completions",
		`{"model":"sim-model",` + chatMsgs + `,"logprobs":true,"top_logprobs":5}`, false},
	{"completions_stream_lp3.sse", OpenAICompletion, "/v1/completions",
		`{"model":"sim-model",` + cmplArgs + `,"stream":true,"stream_options":{"include_usage":true}}`, true},
	{"completions_lp3.json", OpenAICompletion, "/v1/completions",
		`{"model":"sim-model",` + cmplArgs + `}`, false},
	{"tgi_stream_top5.sse", TGIStream, "/generate_stream", `{` + tgiArgs + `}`, true},
	{"tgi_generate_top5.json", TGIGenerate, "/generate", `{` + tgiArgs + `}`, false},
}

// pairs name a streaming fixture and its non-streaming twin.
var pairs = [][2]string{
	{"chat_stream_top5.sse", "chat_top5.json"},
	{"completions_stream_lp3.sse", "completions_lp3.json"},
	{"tgi_stream_top5.sse", "tgi_generate_top5.json"},
}

func fixtureNamed(t testing.TB, name string) fixture {
	t.Helper()
	for _, f := range fixtures {
		if f.name == name {
			return f
		}
	}
	t.Fatalf("no fixture %q", name)
	return fixture{}
}

// simServer starts the simulator under httptest.
func simServer(t testing.TB, opts sim.Options) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(sim.New(opts).Handler())
	t.Cleanup(ts.Close)
	return ts
}

func postSim(t testing.TB, ts *httptest.Server, path, body string) []byte {
	t.Helper()
	resp, err := http.Post(ts.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
	}
	return b
}

// loadFixture reads a recorded response; with -update it records it first.
func loadFixture(t testing.TB, f fixture) []byte {
	t.Helper()
	path := filepath.Join("testdata", f.name)
	if *update {
		ts := simServer(t, simOptions)
		b := postSim(t, ts, f.path, f.body)
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (record fixtures with go test -run TestFixtures -update)", err)
	}
	return b
}

// events splits an SSE body into copies of its data payloads.
func events(raw []byte) [][]byte {
	var out [][]byte
	var s sse.Splitter
	s.Write(raw, func(p []byte) { out = append(out, bytes.Clone(p)) })
	s.Flush(func(p []byte) { out = append(out, bytes.Clone(p)) })
	return out
}

// summarize feeds a recorded response to a fresh Accumulator: a stream
// through an sse.Splitter one byte at a time, as the gateway's tap would
// (the splitter reuses its buffer, so the Accumulator must not keep
// payloads), a body whole.
func summarize(t testing.TB, f fixture, raw []byte, o Options) Summary {
	t.Helper()
	var a Accumulator
	a.Reset(f.format, o)
	if !f.stream {
		if err := a.AddBody(raw); err != nil {
			t.Fatalf("%s: AddBody: %v", f.name, err)
		}
		return a.Summary()
	}
	var s sse.Splitter
	for i := range raw {
		s.Write(raw[i:i+1], func(p []byte) {
			if err := a.AddEvent(p); err != nil {
				t.Fatalf("%s: AddEvent(%s): %v", f.name, p, err)
			}
		})
	}
	s.Flush(func(p []byte) {
		if err := a.AddEvent(p); err != nil {
			t.Fatalf("%s: AddEvent(%s): %v", f.name, p, err)
		}
	})
	return a.Summary()
}

// --- reference implementation over encoding/json --------------------------

// refPos is one generated position as encoding/json reads it.
type refPos struct {
	key     string // chosen token text (OpenAI) or id (TGI)
	haveKey bool
	lp      *float64
	special bool
	alts    []refAlt
}

type refAlt struct {
	key string
	lp  float64
}

// refResponse is what the reference decoder extracts from a response.
type refResponse struct {
	pos       []refPos
	id, model string
	finish    string
	output    *int
	prompt    *int
	choices   int
}

type refChatTop struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
}

type refOpenAI struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index    int `json:"index"`
		Logprobs *struct {
			Content []struct {
				Token       string       `json:"token"`
				Logprob     *float64     `json:"logprob"`
				TopLogprobs []refChatTop `json:"top_logprobs"`
			} `json:"content"`
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
}

type refTGIToken struct {
	ID      int      `json:"id"`
	Text    string   `json:"text"`
	Logprob *float64 `json:"logprob"`
	Special bool     `json:"special"`
}

type refTGI struct {
	Token     *refTGIToken  `json:"token"`
	TopTokens []refTGIToken `json:"top_tokens"`
	Details   *struct {
		FinishReason    string          `json:"finish_reason"`
		GeneratedTokens int             `json:"generated_tokens"`
		InputLength     *int            `json:"input_length"`
		Tokens          []refTGIToken   `json:"tokens"`
		TopTokens       [][]refTGIToken `json:"top_tokens"`
	} `json:"details"`
}

func tgiPos(t refTGIToken, top []refTGIToken) refPos {
	p := refPos{key: itoa(t.ID), haveKey: true, lp: t.Logprob, special: t.Special}
	for _, c := range top {
		if c.Logprob != nil {
			p.alts = append(p.alts, refAlt{itoa(c.ID), *c.Logprob})
		}
	}
	return p
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// decodeRef reads one payload (body or event) into r with encoding/json.
func decodeRef(t testing.TB, f Format, payload []byte, r *refResponse) {
	t.Helper()
	if f.tgi() {
		var v refTGI
		if err := json.Unmarshal(payload, &v); err != nil {
			t.Fatalf("reference decode: %v", err)
		}
		r.choices = 1
		if v.Token != nil {
			r.pos = append(r.pos, tgiPos(*v.Token, v.TopTokens))
		}
		if d := v.Details; d != nil {
			r.finish = d.FinishReason
			r.output = &d.GeneratedTokens
			if d.InputLength != nil {
				r.prompt = d.InputLength
			}
			for i, tok := range d.Tokens {
				var top []refTGIToken
				if i < len(d.TopTokens) {
					top = d.TopTokens[i]
				}
				r.pos = append(r.pos, tgiPos(tok, top))
			}
		}
		return
	}
	var v refOpenAI
	if err := json.Unmarshal(payload, &v); err != nil {
		t.Fatalf("reference decode: %v", err)
	}
	r.id, r.model = v.ID, v.Model
	if v.Usage != nil {
		r.output, r.prompt = &v.Usage.CompletionTokens, &v.Usage.PromptTokens
	}
	for _, c := range v.Choices {
		r.choices = max(r.choices, c.Index+1)
		if c.FinishReason != nil {
			r.finish = *c.FinishReason
		}
		lp := c.Logprobs
		if lp == nil {
			continue
		}
		for _, e := range lp.Content {
			p := refPos{key: e.Token, haveKey: true, lp: e.Logprob}
			for _, a := range e.TopLogprobs {
				p.alts = append(p.alts, refAlt{a.Token, a.Logprob})
			}
			r.pos = append(r.pos, p)
		}
		for i, l := range lp.TokenLogprobs {
			p := refPos{lp: l}
			if i < len(lp.Tokens) {
				p.key, p.haveKey = lp.Tokens[i], true
			}
			if i < len(lp.TopLogprobs) {
				for k, v := range lp.TopLogprobs[i] {
					p.alts = append(p.alts, refAlt{k, v})
				}
			}
			r.pos = append(r.pos, p)
		}
	}
}

func refOf(t testing.TB, f fixture, raw []byte) refResponse {
	t.Helper()
	var r refResponse
	if !f.stream {
		decodeRef(t, f.format, raw, &r)
		return r
	}
	for _, p := range events(raw) {
		if string(p) != "[DONE]" {
			decodeRef(t, f.format, p, &r)
		}
	}
	return r
}

// summary computes the Summary the package documents, straight from the
// definitions: plain loops, sorting for the margin, math.Log for entropy.
func (r refResponse) summary(lowProb float64) Summary {
	s := Summary{ID: r.id, Model: r.model, FinishReason: r.finish, Choices: r.choices}
	var sumEnt, sumMargin float64
	var low, positions int
	for _, p := range r.pos {
		positions++
		if p.special {
			s.Special++
			continue
		}
		if p.lp == nil || math.IsNaN(*p.lp) || math.IsInf(*p.lp, 0) || *p.lp <= -9999 {
			s.Invalid++
			continue
		}
		lp := *p.lp
		s.Tokens++
		s.SumLogprob += lp
		if math.Exp(lp) < lowProb {
			low++
		}
		var probs []float64
		found := false
		for _, a := range p.alts {
			if a.lp <= -9999 {
				continue
			}
			probs = append(probs, math.Exp(min(a.lp, 0)))
			found = found || (p.haveKey && a.key == p.key)
		}
		s.TopK = max(s.TopK, len(probs))
		if !found {
			probs = append(probs, math.Exp(min(lp, 0)))
		}
		h, total := 0.0, 0.0
		for _, q := range probs {
			total += q
			if q > 0 {
				h -= q * math.Log(q)
			}
		}
		if rest := 1 - total; rest > 0 {
			h -= rest * math.Log(rest)
		}
		sumEnt += h
		if len(probs) >= 2 {
			slices.Sort(probs)
			slices.Reverse(probs)
			sumMargin += probs[0] - probs[1]
			s.MarginTokens++
		}
	}
	nan := math.NaN()
	s.MeanLogprob, s.Perplexity, s.MeanEntropy, s.LowShare, s.MeanMargin = nan, nan, nan, nan, nan
	if s.Tokens > 0 {
		s.MeanLogprob = s.SumLogprob / float64(s.Tokens)
		s.Perplexity = math.Exp(-s.MeanLogprob)
		s.MeanEntropy = sumEnt / float64(s.Tokens)
		s.LowShare = float64(low) / float64(s.Tokens)
	}
	if s.MarginTokens > 0 {
		s.MeanMargin = sumMargin / float64(s.MarginTokens)
	}
	s.OutputTokens = positions
	if r.output != nil {
		s.OutputTokens = *r.output
	}
	if r.prompt != nil {
		s.PromptTokens = *r.prompt
	}
	return s
}
