// Package prefix holds the end-to-end test of prefix-aware balancing: the
// real `vigil serve` in front of three real `vigil sim` processes that keep
// vLLM's prefix cache, tenants with long system prompts, and the prefix
// strategy against round robin on what the backends report (cached tokens,
// time to first token, share of requests). A bad-input test sends what a
// prefix index must survive through the same processes.
//
// The package has tests only; TestMain builds vigil once. It runs in
// ./test/run's go test pass; on its own:
//
//	go test -count=1 -v ./test/prefix/
//
// The full comparison, with more tenants, a hot tenant and two gateway
// replicas, is test/bench/run -suite prefix.
package prefix
