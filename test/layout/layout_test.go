// Package layout checks the import graph of Vigil's packages: each package
// holds one idea, and imports point downward, from the wiring to the data
// plane and the analyzers to what they share, never back up.
package layout

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/vigil-gw/vigil"

// allowed says whether package p (a path inside the module) may import q.
// It returns the reason when it may not.
func allowed(p, q string) (bool, string) {
	under := func(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }
	wiring := under(p, "cmd") || under(p, "internal/app") || under(p, "internal/demo") || under(p, "internal/matrix")
	switch {
	case under(q, "cmd"):
		return false, "nothing imports a command"
	case (q == "gateway" || q == "analyzers") && !wiring:
		return false, q + " is imported by the wiring only (cmd/, internal/app, internal/demo, internal/matrix): its subpackages and peers never reach back up"
	case (under(q, "internal/app") || under(q, "internal/demo") || under(q, "internal/matrix")) && !wiring:
		return false, "the wiring is imported by the commands only"
	case under(p, "internal/demo") && under(q, "internal/matrix"):
		return false, "the matrix is told with the demo's parts: internal/matrix imports internal/demo, never the other way"
	case under(p, "gateway") && under(q, "analyzers"):
		return false, "the data plane talks to the analyzers through exchange only"
	case under(p, "analyzers") && under(q, "gateway"):
		return false, "the analyzers know nothing of the data plane"
	case (p == "exchange" || p == "config") && !under(q, "internal/jsonscan"):
		return false, p + " sits at the bottom: it imports no other Vigil package"
	}
	return true, ""
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// TestImportsPointDown lists the module's packages with `go list` and
// checks every import of their non-test code against allowed.
func TestImportsPointDown(t *testing.T) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
		from := strings.TrimPrefix(p.ImportPath, module+"/")
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			to := strings.TrimPrefix(imp, module+"/")
			if ok, why := allowed(from, to); !ok {
				t.Errorf("%s imports %s: %s", from, to, why)
			}
		}
	}
	if n < 20 {
		t.Fatalf("go list named %d packages; expected the whole module", n)
	}
}

// TestAllowed keeps the rules themselves honest: each forbids what it says.
func TestAllowed(t *testing.T) {
	for _, tt := range []struct {
		p, q string
		ok   bool
	}{
		{"gateway/request", "gateway", false},
		{"analyzers/usage", "analyzers", false},
		{"gateway", "analyzers", false},
		{"gateway", "analyzers/stats", false},
		{"gateway/admin", "analyzers/alert", false},
		{"analyzers/share", "gateway/upstream", false},
		{"sim", "cmd/vigil", false},
		{"gateway", "internal/demo", false},
		{"gateway", "internal/matrix", false},
		{"sim", "internal/matrix", false},
		{"internal/demo", "internal/matrix", false},
		{"exchange", "config", false},
		{"cmd/vigil", "gateway", true},
		{"internal/demo", "analyzers", true},
		{"internal/matrix", "internal/demo", true},
		{"internal/matrix", "internal/app", true},
		{"cmd/vigil", "internal/matrix", true},
		{"gateway", "gateway/request", true},
		{"gateway/request", "internal/jsonscan", true},
	} {
		if ok, _ := allowed(tt.p, tt.q); ok != tt.ok {
			t.Errorf("allowed(%q, %q) = %v, want %v", tt.p, tt.q, ok, tt.ok)
		}
	}
}
