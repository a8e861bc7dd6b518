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
	"github.com/vigil-gw/vigil/gateway/request/requesttest"
)

// Fuzz targets for the bytes that clients control; test/run runs every
// target for 5 s after the race tests, `test/run -fuzz` for 60 s each; one
// by hand:
//
//	go test -run '^$' -fuzz '^FuzzParseRequest$' -fuzztime 60s ./gateway/request/
//
// Inputs that once failed live in testdata/fuzz/<target>/ and run with
// every `go test`.

// FuzzParseRequest: Parse accepts exactly the JSON objects whose
// fields have the types the route needs, reads them as encoding/json does,
// and answers anything else with a 400 in OpenAI's error shape.
// (FuzzInjectRequest, in package rewrite, checks injection into what it
// accepts.)
func FuzzParseRequest(f *testing.F) {
	requesttest.AddSeeds(f)
	f.Fuzz(func(t *testing.T, body []byte, opSel, topK uint8) {
		op := requesttest.Op(opSel)
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
