package gateway

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/inject"
	"github.com/vigil-gw/vigil/gateway/request"
)

// simIDs matches the ids the simulator derives from the whole request
// body, stream_options included.
var simIDs = regexp.MustCompile(`"id":"(chatcmpl|cmpl)-[0-9a-f]{32}"`)

// TestUsageStripSim: against the simulator, a stream with usage injected
// (and with logprobs injected too, both strippers chained as the gateway
// chains them) reaches the client as the same request's stream without
// injection. The simulator derives the id from the request body, which
// injection changes, so ids are set to one value; every other byte must
// match.
func TestUsageStripSim(t *testing.T) {
	_, url := startSim(t, "m1", nil)
	lp := inject.NewInjector(config.Inject{SampleRatio: 1, TopLogprobs: 5})
	const (
		chat = `{"model":"m1","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":6,"stream":true`
		cmpl = `{"model":"m1","prompt":"Once upon a time","max_tokens":6,"stream":true`
	)
	type endpoint struct {
		name, path, base, logprobs string
		op                         exchange.Operation
	}
	for _, ep := range []endpoint{
		{"chat", "/v1/chat/completions", chat, `,"logprobs":true,"top_logprobs":2`, exchange.OpChat},
		{"completions", "/v1/completions", cmpl, `,"logprobs":2`, exchange.OpCompletion},
	} {
		for _, n := range []string{"", `,"n":2`} {
			for _, opts := range []string{
				"",
				`,"stream_options":null`,
				`,"stream_options":{"include_usage":false}`,
				`,"stream_options":{"include_usage":false,"continuous_usage_stats":true}`,
			} {
				for _, clientLP := range []bool{false, true} {
					for _, injectLP := range []bool{false, true} {
						if clientLP && injectLP {
							continue
						}
						body := ep.base + n + opts
						name := ep.name + n + opts
						if clientLP {
							body += ep.logprobs
							name += ", client logprobs"
						}
						if injectLP {
							name += ", logprobs injected"
						}
						body += "}"
						t.Run(name, func(t *testing.T) {
							want := simStream(t, url+ep.path, []byte(body), nil)
							if bytes.Contains(want, []byte(`"usage"`)) {
								t.Fatalf("the direct stream has usage:\n%s", want)
							}
							f, e := request.Parse(ep.op, []byte(body))
							if e != nil {
								t.Fatal(e)
							}
							up := []byte(body)
							if injectLP { // in the gateway's order
								up = lp.Rewrite(ep.op, up)
							}
							up, ok := inject.InjectUsage(ep.op, &f, up)
							if !ok {
								t.Fatal("not injected")
							}
							var raw bytes.Buffer
							got := simStream(t, url+ep.path, up, func(rc io.ReadCloser) io.ReadCloser {
								rc = struct {
									io.Reader
									io.Closer
								}{io.TeeReader(rc, &raw), rc} // what the tap sees
								if injectLP {
									rc = inject.NewStripper(rc, true)
								}
								return inject.NewUsageStripper(rc)
							})
							if !bytes.Contains(raw.Bytes(), []byte(`"choices":[],"usage":{`)) {
								t.Fatalf("the backend sent no usage chunk:\n%s", raw.Bytes())
							}
							if continuous := strings.Contains(opts, "continuous"); continuous != (bytes.Count(raw.Bytes(), []byte(`"usage":{`)) > 1) {
								t.Errorf("continuous usage %v, but the backend sent:\n%s", continuous, raw.Bytes())
							}
							if diff := cmp.Diff(string(want), string(got)); diff != "" {
								t.Errorf("stream differs (-direct +injected and stripped):\n%s", diff)
							}
						})
					}
				}
			}
		}
	}
}

// simStream posts body to url and returns the response body, with ids
// normalised, read through wrap when it is not nil.
func simStream(t *testing.T, url string, body []byte, wrap func(io.ReadCloser) io.ReadCloser) []byte {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s answered %d %s: %s", url, resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	rc := resp.Body
	if wrap != nil {
		rc = wrap(rc)
		defer rc.Close()
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return simIDs.ReplaceAll(b, []byte(`"id":"ID"`))
}
