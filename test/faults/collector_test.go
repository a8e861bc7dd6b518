package faults

import (
	"strings"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/test/jaegertest"
	"github.com/vigil-gw/vigil/test/toxitest"
)

// TestCollectorBlackholed: the OTLP collector (a real Jaeger) is
// blackholed for five seconds: Toxiproxy keeps the gRPC connection open
// and swallows everything in both directions, so exports hang until their
// timeout instead of failing fast. Clients must not notice (spans are
// queued without blocking, and dropped when the queue is full). Every span
// must be accounted for: delivered to Jaeger (late, once the collector is
// back) or counted in vigil_tracing_spans_dropped_total; and traces made
// after the collector came back reach Jaeger.
//
// The span queue is 256 (OTEL_BSP_MAX_QUEUE_SIZE) instead of the SDK's
// 2048, so that five seconds of this test's load overflow it, as minutes
// of production traffic would overflow the default.
func TestCollectorBlackholed(t *testing.T) {
	t.Parallel()
	j := jaegertest.Start(t)
	tp := toxitest.Start(t)
	px := tp.Proxy(t, "otlp", j.OTLPEndpoint())
	be := startSim(t)
	cfg := strings.Replace(baseConfig(backendYAML("a", be.URL)),
		"tracing: {exporter: none}", "tracing: {exporter: otlp, sample_ratio: 1}", 1)
	g := startVigil(t, "gw", cfg,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+px.Addr(), "OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_SERVICE_NAME=vigil-faults", "OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_BSP_MAX_QUEUE_SIZE=256")

	l := startLoad(t, "baseline", 4, 5*time.Millisecond, chat(10*time.Second, newClient(g.URL)))
	time.Sleep(2 * time.Second)
	l.setPhase("collector blackholed")
	px.AddToxic(t, toxitest.Blackhole("in", "upstream"))
	px.AddToxic(t, toxitest.Blackhole("out", "downstream"))
	time.Sleep(5 * time.Second)
	l.setPhase("recovered")
	px.RemoveToxic(t, "in")
	px.RemoveToxic(t, "out")
	time.Sleep(3 * time.Second)
	l.stop()
	s := report(t, l)

	// Every request makes the same spans: count them on one trace.
	base := l.outcomes("baseline")
	perRequest := len(j.Trace(t, base[0].traceID, 20*time.Second))
	ended := float64(perRequest * l.total())
	var exported, dropped float64
	settled := time.Now()
	for {
		m := g.metrics(t)
		exported, dropped = metricSum(m, "vigil_tracing_spans_exported_total"), metricSum(m, "vigil_tracing_spans_dropped_total")
		if exported+dropped >= ended || time.Since(settled) > 20*time.Second {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	rec := l.outcomes("recovered")
	last := rec[len(rec)-1].traceID
	start := time.Now()
	j.TraceWithSpans(t, last, perRequest, 20*time.Second)
	t.Logf("spans: %d requests × %d = %.0f ended; %.0f exported, %.0f counted as dropped, %.0f lost uncounted",
		l.total(), perRequest, ended, exported, dropped, ended-exported-dropped)
	t.Logf("the last trace made after the collector came back was in Jaeger %v after the load ended",
		time.Since(start).Round(100*time.Millisecond))

	if f := s["collector blackholed"].failed + s["recovered"].failed; f != 0 {
		t.Errorf("%d client requests failed with a healthy backend", f)
	}
	// An export waits up to 10 s (OTEL_EXPORTER_OTLP_TIMEOUT): a request
	// that waited on it would be far beyond this.
	if p99 := s["collector blackholed"].p99; p99 >= 500*time.Millisecond {
		t.Errorf("P99 with the collector blackholed %v: requests wait on the exporter", p99)
	}
	if exported+dropped != ended {
		t.Errorf("%.0f spans ended, %.0f exported + %.0f counted as dropped: %.0f unaccounted for",
			ended, exported, dropped, ended-exported-dropped)
	}
	if dropped == 0 {
		t.Errorf("no span counted as dropped: the blackhole did not overflow the queue")
	}
}
