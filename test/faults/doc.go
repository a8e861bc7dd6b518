// Package faults holds Vigil's fault-injection suite:
// `vigil serve` and `vigil sim` run as real processes, with a real
// Toxiproxy (test/toxitest) between the gateway and its peers (Redis, the
// OTLP collector, Alertmanager, backends) to make them slow, lossy or
// silent. Each test measures what clients see (P50/P99 against a baseline
// taken in the same test, failed requests) and what is lost and recovered
// (windows, spans, alerts), logs the figures and asserts only bounds that
// a loaded machine cannot break but a broken gateway would.
//
// The package has tests only; it is separate from cmd/vigil so that its
// processes run in parallel with cmd/vigil's long tests.
//
//	go test -race -count=1 -v ./test/faults/
//
// needs VIGIL_TOXIPROXY_BIN, VIGIL_JAEGER_BIN and VIGIL_ALERTMANAGER_BIN,
// which ./test/run sets; a test whose tool is missing is skipped.
package faults
