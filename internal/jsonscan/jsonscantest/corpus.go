// Package jsonscantest holds test inputs for the fast paths built on
// package jsonscan, which must read a document exactly as encoding/json
// does or give up: the request parser (gateway/request), the response
// scanner (gateway) and the injection that follows the request parser
// (gateway/inject) seed their tests and fuzz targets from one corpus.
// Only tests import it.
package jsonscantest

// Bodies are JSON documents, valid and not, chosen to trip a hand-written
// scanner: syntax errors at every position, type errors, duplicate keys,
// keys that match a field only under case folding or after unescaping,
// numbers at float64's edges, deep nesting, request and response shapes.
// Bodies[15], Bodies[16] and Bodies[17] are common chat and completion
// requests, which a fast path must take.
var Bodies = []string{
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
