package app

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/jaegertest"
)

// TestTracesInJaeger runs the whole app exporting to a real Jaeger (built
// from its Go module by ./test/run) and reads a request's trace back through
// Jaeger's query API: the caller's span, Vigil's server span, preprocess,
// inference and postprocess, linked as one tree.
func TestTracesInJaeger(t *testing.T) {
	j := jaegertest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+j.OTLPEndpoint())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_SERVICE_NAME", "vigil-e2e")

	cfg := testConfig(simBackend(t, nil))
	cfg.Tracing.Exporter = "otlp"
	_, url, stop := serveApp(t, cfg)

	const caller = "00-5b8efff798038103d269b633813fc60c-eee19b7ec3c1b174-01"
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":6,"stream":true,"logprobs":true,"top_logprobs":2,"messages":[{"role":"user","content":"hello"}]}`))
	req.Header.Set("Traceparent", caller)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	traceID := resp.Header.Get("X-Vigil-Trace-Id")
	if traceID != "5b8efff798038103d269b633813fc60c" {
		t.Fatalf("X-Vigil-Trace-Id = %q, want the caller's trace", traceID)
	}

	spans := j.TraceWithSpans(t, traceID, 4, 20*time.Second)
	byName := map[string]jaegertest.JaegerSpan{}
	for _, s := range spans {
		byName[s.OperationName] = s
	}
	server, pre, inf, post := byName["POST /v1/chat/completions"], byName["preprocess"], byName["chat m"], byName["postprocess"]
	if server.SpanID == "" || pre.SpanID == "" || inf.SpanID == "" || post.SpanID == "" {
		t.Fatalf("trace %s in Jaeger has spans %v", traceID, names(byName))
	}
	if server.ParentSpanID != "eee19b7ec3c1b174" {
		t.Errorf("server span's parent %q, want the caller's span", server.ParentSpanID)
	}
	for _, c := range []jaegertest.JaegerSpan{pre, inf, post} {
		if c.ParentSpanID != server.SpanID {
			t.Errorf("%s's parent %q, want the server span %s", c.OperationName, c.ParentSpanID, server.SpanID)
		}
	}
	if server.ServiceName != "vigil-e2e" || inf.Tags["gen_ai.request.model"] != "m" || inf.Tags["span.kind"] != "client" {
		t.Errorf("service %q, inference tags %v", server.ServiceName, inf.Tags)
	}
	if _, ok := post.Tags["vigil.logprob.mean"]; !ok {
		t.Errorf("postprocess lacks the analysis: %v", post.Tags)
	}
	if err := stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}

func names(m map[string]jaegertest.JaegerSpan) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
