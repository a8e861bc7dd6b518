# Usual targets; the README's commands are the source of truth.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

# Silences the deprecation warnings of go-nvml's header in every cgo build,
# keeping Go's default flags; test/run sets the same.
export CGO_CFLAGS := $(or $(CGO_CFLAGS),-O2 -g) -Wno-deprecated-declarations

.PHONY: build test fuzz bench bench-proxy bench-balance bench-prefix bench-streams soak lint demo clean

build:
	go build -ldflags '$(LDFLAGS)' -o bin/vigil ./cmd/vigil

test:
	./test/run

# Every fuzz target for 60 s, one after the other; an input that
# fails lands in its package's testdata/fuzz/<target>/. Quick:
# VIGIL_FUZZTIME=10s make fuzz; one package: ./test/run -fuzz ./gateway/.
fuzz:
	./test/run -fuzz

bench:
	go test -run '^$$' -bench . -benchmem ./...

# Vigil against nginx in front of a zero-latency backend: installs
# nginx, wrk and redis-server when missing, writes test/bench/out/. Quick:
# BENCH_ROUNDS=1 BENCH_DURATION=3s make bench-proxy. See test/bench/README.md.
bench-proxy:
	./test/bench/run

# Vigil's balancing strategies against simulated backends: needs
# only Go, writes test/bench/out/balance.*; ~4 min. Quick:
# BENCH_BALANCE_DURATION=3s make bench-balance. See test/bench/README.md.
bench-balance:
	./test/bench/run -suite balance

# The balancing strategies in front of simulated prefix caches (many
# tenants with long system prompts): needs only Go, writes
# test/bench/out/prefix.*; ~4 min. Quick: test/bench/run -suite prefix
# -prefix-duration 5s. See test/bench/README.md.
bench-prefix:
	./test/bench/run -suite prefix

# Thousands of long SSE streams at once through nginx, go-proxy, vigil-min
# and vigil-full (1,000, 5,000, 10,000): CPU per event, added gaps, memory
# and goroutines per stream, written to test/bench/out/streams.*; ~1.5 h on 2 cores.
# Quick: test/bench/run -suite streams -streams-levels 200 -streams-chunks 50
# -streams-rounds 1. See test/bench/README.md.
bench-streams:
	./test/bench/run -suite streams

# vigil-full alone under 4 minutes of mixed load (about a million requests):
# RSS, heap, goroutines and open files sampled every 10 s, written to
# test/bench/out/soak.*. Quick: test/bench/run -suite soak -soak-duration 30s.
soak:
	./test/bench/run -suite soak

# staticcheck is a tool of the test/tools module, built once into a cache
# outside the repo by test/toolbin (as test/run does).
lint:
	gofmt -l . | (! grep .)
	go vet ./...
	go mod tidy -diff
	staticcheck=$$(./test/toolbin staticcheck) && "$$staticcheck" ./...

demo:
	go run ./cmd/vigil demo

clean:
	rm -rf bin
