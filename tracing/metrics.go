package tracing

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Provider's own counters. They exist even without a
// registry, so the code that bumps them needs no nil checks.
type metrics struct {
	exported prometheus.Counter
	dropped  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		exported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_tracing_spans_exported_total",
			Help: "Spans the trace exporter delivered.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "vigil_tracing_spans_dropped_total",
			Help: "Spans lost because their export failed (collector unreachable, timeout, rejected) or the export queue was full.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.exported, err = register(reg, m.exported)
	if err != nil {
		return nil, err
	}
	m.dropped, err = register(reg, m.dropped)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the counter already registered under
// the same name, so that a second Provider on the same registry (tests, a
// restart in process) adds to the same series instead of failing.
func register(reg prometheus.Registerer, c prometheus.Counter) (prometheus.Counter, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
			return existing, nil
		}
	}
	return nil, fmt.Errorf("register tracing metrics: %w", err)
}
