// Package jaegertest runs a real Jaeger (v2, all-in-one, in-memory storage)
// for end-to-end tests and reads traces back through its query API.
//
// The binary is found at $VIGIL_JAEGER_BIN, which ./test/run sets after
// building Jaeger v1.76.0 from the test/tools module into a cache. Without
// the variable, Start skips the test.
//
//	j := jaegertest.Start(t)
//	// export OTLP/gRPC, plaintext, to j.OTLPEndpoint()
//	spans := j.Trace(t, traceID, 10*time.Second)
package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/proctest"
)

// EnvBin names the environment variable that holds the Jaeger binary's path.
const EnvBin = "VIGIL_JAEGER_BIN"

// Jaeger is a running Jaeger process owned by one test. Its methods are safe
// for concurrent use.
type Jaeger struct {
	otlp  string // host:port of the OTLP/gRPC receiver
	query string // base URL of the HTTP query API
}

// JaegerSpan is a span as Jaeger's query API returns it.
type JaegerSpan struct {
	TraceID       string
	SpanID        string
	OperationName string
	References    []Reference
	// ParentSpanID is the span id of the CHILD_OF reference; "" for a root.
	ParentSpanID string
	// Tags maps keys to string, bool, int64, float64 or []byte values.
	// Jaeger adds span.kind, otel.scope.name, otel.status_code and the like.
	Tags        map[string]any
	Logs        []Log
	ServiceName string
	// ProcessTags are the resource attributes other than service.name.
	ProcessTags map[string]any
	StartTime   time.Time
	Duration    time.Duration
}

// Reference links a span to another.
type Reference struct {
	RefType string // "CHILD_OF" or "FOLLOWS_FROM"
	TraceID string
	SpanID  string
}

// Log is a span event.
type Log struct {
	Timestamp time.Time
	Fields    map[string]any // Jaeger puts the event name under "event"
}

// startAttempts bounds retries when another process takes one of the ports
// between choosing them and Jaeger binding them.
const startAttempts = 3

// Start runs Jaeger on free ports of 127.0.0.1 and waits until it serves;
// it stops at the end of the test. It skips the test when $VIGIL_JAEGER_BIN
// is unset and fails it when the file is missing.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := proctest.Binary(t, EnvBin, "Jaeger")
	return proctest.Start(t, startAttempts, func() (*Jaeger, error) { return start(t, bin) })
}

// config is a minimal Jaeger v2 configuration: the OTLP/gRPC receiver, the
// in-memory store and the query service, each on a port chosen here. The
// other all-in-one listeners (OTLP/HTTP, Jaeger and Zipkin receivers,
// sampling, health check, expvar, zpages, the :8888 metrics endpoint) are
// left out, and the query service's own tracing is off, so that nothing
// binds a fixed port or sends traces to the machine's :4317.
const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

func start(t testing.TB, bin string) (*Jaeger, error) {
	ports, err := proctest.FreePorts(3)
	if err != nil {
		return nil, err
	}
	otlp, queryHTTP, queryGRPC := ports[0], ports[1], ports[2]
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, queryHTTP, queryGRPC, otlp), 0o644); err != nil {
		return nil, err
	}
	j := &Jaeger{otlp: otlp, query: "http://" + queryHTTP}
	err = proctest.Run(t, proctest.Service{
		Name:  "jaeger",
		Path:  bin,
		Args:  []string{"--config", "file:" + cfg},
		Env:   proctest.WithoutOTEL(os.Environ()),
		Ready: j.ready,
	})
	if err != nil {
		return nil, err
	}
	return j, nil
}

