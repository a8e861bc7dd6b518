package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads the YAML file at path over [Default]: keys absent from the file keep
// their defaults, and each backend starts from kind "openai", weight 100 and name
// "b<index>". An empty file gives Default(). Load is strict: unknown keys, duplicate
// keys and values of the wrong type are errors, all reported, each a [*FieldError]
// naming the file, line and key path. Load does not validate; see [Config.Validate].
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("load config: %w", err)
	}
	return parse(path, data)
}

// parse decodes data, read from file, over Default().
func parse(file string, data []byte) (Config, error) {
	cfg := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return cfg, nil
	case err != nil:
		return Config{}, syntaxError(file, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return Config{}, syntaxError(file, err)
	default:
		return Config{}, &FieldError{File: file, Line: extra.Line, Err: errors.New("more than one YAML document")}
	}

	d := decoder{file: file}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			return cfg, nil
		}
		root = root.Content[0]
	}
	if !isNull(root) {
		if root.Kind != yaml.MappingNode {
			return Config{}, &FieldError{File: file, Line: root.Line, Err: fmt.Errorf("the document must be a mapping, got %s", describe(root))}
		}
		d.value(root, reflect.ValueOf(&cfg).Elem(), "")
	}
	if len(d.errs) > 0 {
		return Config{}, errors.Join(d.errs...)
	}
	return cfg, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// syntaxError reformats yaml's "yaml: line 3: did not find..." as a FieldError.
func syntaxError(file string, err error) error {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	line, _ := strconv.Atoi(m[1])
	return &FieldError{File: file, Line: line, Err: errors.New(m[2])}
}

// maxNodes bounds the nodes visited, counting each alias expansion, against
// documents that expand exponentially through aliases ("billion laughs").
const maxNodes = 1_000_000

// maxDepth bounds the nesting of values, against aliases that merge into themselves.
const maxDepth = 100

// A decoder sets Go values from YAML nodes, following the yaml struct tags, and
// records an error for each node that does not fit, naming its path.
type decoder struct {
	file  string
	errs  []error
	nodes int // values visited
	depth int // values being decoded
}

var durationType = reflect.TypeFor[time.Duration]()

func (d *decoder) fail(n *yaml.Node, path string, err error) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: n.Line, Path: path, Err: err})
}

// value sets v from n. A null node leaves v as it is, so that its default stays.
func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n, path, errors.New("document too large (aliases expand too far)"))
		}
		return
	}
	// The schema is shallow; only an alias that merges into itself goes deeper.
	if d.depth++; d.depth > maxDepth {
		d.fail(n, path, errors.New("nested too deeply (an alias refers to itself?)"))
		d.nodes = maxNodes + 1 // stop here
		return
	}
	defer func() { d.depth-- }()
	for depth := 0; n.Kind == yaml.AliasNode; depth++ {
		if depth > 100 || n.Alias == nil {
			d.fail(n, path, errors.New("unresolvable alias"))
			return
		}
		n = n.Alias
	}
	if isNull(n) {
		return
	}
	t := v.Type()
	switch {
	case t == durationType:
		if !d.scalar(n, path, "a duration") {
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.fail(n, path, fmt.Errorf("invalid duration %q (want e.g. \"300ms\", \"5m\")", n.Value))
			return
		}
		v.SetInt(int64(dur))
	case t.Kind() == reflect.Struct:
		d.mapping(n, v, path)
	case t.Kind() == reflect.Slice:
		d.sequence(n, v, path)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
		if n.Kind != yaml.MappingNode {
			d.fail(n, path, fmt.Errorf("expected a mapping, got %s", describe(n)))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(t))
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				d.fail(k, path, errors.New("keys must be strings"))
				continue
			}
			elem := reflect.New(t.Elem()).Elem()
			d.value(n.Content[i+1], elem, joinPath(path, k.Value))
			v.SetMapIndex(reflect.ValueOf(k.Value), elem)
		}
	case t.Kind() == reflect.String:
		if d.scalar(n, path, "a string") {
			v.SetString(n.Value)
		}
	case t.Kind() == reflect.Bool:
		var b bool
		if d.scalar(n, path, "a boolean") && d.decode(n, path, &b, "boolean") {
			v.SetBool(b)
		}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		var i int64
		if !d.scalar(n, path, "an integer") {
			return
		}
		// yaml would truncate 1.5 to 1; only an integer is an integer.
		if n.ShortTag() != "!!int" {
			d.fail(n, path, fmt.Errorf("invalid integer %q", n.Value))
			return
		}
		if !d.decode(n, path, &i, "integer") {
			return
		}
		if v.OverflowInt(i) {
			d.fail(n, path, fmt.Errorf("integer %s out of range", n.Value))
			return
		}
		v.SetInt(i)
	case t.Kind() == reflect.Float64:
		var f float64
		if d.scalar(n, path, "a number") && d.decode(n, path, &f, "number") {
			v.SetFloat(f)
		}
	default:
		// Only a schema change reaches here; the tests decode every field.
		d.fail(n, path, fmt.Errorf("internal error: cannot decode into %s", t))
	}
}

