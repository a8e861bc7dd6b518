# Usual targets; the README's commands are the source of truth.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: build test bench lint demo clean

build:
	go build -ldflags '$(LDFLAGS)' -o bin/vigil ./cmd/vigil

test:
	./test/run

bench:
	go test -run '^$$' -bench . -benchmem ./...

lint:
	gofmt -l . | (! grep .)
	go vet ./...

demo:
	go run ./cmd/vigil demo

clean:
	rm -rf bin
