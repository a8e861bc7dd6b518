// Package requesttest holds what the fuzz targets over request bodies
// share: FuzzParseRequest (package request) checks the parsing,
// FuzzInjectRequest (package rewrite) the injection into what it accepts,
// and both take the same inputs (a body, an operation selector and a
// top_logprobs count), so that a body one of them finds is tried by the
// other. Only tests import it.
package requesttest

import (
	"testing"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/internal/jsonscan/jsonscantest"
)

// ops are the operations whose bodies request.Parse reads (the gateway
// passes other routes' bodies through unread).
var ops = []exchange.Operation{exchange.OpChat, exchange.OpCompletion, exchange.OpEmbeddings, exchange.OpGenerate,
	exchange.OpResponses, exchange.OpMessages}

// Op returns the operation that a fuzz input's selector picks.
func Op(sel uint8) exchange.Operation {
	return ops[int(sel)%len(ops)]
}

// AddSeeds adds the seed inputs (body, operation selector, top_logprobs)
// to f: jsonscantest's corpus, and requests that injection applies to.
func AddSeeds(f *testing.F) {
	for _, doc := range jsonscantest.Bodies {
		f.Add([]byte(doc), uint8(0), uint8(5))
		// The same members in a body that chat and completions accept,
		// so that injection is tried on them.
		if len(doc) > 2 && doc[0] == '{' {
			f.Add([]byte(`{"messages":[],"prompt":"p",`+doc[1:]), uint8(len(doc)%2), uint8(2)) // chat or completions
		}
	}
	for i, s := range []struct {
		op   uint8 // index in ops
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
		{4, `{"model":"m1","input":"hi","include":null,"top_logprobs":null,"background":false,"stream":true,"store":false}`},
		{4, `{"input":"hi","store":false,"store":null}`},
		{4, `{"input":"hi","include":["message.output_text.logprobs"],"background":null}`},
		{4, `{"input":"hi","background":true,"Include":[]}`},
		{5, `{"model":"m1","system":"s","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true}`},
		{5, `{"system":[{"type":"text","text":"s"}],"messages":[]}`},
	} {
		f.Add([]byte(s.body), s.op, uint8(i))
	}
}
