package manifests

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"testing"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// deployDir is the deploy/ directory the tests check; go test runs in the
// package's directory, so the default is the repository's own.
var deployDir = flag.String("deploy", filepath.Join("..", "..", "..", "deploy"),
	"the deploy/ directory to check (absolute, or relative to test/tools/manifests)")

// repoRoot is the repository whose Go source says which metrics Vigil
// exports. It stays the checkout's own when -deploy points at a copy.
var repoRoot = filepath.Join("..", "..", "..")

// A findings collects what one check of deploy/ found: problems fail the
// test, notes are logged to show what was checked. The zero value is ready.
type findings struct {
	problems []string
	notes    []string
}

func (f *findings) errorf(format string, args ...any) {
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func (f *findings) logf(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// report hands a check's findings to t.
func report(t *testing.T, f findings) {
	t.Helper()
	for _, n := range f.notes {
		t.Log(n)
	}
	for _, p := range f.problems {
		t.Error(p)
	}
}

func TestKubernetes(t *testing.T) { report(t, checkKubernetes(*deployDir)) }

func TestCompose(t *testing.T) { report(t, checkCompose(*deployDir)) }

func TestPrometheus(t *testing.T) { report(t, checkPrometheus(*deployDir)) }

// decodeStrict decodes YAML into v the way the Kubernetes API server does
// with strict field validation: unknown and duplicate fields are errors and
// field names are case-sensitive (encoding/json's are not, so
// sigs.k8s.io/yaml.UnmarshalStrict would accept "Resources:").
func decodeStrict(data []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// vigilConfig is the part of Vigil's config (vigil.yaml) that the manifests
// refer to. It is decoded leniently: Vigil's own strict loader lives in the
// main module (config.Load) and this module does not import it.
type vigilConfig struct {
	Listen   string `json:"listen"`
	Backends []struct {
		Name    string `json:"name"`
		URL     string `json:"url"`
		Metrics string `json:"metrics"`
	} `json:"backends"`
	State struct {
		Redis struct {
			URL string `json:"url"`
		} `json:"redis"`
	} `json:"state"`
	Limits struct {
		ShutdownDelay string `json:"shutdown_delay"` // a Go duration
		ShutdownGrace string `json:"shutdown_grace"`
	} `json:"limits"`
}

// listenPort returns the port of Vigil's listen address and fails when the
// host would not be reachable from outside its container (a loopback address
// makes every Service, port mapping and probe fail).
func listenPort(listen string) (int32, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return 0, fmt.Errorf("listen %q: %w", listen, err)
	}
	if host != "" && host != "0.0.0.0" && host != "::" {
		return 0, fmt.Errorf("listen %q: only reachable inside the container; use %q", listen, ":"+port)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("listen %q: port %q is not a port number", listen, port)
	}
	return int32(n), nil
}
