package demo

import (
	"context"
	"slices"
	"strings"
	"time"
)

// infraWatch reads, from the gateway's /metrics, the state of what a demo
// built with Setup.Redis or Setup.OTLP depends on besides the simulators:
// the state store and the trace collector. The demo starts neither: its
// caller (the fault-isolation matrix, internal/matrix) runs them, behind
// relays it cuts. read is called by the story's goroutine only.
type infraWatch struct {
	redis, otlp bool

	dropped     float64   // the last vigil_tracing_spans_dropped_total read
	droppedAt   time.Time // when it last grew
	haveDropped bool
}

// droppedFor is how long after spans were last dropped the spans column
// stays in its alarm: longer than an export cycle (5 s) plus its retries.
const droppedFor = 10 * time.Second

// read sets the store's and the spans' states from the gateway's
// /metrics: vigil_state_store_up 0 is "down"; spans dropped within
// droppedFor "dropped".
func (w *infraWatch) read(ctx context.Context, base string, rd *reading) {
	m := scrape(ctx, base, "vigil_state_store_up", "vigil_tracing_spans_dropped_total")
	if v, ok := m["vigil_state_store_up"]; ok && w.redis && v == 0 {
		rd.state[SigStore] = alarmStates[SigStore]
	}
	if v, ok := m["vigil_tracing_spans_dropped_total"]; ok && w.otlp {
		if w.haveDropped && v > w.dropped {
			w.droppedAt = time.Now()
		}
		w.dropped, w.haveDropped = v, true
	}
	if !w.droppedAt.IsZero() && time.Since(w.droppedAt) < droppedFor {
		rd.state[SigSpans] = alarmStates[SigSpans]
	}
}

// scrape reads the gateway's /metrics and returns the named series
// (summed over their labels); missing when the scrape fails.
func scrape(ctx context.Context, base string, names ...string) map[string]float64 {
	of := func(series, name string) bool { return series == name || strings.HasPrefix(series, name+"{") }
	out := map[string]float64{}
	kept := metricSeries(ctx, base, func(series string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return of(series, n) })
	})
	for series, v := range kept {
		for _, n := range names {
			if of(series, n) {
				out[n] += v
			}
		}
	}
	return out
}