// ready reports whether the OTLP port and the query API both answer.
func (j *Jaeger) ready() bool {
	c, err := net.DialTimeout("tcp", j.otlp, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return proctest.HTTPOK(j.query + "/api/services")
}

// OTLPEndpoint returns host:port of the OTLP/gRPC receiver (plaintext).
func (j *Jaeger) OTLPEndpoint() string { return j.otlp }

// settle is how long a found trace must keep its span count before Trace
// returns it: exporters send a trace's spans in more than one batch.
const settle = 300 * time.Millisecond

// Trace polls GET /api/traces/{traceID} until the trace is found and its
// span count has not changed for a short while, and returns its spans in
// start order. It fails the test after timeout.
func (j *Jaeger) Trace(t testing.TB, traceID string, timeout time.Duration) []JaegerSpan {
	t.Helper()
	return j.poll(t, traceID, 0, timeout)
}

// TraceWithSpans polls like Trace until the trace has at least n spans.
func (j *Jaeger) TraceWithSpans(t testing.TB, traceID string, n int, timeout time.Duration) []JaegerSpan {
	t.Helper()
	return j.poll(t, traceID, n, timeout)
}

func (j *Jaeger) poll(t testing.TB, traceID string, n int, timeout time.Duration) []JaegerSpan {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var (
		spans     []JaegerSpan
		lastErr   error
		lastCount = -1
		since     time.Time
	)
	for {
		spans, lastErr = j.get(traceID)
		switch {
		case lastErr != nil || len(spans) == 0:
		case n > 0 && len(spans) >= n:
			return spans
		case n == 0 && len(spans) != lastCount:
			lastCount, since = len(spans), time.Now()
		case n == 0 && time.Since(since) >= settle:
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaegertest: trace %s: %d spans after %v (want %d; last error: %v)", traceID, len(spans), timeout, n, lastErr)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errNotFound is what get returns while Jaeger does not know the trace.
var errNotFound = errors.New("trace not found")

func (j *Jaeger) get(traceID string) ([]JaegerSpan, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.query+"/api/traces/"+traceID, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, errNotFound
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/traces/%s: %s: %.200s", traceID, resp.Status, body)
	}
	return decode(body)
}

// The JSON of Jaeger's /api/traces (the UI model, cmd/query/app/internal/uimodel).
type apiResponse struct {
	Data []struct {
		Spans []struct {
			TraceID       string `json:"traceID"`
			SpanID        string `json:"spanID"`
			OperationName string `json:"operationName"`
			References    []struct {
				RefType string `json:"refType"`
				TraceID string `json:"traceID"`
				SpanID  string `json:"spanID"`
			} `json:"references"`
			StartTime int64    `json:"startTime"` // µs since the epoch
			Duration  int64    `json:"duration"`  // µs
			Tags      []apiTag `json:"tags"`
			Logs      []apiLog `json:"logs"`
			ProcessID string   `json:"processID"`
		} `json:"spans"`
		Processes map[string]struct {
			ServiceName string   `json:"serviceName"`
			Tags        []apiTag `json:"tags"`
		} `json:"processes"`
	} `json:"data"`
}

type apiTag struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

type apiLog struct {
	Timestamp int64    `json:"timestamp"`
	Fields    []apiTag `json:"fields"`
}

func decode(body []byte) ([]JaegerSpan, error) {
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decode trace: %w", err)
	}
	var out []JaegerSpan
	for _, tr := range r.Data {
		for _, s := range tr.Spans {
			js := JaegerSpan{
				TraceID:       s.TraceID,
				SpanID:        s.SpanID,
				OperationName: s.OperationName,
				Tags:          tags(s.Tags),
				StartTime:     time.UnixMicro(s.StartTime),
				Duration:      time.Duration(s.Duration) * time.Microsecond,
			}
			for _, ref := range s.References {
				js.References = append(js.References, Reference(ref))
				if ref.RefType == "CHILD_OF" && js.ParentSpanID == "" {
					js.ParentSpanID = ref.SpanID
				}
			}
			for _, l := range s.Logs {
				js.Logs = append(js.Logs, Log{Timestamp: time.UnixMicro(l.Timestamp), Fields: tags(l.Fields)})
			}
			if p, ok := tr.Processes[s.ProcessID]; ok {
				js.ServiceName, js.ProcessTags = p.ServiceName, tags(p.Tags)
			}
			out = append(out, js)
		}
	}
	slices.SortStableFunc(out, func(a, b JaegerSpan) int { return a.StartTime.Compare(b.StartTime) })
	return out, nil
}

func tags(ts []apiTag) map[string]any {
	m := make(map[string]any, len(ts))
	for _, t := range ts {
		m[t.Key] = tagValue(t)
	}
	return m
}

// tagValue converts a tag by its declared type, so that int64 tags keep
// their precision.
func tagValue(t apiTag) any {
	raw := string(t.Value)
	switch t.Type {
	case "int64":
		if v, err := strconv.ParseInt(strings.Trim(raw, `"`), 10, 64); err == nil {
			return v
		}
	case "float64":
		if v, err := strconv.ParseFloat(strings.Trim(raw, `"`), 64); err == nil {
			return v
		}
	case "bool":
		var v bool
		if json.Unmarshal(t.Value, &v) == nil {
			return v
		}
	case "binary":
		var v []byte
		if json.Unmarshal(t.Value, &v) == nil {
			return v
		}
	}
	var v any
	if json.Unmarshal(t.Value, &v) == nil {
		return v
	}
	return raw
}
