package request

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/internal/jsonscan/jsonscantest"
)

// Fuzz targets for the bytes that clients control; test/run runs every
// target for 5 s after the race tests, `test/run -fuzz` for 60 s each; one
// by hand:
//
//	go test -run '^$' -fuzz '^FuzzParseRequest$' -fuzztime 60s ./gateway/request/
//
// Inputs that once failed live in testdata/fuzz/<target>/ and run with
// every `go test`.

// fuzzOps are the operations whose bodies Parse reads (the
// gateway passes other routes' bodies through unread).
var fuzzOps = []exchange.Operation{exchange.OpChat, exchange.OpCompletion, exchange.OpEmbeddings, exchange.OpGenerate,
	exchange.OpResponses, exchange.OpMessages}

// FuzzParseRequest: Parse accepts exactly the JSON objects whose
// fields have the types the route needs, reads them as encoding/json does,
// and answers anything else with a 400 in OpenAI's error shape.
// (FuzzInjectRequest, in package rewrite, checks injection into what it
// accepts.)
func FuzzParseRequest(f *testing.F) {
	for _, doc := range jsonscantest.Bodies {
		f.Add([]byte(doc), uint8(0), uint8(5))
		// The same members in a body that chat and completions accept,
		// so that injection is tried on them.
		if len(doc) > 2 && doc[0] == '{' {
			f.Add([]byte(`{"messages":[],"prompt":"p",`+doc[1:]), uint8(len(doc)%2), uint8(2)) // chat or completions
		}
	}
	for i, s := range []struct {
		op   uint8 // index in fuzzOps
		body string
	}{
		{0, `{"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true}`},
		{1, `{"model":"m1","prompt":"x","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}`},
		{1, `{"model":"m1","prompt":["a"],"stream":true,"logprobs":null,"stream_options":{"include_usage":null}}`},
		{0, `{"model":"m1","messages":[],"logprobs":false,"top_logprobs":null,"stream":true,"stream_options":null}`},
		{0, ` {"messages":[] } ` + "\n"},
		{2, `{"input":["a","b"],"model":"e"}`},
		{3, `{"inputs":"x","parameters":{"max_new_tokens":2}}`},
		{4, `{"model":"m1","input":"hi","instructions":"be brief","previous_response_id":"resp_1","max_output_tokens":8,"stream":true}`},
		{4, `{"input":[{"role":"user","content":"hi"}],"conversation":{"id":"conv_1"},"previous_response_id":null}`},
		{4, `{"input":"x","conversation":"conv_2","previous_response_id":"a","previous_response_id":5}`},
		{5, `{"model":"m1","system":"s","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}`},
		{5, `{"system":[{"type":"text","text":"s"}],"messages":[]}`},
	} {
		f.Add([]byte(s.body), s.op, uint8(i))
	}
	f.Fuzz(func(t *testing.T, body []byte, opSel, topK uint8) {
		op := fuzzOps[int(opSel)%len(fuzzOps)]
		rf, aerr := Parse(op, body)
		if rf2, aerr2 := Parse(op, body); !reflect.DeepEqual(rf, rf2) || !reflect.DeepEqual(aerr, aerr2) {
			t.Fatalf("Parse(%s, %q) is not deterministic", op, body)
		}
		if aerr != nil {
			if aerr.Status != http.StatusBadRequest {
				t.Fatalf("Parse(%s, %q): status %d, want 400", op, body, aerr.Status)
			}
			checkErrorBody(t, aerr, len(body))
			return
		}
		if !json.Valid(body) || bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
			t.Fatalf("Parse(%s) accepted %q, not a JSON object", op, body)
		}
		var j requestJSON
		if err := json.Unmarshal(body, &j); err != nil {
			t.Fatalf("Parse(%s) accepted %q, which encoding/json rejects: %v", op, body, err)
		}
		want := j.fields()
		want.Folded = rf.Folded // checked by its effect, in FuzzInjectRequest
		if !reflect.DeepEqual(want, rf) {
			t.Fatalf("Parse(%s, %q) =\n%+v\nencoding/json:\n%+v", op, body, rf, want)
		}
		need := map[exchange.Operation]struct {
			k     Kind
			kinds string
		}{
			exchange.OpChat:       {rf.Messages, "["},
			exchange.OpCompletion: {rf.Prompt, `"[`},
			exchange.OpEmbeddings: {rf.Input, `"[`},
			exchange.OpGenerate:   {rf.Inputs, `"`},
			exchange.OpResponses:  {rf.Input, `"[`},
			exchange.OpMessages:   {rf.Messages, "["},
		}
		if n, ok := need[op]; ok && !strings.ContainsRune(n.kinds, rune(n.k)) {
			t.Fatalf("Parse(%s) accepted %q without its required field", op, body)
		}
	})
}

// checkErrorBody fails t unless e is written as OpenAI's error JSON with
// every field set, bounded by the input's size.
func checkErrorBody(t *testing.T, e *apierror.Error, inLen int) {
	t.Helper()
	rec := httptest.NewRecorder()
	apierror.Write(rec, e)
	var eb struct {
		Error struct{ Message, Type, Code string }
	}
	b := rec.Body.Bytes()
	if rec.Code != e.Status || json.Unmarshal(b, &eb) != nil || eb.Error.Message == "" || eb.Error.Type == "" || eb.Error.Code == "" {
		t.Fatalf("error %+v written as %d %q", e, rec.Code, b)
	}
	if len(b) > 6*inLen+512 { // \u escapes at most sextuple a byte
		t.Fatalf("error body of %d bytes for an input of %d", len(b), inLen)
	}
}
