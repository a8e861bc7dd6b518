package inject

import (
	"testing"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/request"
)

func TestInjectRewrite(t *testing.T) {
	in := NewInjector(config.Inject{SampleRatio: 1, TopLogprobs: 3})
	tests := []struct {
		op         exchange.Operation
		body, want string
	}{
		{exchange.OpChat, `{"a":1}`, `{"a":1,"logprobs":true,"top_logprobs":3}`},
		{exchange.OpChat, "{\"a\":1}\n", "{\"a\":1,\"logprobs\":true,\"top_logprobs\":3}\n"},
		{exchange.OpChat, "{\"a\":1 \n}", "{\"a\":1 \n,\"logprobs\":true,\"top_logprobs\":3}"},
		{exchange.OpChat, `{}`, `{"logprobs":true,"top_logprobs":3}`},
		{exchange.OpChat, "{ \n }", "{ \n \"logprobs\":true,\"top_logprobs\":3}"},
		{exchange.OpCompletion, `{"prompt":"}"}`, `{"prompt":"}","logprobs":3}`},
		{exchange.OpCompletion, `{}`, `{"logprobs":3}`},
		{exchange.OpResponses, `{"input":"}"}`, `{"input":"}","include":["message.output_text.logprobs"],"top_logprobs":3}`},
	}
	for _, tt := range tests {
		if got := string(in.Rewrite(tt.op, []byte(tt.body))); got != tt.want {
			t.Errorf("rewrite(%s, %q) = %q, want %q", tt.op, tt.body, got, tt.want)
		}
	}
}

func TestInjectEligible(t *testing.T) {
	in := NewInjector(config.Inject{SampleRatio: 1, TopLogprobs: 5})
	tests := []struct {
		op   exchange.Operation
		body string
		want bool
	}{
		{exchange.OpChat, `{}`, true},
		{exchange.OpChat, `{"logprobs":false}`, true},
		{exchange.OpChat, `{"logprobs":null}`, true},
		{exchange.OpChat, `{"logprobs":null,"top_logprobs":null}`, true},
		{exchange.OpChat, `{"logprobs":true}`, false},
		{exchange.OpChat, `{"logprobs":1}`, false},
		{exchange.OpChat, `{"top_logprobs":0}`, false},
		{exchange.OpChat, `{"logprobs":false,"top_logprobs":0}`, false},
		{exchange.OpCompletion, `{}`, true},
		{exchange.OpCompletion, `{"logprobs":null}`, true},
		{exchange.OpCompletion, `{"logprobs":0}`, false},
		{exchange.OpCompletion, `{"logprobs":5}`, false},
		{exchange.OpResponses, `{"store":false}`, true},
		{exchange.OpResponses, `{"include":null,"top_logprobs":null,"background":false,"store":false}`, true},
		{exchange.OpResponses, `{}`, false},
		{exchange.OpResponses, `{"store":true}`, false},
		{exchange.OpResponses, `{"store":null}`, false},
		{exchange.OpResponses, `{"include":["message.output_text.logprobs"],"store":false}`, false},
		{exchange.OpResponses, `{"include":["reasoning.encrypted_content"],"store":false}`, false},
		{exchange.OpResponses, `{"include":[],"store":false}`, false},
		{exchange.OpResponses, `{"top_logprobs":0,"store":false}`, false},
		{exchange.OpResponses, `{"background":true,"store":false}`, false},
		{exchange.OpEmbeddings, `{}`, false},
		{exchange.OpGenerate, `{}`, false},
		{exchange.OpOther, `{}`, false},
	}
	for _, tt := range tests {
		f, aerr := request.Parse(exchange.OpOther, []byte(tt.body))
		if aerr != nil {
			t.Fatal(aerr.Message)
		}
		if got := in.Sample(tt.op, &f); got != tt.want {
			t.Errorf("sample(%s, %s) = %v, want %v", tt.op, tt.body, got, tt.want)
		}
	}
	var off Injector
	if off.Sample(exchange.OpChat, &request.Fields{}) {
		t.Error("the zero injector injects")
	}
}
