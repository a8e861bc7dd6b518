package manifests

import (
	"fmt"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// alertSeverities are the severity labels deploy/README.md ("Prometheus
// rules") promises to Alertmanager routes.
var alertSeverities = []string{"critical", "warning", "info"}

// checkPrometheus parses rules.yaml with Prometheus's rule parser (strict:
// unknown fields, PromQL and templates are checked) and prometheus.yml with
// its config loader (strict as well), then checks that the rules read only
// metrics Vigil exports and carry the labels and annotations the README
// promises.
func checkPrometheus(deploy string) (f findings) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := promconfig.LoadFile(filepath.Join(deploy, "prometheus", "prometheus.yml"), false, logger); err != nil {
		f.errorf("prometheus/prometheus.yml: %v", err)
	}

	// UTF-8 names, as Prometheus 3 (the compose stack's v3.7.3) validates.
	groups, errs := rulefmt.ParseFile(filepath.Join(deploy, "prometheus", "rules.yaml"), false, model.UTF8Validation)
	for _, err := range errs {
		f.errorf("prometheus/rules.yaml: %v", err)
	}
	if groups == nil {
		return f
	}
	exported, err := vigilMetrics()
	if err != nil {
		f.errorf("reading the metrics Vigil exports: %v", err)
		return f
	}

	recorded := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	used := map[string]bool{}
	alerts := map[string]bool{}
	rules := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			rules++
			where := fmt.Sprintf("prometheus/rules.yaml: group %s, %s%s", g.Name, r.Record, r.Alert)
			expr, err := parser.ParseExpr(r.Expr)
			if err != nil {
				continue // ParseFile reported it
			}
			parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
				vs, ok := node.(*parser.VectorSelector)
				if !ok {
					return nil
				}
				name := selectorName(vs)
				switch {
				case name == "":
					f.errorf("%s: selector %s names no metric, so what it reads cannot be checked", where, vs)
				case recorded[name]:
				case !exported[name]:
					f.errorf("%s: %s is not a metric Vigil exports (nor a recording rule of this file)", where, name)
				default:
					used[name] = true
				}
				return nil
			})
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if r.Alert == "VigilErrorBudgetBurn" && r.Labels["window"] == "" {
				f.errorf("%s: no window label (the window pair, as Vigil's own alert has it)", where)
			}
			if !slices.Contains(alertSeverities, r.Labels["severity"]) {
				f.errorf("%s: label severity %q, want one of %v", where, r.Labels["severity"], alertSeverities)
			}
			if r.Labels["signal"] == "" {
				f.errorf("%s: no signal label", where)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					f.errorf("%s: no %s annotation", where, a)
				}
			}
		}
	}
	for _, a := range mirroredAlerts {
		if !alerts[a] {
			f.errorf("prometheus/rules.yaml: no alert %s (one of Vigil's own alerts, which the rules mirror)", a)
		}
	}
	f.logf("prometheus/rules.yaml: %d rules in %d groups; Vigil metrics read: %v", rules, len(groups.Groups), slices.Sorted(maps.Keys(used)))
	return f
}

// mirroredAlerts are Vigil's own alerts (analyzers/alert) that
// rules.yaml defines too, under the same name, for a deployment that
// alerts from Prometheus: a backend out of service, one far slower than
// the others, and the error budget's burn rate.
var mirroredAlerts = []string{"VigilBackendDown", "VigilBackendSlow", "VigilErrorBudgetBurn"}

// selectorName is the metric a selector reads: its name, or an equality
// matcher on __name__.
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// vigilMetricName matches the names of Vigil's own metrics.
var vigilMetricName = regexp.MustCompile(`^(vigil|gen_ai)_[a-z0-9_]+$`)

// vigilMetrics returns the metric names Vigil's Go source defines, read
// from the source rather than listed here so that the check follows the
// code: every string literal of a non-test .go file of the main module
// (test/ left out) that looks like one of Vigil's metric names, plus the
// _bucket, _sum and _count series of the histograms (the Name of a
// prometheus.HistogramOpts literal) and _sum and _count of summaries. The
// label names with these prefixes (gen_ai_request_model, …) land in the set
// too; a rule reading one as a metric would pass, the price of not keeping
// a list by hand.
var vigilMetrics = sync.OnceValues(func() (map[string]bool, error) {
	names := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != repoRoot && (path == filepath.Join(repoRoot, "test") || d.Name() == "testdata" ||
				strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := goparser.ParseFile(fset, path, nil, goparser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.BasicLit:
				if s := stringLit(n); vigilMetricName.MatchString(s) {
					names[s] = true
				}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "HistogramOpts" && sel.Sel.Name != "SummaryOpts") {
					return true
				}
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					if k, _ := kv.Key.(*ast.Ident); k == nil || k.Name != "Name" {
						continue
					}
					lit, _ := kv.Value.(*ast.BasicLit)
					name := stringLit(lit)
					if name == "" {
						continue
					}
					names[name+"_sum"], names[name+"_count"] = true, true
					if sel.Sel.Name == "HistogramOpts" {
						names[name+"_bucket"] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A scan that finds nothing (a moved tree, a changed style) would make
	// every rule fail; say so instead.
	if !names["vigil_requests_total"] {
		return nil, fmt.Errorf("no vigil_requests_total among the string literals under %s: is it Vigil's checkout?", repoRoot)
	}
	return names, nil
})

// stringLit returns the value of a string literal, or "" for anything else.
func stringLit(lit *ast.BasicLit) string {
	if lit == nil || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		return ""
	}
	return s
}
