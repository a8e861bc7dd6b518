package logprob

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// fuzzSeeds are payloads of every format: the recorded fixtures' events and
// bodies, and quirks.
func fuzzSeeds(f *testing.F) {
	all := fixtures
	for _, rf := range responsesFixtures {
		all = append(all, rf.fixture)
	}
	for _, fx := range all {
		raw := loadFixture(f, fx)
		if fx.stream {
			evs := events(raw)
			for _, i := range []int{0, 1, len(evs) / 2, len(evs) - 2, len(evs) - 1} {
				f.Add(evs[i], uint8(fx.format))
			}
		} else {
			f.Add(raw, uint8(fx.format))
		}
	}
	for _, s := range []string{
		chunk(ce("a", "NaN", ct("b", "-Infinity")), ce("c", "-9999.0", ct("c", "Infinity"))),
		`{"choices":[{"logprobs":{"token_logprobs":[null,-1e400],"tokens":["\ud800",""],"top_logprobs":[null,{"":-0.5}]}}]}`,
		`[{"details":{"tokens":[{"id":1,"logprob":-0.1,"special":true}],"top_tokens":[[{"id":1,"logprob":0}]]}}]`,
		`{"id":"\u00e9","model":"x","choices":[],"usage":{"completion_tokens":1e3,"prompt_tokens":-1}}`,
		"[DONE]", "", "{", `{"a":[1,]}`, `{"a":tru}`, `{"a":-}`, `{"a":"\u12"}`, `{"a":1.e5}`,
	} {
		for fm := range uint8(numFormats) {
			f.Add([]byte(s), fm)
		}
	}
}

// numFormats is the number of Format values.
const numFormats = 5

// check runs one payload and checks what must hold for any input: no
// panic; an error exactly when counted; means within their ranges; valid
// JSON objects accepted (the scanner agrees with encoding/json on them);
// truncation reported as io.ErrUnexpectedEOF.
func check(t *testing.T, data []byte, format uint8, body bool) {
	var a Accumulator
	a.Reset(Format(format%numFormats), Options{MaxTopK: int(format / numFormats % 8)})
	var err error
	if body {
		err = a.AddBody(data)
	} else {
		err = a.AddEvent(data)
	}
	s := a.Summary()
	if (err != nil) != (s.ParseErrors == 1) || s.ParseErrors > 1 {
		t.Fatalf("err %v with ParseErrors %d", err, s.ParseErrors)
	}
	if err != nil && !errors.Is(err, ErrSyntax) {
		t.Fatalf("error %v does not wrap ErrSyntax", err)
	}
	if s.Truncated != errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Truncated %v with err %v", s.Truncated, err)
	}
	if s.Tokens < 0 || s.Invalid < 0 || s.Special < 0 || s.MarginTokens > s.Tokens || s.TopK > MaxTopKLimit+1 {
		t.Fatalf("bad counts: %+v", s)
	}
	if s.Tokens > 0 {
		if !(s.MeanLogprob > placeholder && s.MeanEntropy >= 0 && s.LowShare >= 0 && s.LowShare <= 1) {
			t.Fatalf("bad means: %+v", s)
		}
	}
	if s.MarginTokens > 0 && !(s.MeanMargin >= 0 && s.MeanMargin <= 1) {
		t.Fatalf("margin out of [0, 1]: %+v", s)
	}
	trimmed := bytes.TrimSpace(data)
	if err != nil && len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(data) && depth(data) < maxDepth {
		t.Fatalf("valid JSON object %q rejected: %v", data, err)
	}
}

// depth is the nesting depth of a valid JSON text.
func depth(data []byte) int {
	dec := json.NewDecoder(bytes.NewReader(data))
	d, most := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return most
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			d++
			most = max(most, d)
		case json.Delim('}'), json.Delim(']'):
			d--
		}
	}
}

func FuzzAddEvent(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, format uint8) { check(t, data, format, false) })
}

func FuzzAddBody(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, format uint8) { check(t, data, format, true) })
}
