package request

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/jsonscan/jsonscantest"
)

// The fast path (scanRequest) must read exactly what encoding/json
// decodes, or give up: these tests hold it to json.Unmarshal on tricky
// documents, and the fuzz targets on any.
//
//	go test -run '^$' -fuzz FuzzScanRequest -fuzztime 60s ./gateway/request/

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
	for _, doc := range jsonscantest.Bodies {
		checkScanRequest(t, []byte(doc))
	}
	// The fast path takes the common documents, or it is no fast path.
	for _, doc := range []string{
		jsonscantest.Bodies[15], jsonscantest.Bodies[16], jsonscantest.Bodies[17],
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
	for _, doc := range jsonscantest.Bodies {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScanRequest(t, body)
	})
}

// TestParseAPIs: the Responses and Messages members are read on the fast
// path as encoding/json reads them, and checked by type.
func TestParseAPIs(t *testing.T) {
	for _, c := range []struct {
		op           exchange.Operation
		body         string
		fast, ok     bool
		prev, conv   string
		maxOut       float64
		wantMaxOutOK bool
	}{
		{exchange.OpResponses, `{"model":"m","input":"hi","instructions":"x","previous_response_id":"resp_1","max_output_tokens":8}`, true, true, "resp_1", "", 8, true},
		{exchange.OpResponses, `{"input":[],"conversation":"conv_1"}`, true, true, "", "conv_1", 0, false},
		{exchange.OpResponses, `{"input":[],"conversation":{"id":"conv_2"}}`, false, true, "", "conv_2", 0, false},
		{exchange.OpResponses, `{"input":"x","previous_response_id":"a","previous_response_id":null}`, true, true, "", "", 0, false},
		{exchange.OpResponses, `{"input":"x","previous_response_id":5}`, true, false, "", "", 0, false},
		{exchange.OpResponses, `{"input":"x","conversation":{"id":5}}`, false, false, "", "", 0, false},
		{exchange.OpResponses, `{"input":"x","instructions":[]}`, true, false, "", "", 0, false},
		{exchange.OpResponses, `{"instructions":"x"}`, true, false, "", "", 0, false},
		{exchange.OpResponses, `{"input":"x","max_output_tokens":"8"}`, false, false, "", "", 0, false},
		{exchange.OpMessages, `{"model":"m","system":"s","messages":[],"max_tokens":4}`, true, true, "", "", 0, false},
		{exchange.OpMessages, `{"system":[{"type":"text","text":"s"}],"messages":[]}`, true, true, "", "", 0, false},
		{exchange.OpMessages, `{"system":{},"messages":[]}`, true, false, "", "", 0, false},
		{exchange.OpMessages, `{"messages":"hi"}`, true, false, "", "", 0, false},
	} {
		checkScanRequest(t, []byte(c.body))
		var sf Fields
		if fast := scanRequest([]byte(c.body), &sf); fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.body, fast, c.fast)
		}
		f, aerr := Parse(c.op, []byte(c.body))
		if (aerr == nil) != c.ok {
			t.Errorf("Parse(%s, %s): %v, want ok %v", c.op, c.body, aerr, c.ok)
			continue
		}
		if !c.ok {
			if aerr.Status != 400 {
				t.Errorf("%s: status %d", c.body, aerr.Status)
			}
			continue
		}
		v, ok := f.MaxOutputTokens.Get()
		if f.PreviousResponseID != c.prev || f.Conversation != c.conv || v != c.maxOut || ok != c.wantMaxOutOK {
			t.Errorf("Parse(%s) = prev %q conv %q max_output_tokens %v %v", c.body, f.PreviousResponseID, f.Conversation, v, ok)
		}
	}
}