// scalar reports whether n is a scalar, recording an error if not.
func (d *decoder) scalar(n *yaml.Node, path, want string) bool {
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, fmt.Errorf("expected %s, got %s", want, describe(n)))
		return false
	}
	return true
}

// decode decodes the scalar n into p with yaml's own rules, recording an error if
// it does not fit.
func (d *decoder) decode(n *yaml.Node, path string, p any, what string) bool {
	if err := n.Decode(p); err != nil {
		d.fail(n, path, fmt.Errorf("invalid %s %q", what, n.Value))
		return false
	}
	return true
}

// mapping sets the fields of the struct v from the mapping n.
func (d *decoder) mapping(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, fmt.Errorf("expected a mapping, got %s", describe(n)))
		return
	}
	fields := fieldsOf(v.Type())
	// Merged keys ("<<: *base") come first so that the mapping's own keys override
	// them, whatever the order in the file.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			d.merge(n.Content[i+1], v, path)
		}
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, fmt.Errorf("a key must be a string, got %s", describe(k)))
			continue
		}
		kp := joinPath(path, k.Value)
		if line, dup := seen[k.Value]; dup {
			d.fail(k, kp, fmt.Errorf("duplicate key (first at line %d)", line))
			continue
		}
		seen[k.Value] = k.Line
		idx, ok := fields[k.Value]
		if !ok {
			d.fail(k, kp, unknownKey(k.Value, fields))
			continue
		}
		d.value(val, v.Field(idx), kp)
	}
}

// merge applies the value of a merge key: a mapping or a sequence of mappings.
func (d *decoder) merge(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.SequenceNode {
		// The first mapping listed wins, so it is applied last.
		for _, c := range slices.Backward(n.Content) {
			d.value(c, v, path)
		}
		return
	}
	d.value(n, v, path)
}

// sequence replaces the slice v with the sequence n.
func (d *decoder) sequence(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, fmt.Errorf("expected a sequence, got %s", describe(n)))
		return
	}
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		e := s.Index(i)
		if b, ok := e.Addr().Interface().(*Backend); ok {
			*b = defaultBackend(i)
			d.value(c, e, indexPath(path, i))
			if b.Name == "" {
				b.Name = defaultName(i)
			}
			if b.Kind == "" {
				b.Kind = "openai"
			}
			continue
		}
		d.value(c, e, indexPath(path, i))
	}
	v.Set(s)
}

// fieldsOf maps the yaml key of each field of the struct type t to its index.
func fieldsOf(t reflect.Type) map[string]int {
	m := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = strings.ToLower(f.Name)
		}
		m[name] = i
	}
	return m
}

// unknownKey is the error for key, suggesting the closest known key if one is close.
func unknownKey(key string, fields map[string]int) error {
	best, bestDist := "", 3 // suggest only within two edits
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s)) }
	for f := range fields {
		dist := editDistance(key, f)
		switch nk, nf := norm(key), norm(f); {
		case nk == nf:
			dist = 0 // maxBodyBytes, max-body-bytes
		case len(nk) >= 3 && strings.HasPrefix(nf, nk):
			dist = 1 // max_body
		}
		if dist < bestDist || dist == bestDist && f < best {
			best, bestDist = f, dist
		}
	}
	if best == "" {
		return ErrUnknownKey
	}
	return fmt.Errorf("%w (did you mean %q?)", ErrUnknownKey, best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names what n is, for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a sequence"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	}
	return "an alias"
}
