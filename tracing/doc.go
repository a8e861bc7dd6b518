// Package tracing sets up OpenTelemetry tracing for Vigil and names the
// GenAI semantic-convention attributes the gateway puts on its spans.
//
// New builds a Provider from config.Tracing and the standard OTEL_*
// environment: a resource (service.name "vigil" unless the environment
// says otherwise), a parent-based ratio sampler, and either an OTLP/gRPC
// exporter behind a bounded, non-blocking batch processor or no exporter
// at all. Spans always get valid ids, so trace ids and W3C propagation
// work even when nothing is exported.
//
// Tracing never slows or fails a request: a full span queue drops spans,
// export errors drop the batch, count it in
// vigil_tracing_spans_dropped_total and log a warning at most once a
// minute.
//
// New does not touch the otel global TracerProvider or propagator; callers
// use Provider.Tracer and Provider.Propagator. The only global it sets is
// the otel error handler, once per process (see New).
package tracing
