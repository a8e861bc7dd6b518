package config_test

import (
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"

	"github.com/vigil-gw/vigil/config"
)

// example.yaml claims to set every key to its default; these tests keep it true.

func TestExampleYAMLLoadsAndValidates(t *testing.T) {
	c, err := config.Load("example.yaml")
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	// Every default, listen ":8080" without a token among them: serve
	// refuses the open admin API until a token (or admin.open) is given.
	if err := c.ValidateServe(); err == nil || !strings.HasPrefix(err.Error(), "admin.token: is empty and listen \":8080\"") {
		t.Errorf("ValidateServe(example.yaml) = %v, want the admin.token refusal alone", err)
	}
	withToken := c
	withToken.Admin.Token = "t0k3n"
	if err := withToken.ValidateServe(); err != nil {
		t.Errorf("ValidateServe(example.yaml with a token) = %v, want nil", err)
	}

	wantBackends := []config.Backend{{
		Name: "a", URL: "http://127.0.0.1:8000", Kind: "openai", Models: []string{}, Weight: 100,
	}}
	if diff := cmp.Diff(wantBackends, c.Backends); diff != "" {
		t.Errorf("example.yaml backends mismatch (-want +got):\n%s", diff)
	}
	// Apart from its one backend, the example is the defaults.
	c.Backends = nil
	if diff := cmp.Diff(config.Default(), c, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("example.yaml differs from Default() (-want +got):\n%s", diff)
	}
}

func TestExampleYAMLHasEveryKey(t *testing.T) {
	got := exampleKeys(t)
	want := map[string]schemaField{}
	docSchema(reflect.TypeFor[config.Config](), "", want)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !slices.Contains(got, k) {
			t.Errorf("example.yaml lacks %s", k)
		}
	}
}

// exampleKeys returns the path of every key in example.yaml, with list
// indexes as "[]".
func exampleKeys(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var keys []string
	nodeKeys(doc.Content[0], "", &keys)
	return keys
}

// nodeKeys appends the path of every key under n, with list indexes as "[]".
func nodeKeys(n *yaml.Node, prefix string, keys *[]string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := join(prefix, n.Content[i].Value)
			*keys = append(*keys, p)
			nodeKeys(n.Content[i+1], p, keys)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			nodeKeys(c, prefix+"[]", keys)
		}
	}
}

// join is the dotted path of key under prefix.
func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}
