package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// breakages are one edit each of a file of deploy/ that a check above must
// catch: each check is shown to fail when what it guards breaks. The edit
// replaces old, which must occur exactly once in the file (so that this
// table fails loudly, instead of testing nothing, when the files change);
// want is part of the problem the checks must report.
var breakages = []struct {
	name, file, old, new, want string
}{
	// Kubernetes: strict decoding.
	{"unknown field", "kubernetes/deployment.yaml", "automountServiceAccountToken: false", "automountServiceAccountTokens: false",
		`unknown field "spec.template.spec.automountServiceAccountTokens"`},
	{"field names are case-sensitive", "kubernetes/deployment.yaml", "  replicas: 2", "  Replicas: 2", `unknown field "spec.Replicas"`},
	{"duplicate field", "kubernetes/deployment.yaml", "  replicas: 2\n", "  replicas: 2\n  replicas: 3\n", `"replicas" already set`},
	{"wrong type", "kubernetes/deployment.yaml", "  replicas: 2", "  replicas: two", "spec.replicas"},
	{"kind not registered", "kubernetes/pdb.yaml", "kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", `no kind "PodDisruptionBudgets"`},
	{"removed API version", "kubernetes/pdb.yaml", "apiVersion: policy/v1", "apiVersion: policy/v1beta1", `no kind "PodDisruptionBudget" is registered for version "policy/v1beta1"`},
	{"invalid name", "kubernetes/service.yaml", "\n  name: vigil\n", "\n  name: Vigil\n", `metadata.name "Vigil"`},
	{"invalid label", "kubernetes/pdb.yaml", "  labels:\n    app.kubernetes.io/name: vigil", "  labels:\n    app.kubernetes.io/name: vigil!", "metadata.labels"},
	{"namespace in a manifest", "kubernetes/configmap.yaml", "  name: vigil-config\n", "  name: vigil-config\n  namespace: default\n", `metadata.namespace "default"`},
	// Kubernetes: the kustomization.
	{"kustomization unknown field", "kubernetes/kustomization.yaml", "resources:", "resource:", `unknown field "resource"`},
	{"kustomization missing resource", "kubernetes/kustomization.yaml", "  - pdb.yaml", "  - pdbs.yaml", "resource pdbs.yaml does not exist"},
	{"manifest not listed", "kubernetes/kustomization.yaml", "  - pdb.yaml\n", "", "kubernetes/pdb.yaml: not listed"},
	// Kubernetes: references.
	{"deployment selector", "kubernetes/deployment.yaml", "  selector:\n    matchLabels:\n      app.kubernetes.io/name: vigil\n",
		"  selector:\n    matchLabels:\n      app.kubernetes.io/name: vigil-x\n", "does not match the pod template's labels"},
	{"configmap name", "kubernetes/deployment.yaml", "name: vigil-config", "name: vigil-conf", "mounts ConfigMap vigil-conf, which no manifest defines"},
	{"configmap key", "kubernetes/configmap.yaml", "  vigil.yaml: |", "  config.yaml: |", `has no key "vigil.yaml"`},
	{"config not mounted", "kubernetes/deployment.yaml", "mountPath: /etc/vigil", "mountPath: /etc/vigil-config", "no volumeMount provides it"},
	{"no --config", "kubernetes/deployment.yaml", `args: ["serve", "--config", "/etc/vigil/vigil.yaml"]`, `args: ["serve"]`, "name no --config file"},
	{"config not YAML", "kubernetes/configmap.yaml", `    listen: ":8080"`, `    listen: [":8080"`, "is not YAML"},
	{"listen port", "kubernetes/configmap.yaml", `    listen: ":8080"`, `    listen: ":9000"`, "listens on 9000"},
	{"listen on loopback", "kubernetes/configmap.yaml", `    listen: ":8080"`, `    listen: "127.0.0.1:8080"`, "only reachable inside the container"},
	{"container port", "kubernetes/deployment.yaml", "containerPort: 8080", "containerPort: 8081", "which is not one of its ports"},
	{"readiness path", "kubernetes/deployment.yaml", "path: /readyz", "path: /ready", `readinessProbe: path "/ready"`},
	{"liveness path", "kubernetes/deployment.yaml", "path: /healthz", "path: /health", `livenessProbe: path "/health"`},
	{"probe port", "kubernetes/deployment.yaml", "{path: /readyz, port: http}", "{path: /readyz, port: 9090}", "readinessProbe: port 9090 is not a port"},
	{"probe not HTTP", "kubernetes/deployment.yaml", "httpGet: {path: /healthz, port: http}", "tcpSocket: {port: http}", "livenessProbe: want an httpGet"},
	{"grace below shutdown", "kubernetes/deployment.yaml", "terminationGracePeriodSeconds: 75", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds 30 does not cover"},
	{"shutdown above grace", "kubernetes/configmap.yaml", "    log:\n", "    limits:\n      shutdown_grace: 120s\n    log:\n", "terminationGracePeriodSeconds 75 does not cover"},
	{"scrape annotation", "kubernetes/deployment.yaml", `prometheus.io/port: "8080"`, `prometheus.io/port: "9090"`, `prometheus.io/port "9090"`},
	{"service selector", "kubernetes/service.yaml", "  selector:\n    app.kubernetes.io/name: vigil", "  selector:\n    app.kubernetes.io/name: vigil-x",
		"Service vigil: selector app.kubernetes.io/name=vigil-x selects no Deployment's pods"},
	{"service named target", "kubernetes/service.yaml", "targetPort: http", "targetPort: web", "targets web, which no container"},
	{"service numbered target", "kubernetes/service.yaml", "targetPort: http", "targetPort: 8081", "targets 8081, which no container"},
	{"pdb selector", "kubernetes/pdb.yaml", "    matchLabels:\n      app.kubernetes.io/name: vigil", "    matchLabels:\n      app.kubernetes.io/name: vigil-x",
		"PodDisruptionBudget vigil: selector app.kubernetes.io/name=vigil-x selects no Deployment's pods"},
	{"pdb blocks drains", "kubernetes/pdb.yaml", "minAvailable: 1", "minAvailable: 2", "allows no voluntary disruption"},

	// Compose.
	{"compose unknown key", "docker-compose.yaml", "    depends_on: [sim-a, sim-b, redis, jaeger]", "    depends: [sim-a, sim-b, redis, jaeger]", "additional properties 'depends' not allowed"},
	{"compose service missing", "docker-compose.yaml", "  grafana:\n", "  dashboards:\n", `no service "grafana"`},
	{"compose port moved", "docker-compose.yaml", `"9093:9093"`, `"9094:9093"`, "does not publish 9093:9093"},
	{"compose port undocumented", "docker-compose.yaml", "    image: redis:7.4-alpine\n", "    image: redis:7.4-alpine\n    ports: [\"6379:6379\"]\n", "publishes port 6379, which deploy/README.md's port table does not name"},
	{"readme port unpublished", "README.md", "| 9093 | Alertmanager |", "| 9094 | Alertmanager |", "the port table names 9094"},
	{"compose mount missing", "docker-compose.yaml", "./prometheus/rules.yaml:", "./prometheus/rule.yaml:", "rule.yaml, which does not exist"},
	{"compose dockerfile", "docker-compose.yaml", "dockerfile: Dockerfile", "dockerfile: Containerfile", "Containerfile, which does not exist"},
	{"compose vigil config not mounted", "docker-compose.yaml", "./vigil.yaml:/etc/vigil/vigil.yaml:ro", "./vigil.yaml:/etc/vigil.yaml:ro", "--config /etc/vigil/vigil.yaml is not a file mounted"},
	{"compose otlp endpoint", "docker-compose.yaml", "http://jaeger:4317", "http://collector:4317", "collector is not a service"},
	{"compose sim listen", "docker-compose.yaml", `"--listen", "0.0.0.0:8000", "--model", "demo-model", "--seed", "1"`, `"--listen", "0.0.0.0:9000", "--model", "demo-model", "--seed", "1"`, "listens on 9000"},
	{"compose vigil listen", "vigil.yaml", `listen: ":8080"`, `listen: ":8081"`, "Vigil listens on 8081"},
	{"compose backend host", "vigil.yaml", "url: http://sim-b:8000", "url: http://sim-c:8000", "sim-c is not a service"},
	{"compose backend port", "vigil.yaml", "url: http://sim-a:8000", "url: http://sim-a:8001", "service sim-a serves on [8000], not 8001"},
	{"compose redis host", "vigil.yaml", "url: redis://redis:6379/0", "url: redis://cache:6379/0", "cache is not a service"},

	// Prometheus config.
	{"prometheus.yml unknown field", "prometheus/prometheus.yml", "scrape_interval: 15s", "scrape_intervall: 15s", "field scrape_intervall not found"},
	{"prometheus.yml not mounted", "docker-compose.yaml", "--config.file=/etc/prometheus/prometheus.yml", "--config.file=/etc/prometheus/prom.yml", `--config.file "/etc/prometheus/prom.yml" is not a file mounted`},
	{"rule file not mounted", "prometheus/prometheus.yml", "  - /etc/prometheus/rules.yaml", "  - /etc/prometheus/rules.yml", "rule file /etc/prometheus/rules.yml is not mounted"},
	{"scrape host", "prometheus/prometheus.yml", "targets: [vigil:8080]", "targets: [gateway:8080]", "gateway is not a service"},
	{"scrape port", "prometheus/prometheus.yml", "targets: [vigil:8080]", "targets: [vigil:9090]", "service vigil serves on [8080], not 9090"},
	{"alertmanager target", "prometheus/prometheus.yml", "targets: [alertmanager:9093]", "targets: [alertmanager:9094]", "service alertmanager serves on [9093], not 9094"},

	// Prometheus rules.
	{"rules unknown field", "prometheus/rules.yaml", "    interval: 5m", "    intervals: 5m", "field intervals not found"},
	{"rules bad PromQL", "prometheus/rules.yaml", "expr: max by (job) (vigil_drift_alarm) == 1", "expr: max by (job) (vigil_drift_alarm) ==", "parse error"},
	{"rules bad template", "prometheus/rules.yaml", "summary: Backend {{ $labels.backend }} is out of service", "summary: Backend {{ $labels.backend } is out of service", `annotation "summary"`},
	{"rules unknown metric", "prometheus/rules.yaml", "vigil_state_store_up == 0", "vigil_state_store_healthy == 0", "vigil_state_store_healthy is not a metric Vigil exports"},
	{"rules bucket of a gauge", "prometheus/rules.yaml", "max by (job) (vigil_drift_score)\n", "max by (job) (vigil_drift_score_bucket)\n", "vigil_drift_score_bucket is not a metric Vigil exports"},
	{"rules unknown recording rule", "prometheus/rules.yaml", "expr: job:vigil_request_error_ratio:rate5m > 0.05", "expr: job:vigil_request_error_rate:rate5m > 0.05", "job:vigil_request_error_rate:rate5m is not a metric"},
	{"rules nameless selector", "prometheus/rules.yaml", "expr: vigil_state_store_up == 0", `expr: '{__name__=~"vigil_state_.*"} == 0'`, "names no metric"},
	{"rules severity", "prometheus/rules.yaml", "labels: {severity: info, signal: drift}", "labels: {severity: page, signal: drift}", `label severity "page"`},
	{"rules signal label", "prometheus/rules.yaml", "labels: {severity: warning, signal: state}", "labels: {severity: warning}", "no signal label"},
	{"rules summary", "prometheus/rules.yaml", "          summary: Analyzer queue overflowing\n", "", "no summary annotation"},
	{"rules backend down missing", "prometheus/rules.yaml", "- alert: VigilBackendDown", "- alert: VigilBackendOut", "no alert VigilBackendDown"},
	{"rules backend slow missing", "prometheus/rules.yaml", "- alert: VigilBackendSlow", "- alert: VigilSlowBackend", "no alert VigilBackendSlow"},
	{"rules burn rate missing", "prometheus/rules.yaml", "labels: {severity: critical, signal: errors, window: 1h/5m}", "labels: {severity: critical, signal: errors}", "VigilErrorBudgetBurn: no window label"},
}

// TestChecksCatchBreakage runs every check on a copy of deploy/ with one
// file broken, for each entry of breakages, after showing that the
// unbroken copy passes.
func TestChecksCatchBreakage(t *testing.T) {
	t.Run("unbroken copy", func(t *testing.T) {
		for _, p := range checkAll(copyDeploy(t)) {
			t.Error(p)
		}
	})
	for _, b := range breakages {
		t.Run(b.name, func(t *testing.T) {
			dir := copyDeploy(t)
			path := filepath.Join(dir, b.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(data), b.old); n != 1 {
				t.Fatalf("%q occurs %d times in %s, want once: update this entry", b.old, n, b.file)
			}
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), b.old, b.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			problems := checksOf(b.file)(dir)
			for _, p := range problems {
				if strings.Contains(p, b.want) {
					t.Logf("caught: %s", p)
					return
				}
			}
			t.Errorf("%s: %q → %q: no problem contains %q; the checks found %q", b.file, b.old, b.new, b.want, problems)
		})
	}
}

// checkAll runs every check on a deploy/ directory.
func checkAll(deploy string) []string {
	return run(deploy, checkKubernetes, checkCompose, checkPrometheus)
}

// checksOf returns the checks that read a file of deploy/ (running only
// those keeps the table quick under the race detector).
func checksOf(file string) func(deploy string) []string {
	return func(deploy string) []string {
		switch {
		case strings.HasPrefix(file, "kubernetes/"):
			return run(deploy, checkKubernetes)
		case file == "prometheus/rules.yaml":
			return run(deploy, checkPrometheus)
		case file == "prometheus/prometheus.yml":
			return run(deploy, checkCompose, checkPrometheus)
		default: // docker-compose.yaml, vigil.yaml, README.md
			return run(deploy, checkCompose)
		}
	}
}

func run(deploy string, checks ...func(string) findings) []string {
	var all []string
	for _, check := range checks {
		all = append(all, check(deploy).problems...)
	}
	return all
}

// copyDeploy copies the deploy/ under test into a temporary directory,
// with an empty Dockerfile beside it for the compose build to find, and
// returns the copy's deploy/.
func copyDeploy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "deploy")
	if err := os.CopyFS(dst, os.DirFS(*deployDir)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "..", "Dockerfile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}
