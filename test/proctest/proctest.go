// Package proctest runs the real services end-to-end tests need (Jaeger,
// Alertmanager) from binaries that ./test/run builds.
package proctest

import (
	"os"
	"testing"
)

// Binary returns the path in the environment variable env. It skips the
// test when env is unset, saying that ./test/run builds what, and fails it
// when the file is missing.
func Binary(t testing.TB, env, what string) string {
	t.Helper()
	bin := os.Getenv(env)
	if bin == "" {
		t.Skip(env + " unset: run ./test/run, which builds " + what)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return bin
}

// Start calls start until it succeeds, at most attempts times (another
// process may take a chosen free port before the service binds it), and
// fails the test with the last error.
func Start[T any](t testing.TB, attempts int, start func() (T, error)) T {
	t.Helper()
	var err error
	for range attempts {
		var v T
		if v, err = start(); err == nil {
			return v
		}
	}
	t.Fatal(err)
	var zero T
	return zero
}
