package config_test

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gopkg.in/yaml.v3"

	"github.com/vigil-gw/vigil/config"
)

// docs/configuration.md is the configuration reference people read; these tests
// keep its table true to the schema and to Default(), so that it cannot drift.

const configDoc = "../docs/configuration.md"

// docRow is one key of the reference table with its documented default.
type docRow struct {
	key, def string
	line     int
}

// readDocTable returns the rows of the key table in path: one per key, a cell
// naming several keys ("`a.x`, `a.y`") giving each the row's default.
func readDocTable(t *testing.T, path string) []docRow {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([^`]*)`")
	var rows []docRow
	sc := bufio.NewScanner(bytes.NewReader(data))
	inTable := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "| key | default |") {
			inTable = true
			continue
		}
		if !inTable || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break // the table ended
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("%s:%d: want | key | default | meaning |, got %q", path, n, line)
		}
		keys := code.FindAllStringSubmatch(strings.TrimPrefix(cells[0], "| "), -1)
		if len(keys) == 0 {
			t.Fatalf("%s:%d: no `key` in %q", path, n, cells[0])
		}
		for _, k := range keys {
			rows = append(rows, docRow{key: k[1], def: strings.TrimSpace(cells[1]), line: n})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no key table (a line starting \"| key | default |\")", path)
	}
	return rows
}

// schemaField is one yaml key of the schema: its type, and whether it is a leaf
// (a value, not a struct or a list of structs whose keys are listed themselves).
type schemaField struct {
	typ  reflect.Type
	leaf bool
}

// docSchema maps the dotted path of every yaml key of t ("backends[].url") to its field.
func docSchema(t reflect.Type, prefix string, out map[string]schemaField) {
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		p := join(prefix, name)
		switch ft := f.Type; {
		case ft.Kind() == reflect.Struct:
			out[p] = schemaField{typ: ft}
			docSchema(ft, p, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			out[p] = schemaField{typ: ft}
			docSchema(ft.Elem(), p+"[]", out)
		default:
			out[p] = schemaField{typ: ft, leaf: true}
		}
	}
}

// defaultAt is the default value at the dotted path key: from Default(), or for
// a key of a list element ("backends[].weight") from the element's own default.
func defaultAt(key string) (reflect.Value, error) {
	v := reflect.ValueOf(config.Default())
	for _, part := range strings.Split(key, ".") {
		name, elem := strings.CutSuffix(part, "[]")
		f, ok := fieldByYAML(v.Type(), name)
		if !ok {
			return reflect.Value{}, fmt.Errorf("no key %q in %s", name, v.Type())
		}
		v = v.FieldByIndex(f.Index)
		if elem {
			if v.Type() != reflect.TypeFor[[]config.Backend]() {
				return reflect.Value{}, fmt.Errorf("%s: no default for the elements of %s", key, v.Type())
			}
			v = reflect.ValueOf(config.DefaultBackend(0))
		}
	}
	return v, nil
}

func fieldByYAML(t reflect.Type, name string) (reflect.StructField, bool) {
	for f := range t.Fields() {
		if n, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); n == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// parseDocDefault reads a documented default into a value of type typ. The cell
// is YAML in backticks, as a config file would write the value, optionally
// followed by a note ("`[]` (all)"); "— (required)" means no default (the zero
// value), and "b<index>" is the name of the first backend, b0.
func parseDocDefault(cell string, typ reflect.Type) (reflect.Value, error) {
	v := reflect.New(typ)
	if strings.HasPrefix(cell, "—") {
		return v.Elem(), nil
	}
	m := regexp.MustCompile("^`([^`]*)`").FindStringSubmatch(cell)
	if m == nil {
		return reflect.Value{}, fmt.Errorf("default %q: want `value` or — (required)", cell)
	}
	text := strings.ReplaceAll(m[1], "<index>", "0")
	if typ.Kind() == reflect.String && !strings.HasPrefix(text, `"`) {
		text = fmt.Sprintf("%q", text) // ":8080" is a string, not YAML syntax
	}
	if err := yaml.Unmarshal([]byte(text), v.Interface()); err != nil {
		return reflect.Value{}, fmt.Errorf("default %q: %v", cell, err)
	}
	return v.Elem(), nil
}

func TestConfigDocDefaults(t *testing.T) {
	schema := map[string]schemaField{}
	docSchema(reflect.TypeFor[config.Config](), "", schema)
	for _, r := range readDocTable(t, configDoc) {
		f, ok := schema[r.key]
		if !ok {
			t.Errorf("%s:%d: %s is not a configuration key", configDoc, r.line, r.key)
			continue
		}
		want, err := defaultAt(r.key)
		if err != nil {
			t.Errorf("%s:%d: %v", configDoc, r.line, err)
			continue
		}
		got, err := parseDocDefault(r.def, f.typ)
		if err != nil {
			t.Errorf("%s:%d: %s: %v", configDoc, r.line, r.key, err)
			continue
		}
		if diff := cmp.Diff(want.Interface(), got.Interface(), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s:%d: %s: documented default %s is not Default()'s (-Default() +doc):\n%s",
				configDoc, r.line, r.key, r.def, diff)
		}
	}
}

func TestConfigDocHasEveryKey(t *testing.T) {
	var documented []string
	for _, r := range readDocTable(t, configDoc) {
		if slices.Contains(documented, r.key) {
			t.Errorf("%s: %s is documented twice", configDoc, r.key)
		}
		documented = append(documented, r.key)
	}
	// covered says whether key, or a key above it ("alerts.slo.windows" for
	// "alerts.slo.windows[].burn"), has a row.
	covered := func(key string) bool {
		for k := key; ; {
			if slices.Contains(documented, k) {
				return true
			}
			i := strings.LastIndex(k, ".")
			if i < 0 {
				return false
			}
			k = strings.TrimSuffix(k[:i], "[]")
		}
	}

	schema := map[string]schemaField{}
	docSchema(reflect.TypeFor[config.Config](), "", schema)
	for _, key := range slices.Sorted(maps.Keys(schema)) {
		if f := schema[key]; f.leaf && !covered(key) {
			t.Errorf("%s: no row for %s (a key of config.Config)", configDoc, key)
		}
	}

	// example.yaml's keys, which the schema must hold too (TestExampleYAMLHasEveryKey
	// checks the other way).
	for _, key := range exampleKeys(t) {
		f, ok := schema[key]
		switch {
		case !ok:
			t.Errorf("example.yaml: %s is not a key of config.Config", key)
		case f.leaf && !covered(key):
			t.Errorf("%s: no row for %s (a key of example.yaml)", configDoc, key)
		}
	}
}
