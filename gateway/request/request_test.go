package request

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vigil-gw/vigil/exchange"
)

// The fast path (scanRequest) must read exactly what encoding/json
// decodes, or give up: these tests hold it to json.Unmarshal on tricky
// documents, and the fuzz targets on any.
//
//	go test -run '^$' -fuzz FuzzScanRequest -fuzztime 60s ./gateway/request/

// scanCorpus is shared with the response scanner's tests in package
// gateway, which keep a copy while the two scanners are apart.
var scanCorpus = []string{
	``, ` `, `null`, `[]`, `"x"`, `1`, `{}`, ` { } `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,}`, `{"a":1 "b":2}`,
	`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m1","max_tokens":32,"stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	`{"model":"m1","stream":false,"prompt":"x","logprobs":0,"top_logprobs":null,"seed":7}`,
	`{"model":null,"stream":null,"messages":null}`,
	`{"model":1}`, `{"model":true}`, `{"model":[]}`, `{"stream":"yes"}`, `{"stream":1}`, `{"stream":tru}`,
	`{"model":"a","model":"b"}`, `{"model":"a","model":null}`, `{"stream":true,"stream":null}`, `{"stream":true,"stream":false}`,
	`{"max_tokens":1,"max_tokens":null}`, `{"max_tokens":null,"max_tokens":3}`,
	`{"max_tokens":"1"}`, `{"max_tokens":1e400}`, `{"max_tokens":-0}`, `{"max_tokens":1.5e3}`, `{"max_tokens":01}`,
	`{"max_tokens":-}`, `{"max_tokens":1.}`, `{"max_tokens":.5}`, `{"max_tokens":1e}`, `{"max_tokens":1E+2}`,
	`{"temperature":0,"top_p":0.9,"max_completion_tokens":12}`,
	`{"parameters":{"max_new_tokens":7,"temperature":0.5,"top_p":null}}`, `{"parameters":null}`, `{"parameters":[]}`,
	`{"parameters":{"max_new_tokens":"7"}}`, `{"parameters":{"Max_New_Tokens":7}}`,
	`{"parameters":{"max_new_tokens":1},"parameters":{"top_p":0.5}}`,
	`{"Model":"m1"}`, `{"MODEL":"m1","model":"m2"}`, `{"STREAM":true}`, `{"Stream_Options":{}}`, `{"ſtream":true}`,
	`{"mod\u0065l":"m1"}`, `{"model":"m\u0031"}`, `{"model":"mé"}`, "{\"model\":\"m\xff\"}", `{"model":"a\"b"}`,
	`{"model":"a\x"}`, `{"model":"a\u12"}`, "{\"model\":\"a\nb\"}", `{"model":"a`, `{"model":"a"`, `{"model":"a",`,
	`{"stream_options":null}`, `{"stream_options":{"include_usage":false}}`, `{"stream_options":"x"}`,
	`{"stream_options":{"a":1},"stream_options":[1,2]}`,
	`{"messages":[1,2,[3,{"a":[true,false,null]}]],"prompt":"p","input":["a"],"inputs":"q"}`,
	`{"messages":[1,]}`, `{"messages":[,1]}`, `{"messages":[1 2]}`, `{"messages":{"a":1,"b":}}`, `{"x":nul}`, `{"x":nulll}`,
	`{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	`{"a":1} `, `{"a":1} x`, `{"a":1}{}`, "\ufeff{}", "{\"a\":\"\t\"}", `{"a":"\/\b\f\n\r\t\\\""}`,
	`{"id":"chatcmpl-1","model":"m1","choices":[{"index":0,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":8}}`,
	`{"usage":null}`, `{"usage":{"prompt_tokens":1.5}}`, `{"usage":{"prompt_tokens":1e2}}`, `{"usage":{"prompt_tokens":null,"completion_tokens":-4}}`,
	`{"usage":{"prompt_tokens":99999999999999999999}}`, `{"usage":{"Prompt_Tokens":3}}`, `{"usage":[]}`, `{"usage":"x"}`,
	`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, `{"usage":{"prompt_tokens":1},"usage":null}`,
	`{"details":{"generated_tokens":7,"finish_reason":"length"}}`, `{"details":{"finish_reason":5}}`, `{"details":null}`,
	`{"choices":[]}`, `{"choices":null}`, `{"choices":[null,{"finish_reason":"stop"}]}`, `{"choices":[{"finish_reason":null}]}`,
	`{"choices":[{"finish_reason":"stop"},{"finish_reason":1}]}`, `{"choices":[1]}`, `{"choices":{}}`, `{"choices":[{"Finish_Reason":"x"}]}`,
	`{"choices":[{"finish_reason":"a"}],"choices":[{}]}`, `{"id":5}`, `{"ID":"x"}`, `{"id":"a","id":"b"}`,
	`{"choices":[{"delta":{"content":" the"},"logprobs":null,"finish_reason":null}],"usage":null}`,
}

// checkScanRequest fails t when scanRequest accepts body but reads it
// otherwise than json.Unmarshal into requestJSON.
func checkScanRequest(t *testing.T, body []byte) {
	var f Fields
	ok := scanRequest(body, &f)
	var j requestJSON
	err := json.Unmarshal(body, &j)
	if !ok {
		return
	}
	if err != nil {
		t.Fatalf("scanRequest accepted %q, which encoding/json rejects: %v", body, err)
	}
	if want := j.fields(); !reflect.DeepEqual(want, f) {
		t.Fatalf("scanRequest(%q) =\n%+v\nencoding/json:\n%+v", body, f, want)
	}
}

func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, doc := range scanCorpus {
		checkScanRequest(t, []byte(doc))
	}
	// The fast path takes the common documents, or it is no fast path.
	for _, doc := range []string{
		scanCorpus[15], scanCorpus[16], scanCorpus[17],
		// The gateway's benchmark bodies (hotpath_bench_test.go).
		`{"model":"m1","max_tokens":32,"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`,
		`{"model":"m1","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`,
		`{"model":"m1","max_tokens":32,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Benchmark prompt of a typical size for a chat request."}]}`,
		`{"inputs":"What is Deep Learning?","parameters":{"max_new_tokens":20}}`,
	} {
		var f Fields
		if !scanRequest([]byte(doc), &f) {
			t.Errorf("scanRequest gave up on %s", doc)
		}
	}
}

// TestParseRequestErrors: the bodies the fast path leaves to
// encoding/json get today's messages.
// TestLaterNullUnsets: a later null takes a key back as the backend reads
// the body (Python's json keeps the last of duplicate keys), where
// encoding/json alone would keep the earlier value: the request is routed
// and streamed as the backend takes it.
func TestLaterNullUnsets(t *testing.T) {
	for _, body := range []string{
		`{"model":"a","stream":true,"messages":[],"model":null,"stream":null}`,
		`{"model":"\u0061","stream":true,"messages":[],"model":null,"stream":null}`, // encoding/json's path
	} {
		f, err := Parse(exchange.OpChat, []byte(body))
		if err != nil || f.Model != "" || f.Stream {
			t.Errorf("%s: model %q, stream %v, %v; want no model, no stream", body, f.Model, f.Stream, err)
		}
	}
	if m := SniffModel([]byte(`{"model":"a","model":null}`)); m != "" {
		t.Errorf("SniffModel: %q, want none", m)
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct{ body, want string }{
		{`[]`, "request body must be a JSON object"},
		{`{"model":1,"messages":[]}`, "'model': expected string, got number"},
		{`{"stream":"yes","messages":[]}`, "'stream': expected bool, got string"},
		{`{"max_tokens":"1","messages":[]}`, "'max_tokens': expected float64, got string"},
		{`{"parameters":{"max_new_tokens":"7"},"messages":[]}`, "'parameters.max_new_tokens': expected float64, got string"},
		{`{"messages":[1,]}`, "request body is not valid JSON: invalid character ']' looking for beginning of value"},
		{`{"model":"m1"}`, "'messages' is required"},
		{`{"model":"m1","messages":"x"}`, "'messages' has the wrong type"},
	}
	for _, tt := range tests {
		_, aerr := Parse(exchange.OpChat, []byte(tt.body))
		if aerr == nil || aerr.Message != tt.want {
			t.Errorf("Parse(%s) = %v, want %q", tt.body, aerr, tt.want)
		}
	}
}

func FuzzScanRequest(f *testing.F) {
	for _, doc := range scanCorpus {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScanRequest(t, body)
	})
}
