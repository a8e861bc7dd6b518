package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/internal/jsonscan/jsonscantest"
)

// The fast path (scanResponse) must read exactly what encoding/json
// decodes, or give up: these tests hold it to json.Unmarshal on tricky
// documents, and the fuzz targets on any.
//
//	go test -run '^$' -fuzz FuzzScanResponse -fuzztime 60s ./gateway/

// checkScanResponse fails t when scanResponse, in either mode, accepts doc
// but reads it otherwise than json.Unmarshal.
func checkScanResponse(t *testing.T, doc []byte) {
	var u responseFields
	if scanResponse(doc, true, &u) {
		var b usageBody
		if err := json.Unmarshal(doc, &b); err != nil {
			t.Fatalf("scanResponse accepted %q, which encoding/json rejects: %v", doc, err)
		}
		if want := b.fields(); want != u {
			t.Fatalf("scanResponse(%q) =\n%+v\nencoding/json:\n%+v", doc, u, want)
		}
	}
	var m responseFields
	if scanResponse(doc, false, &m) {
		var b struct {
			ID    string `json:"id"`
			Model string `json:"model"`
		}
		if err := json.Unmarshal(doc, &b); err != nil {
			t.Fatalf("scanResponse (meta) accepted %q, which encoding/json rejects: %v", doc, err)
		}
		if m.id != b.ID || m.model != b.Model {
			t.Fatalf("scanResponse (meta)(%q) = %q %q, encoding/json: %q %q", doc, m.id, m.model, b.ID, b.Model)
		}
	}
}

func TestScanMatchesEncodingJSON(t *testing.T) {
	for _, doc := range jsonscantest.Bodies {
		checkScanResponse(t, []byte(doc))
	}
	// The fast path takes the common documents, or it is no fast path.
	plain, stream := recordSim(t)
	docs := [][]byte{plain.body}
	for _, ev := range stream.events {
		docs = append(docs, []byte(strings.TrimSpace(strings.TrimPrefix(string(ev), "data: "))))
	}
	for _, doc := range docs[:len(docs)-1] { // not [DONE]
		var u responseFields
		if !scanResponse(doc, true, &u) || !scanResponse(doc, false, &u) {
			t.Errorf("scanResponse gave up on %s", doc)
		}
	}
}

func FuzzScanResponse(f *testing.F) {
	for _, doc := range jsonscantest.Bodies {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkScanResponse(t, body)
	})
}
