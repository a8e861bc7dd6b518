package manifests

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"sigs.k8s.io/yaml"
)

// composeServices are the services the READMEs promise in the compose
// stack: "Vigil, two simulated backends, Redis, Jaeger, Prometheus,
// Alertmanager, Grafana" (deploy/README.md's file table; the README's
// "Running it for real" says the same), the simulators as sim-a and sim-b
// (deploy/README.md, "Compose").
var composeServices = []string{"vigil", "sim-a", "sim-b", "redis", "jaeger", "prometheus", "alertmanager", "grafana"}

// composePorts are the host ports of deploy/README.md's port table, with the
// service and container port behind each. The table itself is read too:
// a port published but not in it, or in it but not published, fails.
var composePorts = []struct {
	published string
	service   string
	target    uint32
}{
	{"8080", "vigil", 8080},
	{"8001", "sim-a", 8000},
	{"8002", "sim-b", 8000},
	{"16686", "jaeger", 16686},
	{"4317", "jaeger", 4317},
	{"9090", "prometheus", 9090},
	{"9093", "alertmanager", 9093},
	{"3000", "grafana", 3000},
}

// checkCompose loads docker-compose.yaml with compose-spec's loader (the one
// `docker compose` uses: schema validation, so unknown keys are errors, then
// interpolation, merge keys, normalization and consistency checks) and
// checks the services, ports and files it refers to.
func checkCompose(deploy string) (f findings) {
	file := filepath.Join(deploy, "docker-compose.yaml")
	// No OS environment and no .env: the stack must not depend on either.
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory(deploy))
	if err != nil {
		f.errorf("docker-compose.yaml: %v", err)
		return f
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		f.errorf("docker-compose.yaml: %v", err)
		return f
	}
	f.logf("docker-compose.yaml: project %s, services %v", p.Name, p.ServiceNames())

	for _, name := range composeServices {
		if _, ok := p.Services[name]; !ok {
			f.errorf("docker-compose.yaml: no service %q (the READMEs name it)", name)
		}
	}
	published := map[string]string{}
	for _, s := range p.Services {
		for _, port := range s.Ports {
			published[port.Published] = s.Name
		}
	}
	for _, want := range composePorts {
		s, ok := p.Services[want.service]
		if ok && !slices.ContainsFunc(s.Ports, func(port types.ServicePortConfig) bool {
			return port.Published == want.published && port.Target == want.target
		}) {
			f.errorf("docker-compose.yaml: service %s does not publish %s:%d (deploy/README.md's port table)", want.service, want.published, want.target)
		}
	}
	documented, err := readmePorts(filepath.Join(deploy, "README.md"))
	if err != nil {
		f.errorf("README.md: %v", err)
	}
	for port, service := range published {
		if err == nil && !slices.Contains(documented, port) {
			f.errorf("docker-compose.yaml: service %s publishes port %s, which deploy/README.md's port table does not name", service, port)
		}
	}
	for _, port := range documented {
		if _, ok := published[port]; !ok {
			f.errorf("README.md: the port table names %s, which no service of docker-compose.yaml publishes", port)
		}
	}

	for _, s := range p.Services {
		checkComposeFiles(&f, s)
		// A service started with --listen (vigil sim) listens there only.
		if l := flagValue(s.Command, "--listen"); l != "" {
			if _, port, err := net.SplitHostPort(l); err != nil {
				f.errorf("docker-compose.yaml: service %s: --listen %q: %v", s.Name, l, err)
			} else {
				for _, pc := range s.Ports {
					if strconv.Itoa(int(pc.Target)) != port {
						f.errorf("docker-compose.yaml: service %s maps to container port %d but listens on %s (--listen %s)", s.Name, pc.Target, port, l)
					}
				}
			}
		}
	}
	if s, ok := p.Services["vigil"]; ok {
		checkComposeVigil(&f, p, s)
	}
	if s, ok := p.Services["prometheus"]; ok {
		checkComposePrometheus(&f, p, s)
	}
	return f
}

// checkComposeFiles checks that the files a service needs from the checkout
// exist: a missing bind-mount source would be created by Docker as an empty
// directory, and the service would start with a directory for its config.
func checkComposeFiles(f *findings, s types.ServiceConfig) {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if _, err := os.Stat(v.Source); err != nil {
			f.errorf("docker-compose.yaml: service %s mounts %s, which does not exist", s.Name, v.Source)
		}
	}
	if s.Build != nil {
		df := filepath.Join(s.Build.Context, s.Build.Dockerfile)
		if _, err := os.Stat(df); err != nil {
			f.errorf("docker-compose.yaml: service %s builds from %s, which does not exist", s.Name, df)
		}
	}
}

// checkComposeVigil checks Vigil's config in the stack: the file its
// --config names is mounted, it listens on the port the service maps, and
// its backends, Redis and OTLP endpoint are services of the stack.
func checkComposeVigil(f *findings, p *types.Project, s types.ServiceConfig) {
	where := "docker-compose.yaml: service vigil"
	path := flagValue(s.Command, "--config")
	if path == "" {
		f.errorf("%s: command %q names no --config file", where, s.Command)
		return
	}
	src, ok := mountSource(s, path)
	if !ok {
		f.errorf("%s: --config %s is not a file mounted into the container", where, path)
		return
	}
	data, err := os.ReadFile(src)
	if err != nil {
		f.errorf("%s: --config %s: %v", where, path, err)
		return
	}
	var cfg vigilConfig
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		f.errorf("%s: %s is not YAML: %v", where, src, err)
		return
	}
	listen := cfg.Listen
	if listen == "" {
		listen = vigilDefaultListen
	}
	if port, err := listenPort(listen); err != nil {
		f.errorf("%s: %s: %v", where, filepath.Base(src), err)
	} else if !slices.Contains(servicePorts(s), strconv.Itoa(int(port))) {
		f.errorf("%s: Vigil listens on %d (%s), which the service does not map (its container ports: %v)", where, port, filepath.Base(src), servicePorts(s))
	}
	for _, b := range cfg.Backends {
		checkReachable(f, p, fmt.Sprintf("%s: backend %s url", where, b.Name), b.URL)
		if b.Metrics != "" {
			checkReachable(f, p, fmt.Sprintf("%s: backend %s metrics", where, b.Name), b.Metrics)
		}
	}
	if u := cfg.State.Redis.URL; u != "" {
		checkReachable(f, p, where+": state.redis.url", u)
	}
	if e := s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; e != nil {
		checkReachable(f, p, where+": OTEL_EXPORTER_OTLP_ENDPOINT", *e)
	}
}

// checkComposePrometheus loads the config the prometheus service runs with
// (its --config.file, through the mount) with Prometheus's own loader, and
// checks that its rule files are mounted and that its scrape and
// Alertmanager targets are services of the stack, on ports they serve.
func checkComposePrometheus(f *findings, p *types.Project, s types.ServiceConfig) {
	where := "docker-compose.yaml: service prometheus"
	path := flagValue(s.Command, "--config.file")
	src, ok := mountSource(s, path)
	if !ok {
		f.errorf("%s: --config.file %q is not a file mounted into the container", where, path)
		return
	}
	cfg, err := promconfig.LoadFile(src, false, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		f.errorf("%s: %v", where, err)
		return
	}
	for _, rf := range cfg.RuleFiles {
		if _, ok := mountSource(s, rf); !ok {
			f.errorf("%s: rule file %s is not mounted into the container", where, rf)
		}
	}
	for _, sc := range cfg.ScrapeConfigs {
		checkTargets(f, p, fmt.Sprintf("%s: scrape job %s", where, sc.JobName), sc.ServiceDiscoveryConfigs)
	}
	for i, am := range cfg.AlertingConfig.AlertmanagerConfigs {
		checkTargets(f, p, fmt.Sprintf("%s: alertmanagers[%d]", where, i), am.ServiceDiscoveryConfigs)
	}
}

func checkTargets(f *findings, p *types.Project, where string, sds discovery.Configs) {
	for _, sd := range sds {
		static, ok := sd.(discovery.StaticConfig)
		if !ok {
			f.errorf("%s: %s discovery cannot be checked offline; use static_configs or teach this test", where, sd.Name())
			continue
		}
		for _, g := range static {
			for _, t := range g.Targets {
				checkReachable(f, p, where, string(t[model.AddressLabel]))
			}
		}
	}
}

// checkReachable checks that an address used inside the compose network
// (a URL or host:port) names a service and, where that service declares its
// container ports (ports or expose), one of them.
func checkReachable(f *findings, p *types.Project, where, addr string) {
	hostport := addr
	if strings.Contains(addr, "://") {
		u, err := url.Parse(addr)
		if err != nil {
			f.errorf("%s: %v", where, err)
			return
		}
		hostport = u.Host
		if u.Port() == "" {
			hostport = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443", "redis": "6379"}[u.Scheme])
		}
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		f.errorf("%s: %q: %v", where, addr, err)
		return
	}
	s, ok := p.Services[host]
	if !ok {
		f.errorf("%s: %s: %s is not a service of docker-compose.yaml", where, addr, host)
		return
	}
	declared := servicePorts(s)
	if len(declared) > 0 && !slices.Contains(declared, port) {
		f.errorf("%s: %s: service %s serves on %v, not %s", where, addr, host, declared, port)
	}
}

// servicePorts lists the container ports a service declares, in ports
// (their targets) and expose.
func servicePorts(s types.ServiceConfig) []string {
	var out []string
	for _, pc := range s.Ports {
		out = append(out, strconv.Itoa(int(pc.Target)))
	}
	for _, e := range s.Expose {
		out = append(out, strings.Split(e, "/")[0])
	}
	return out
}

// mountSource returns the file of the checkout bind-mounted at target.
func mountSource(s types.ServiceConfig, target string) (string, bool) {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			return v.Source, true
		}
	}
	return "", false
}

// portNumber matches a port number in a row of the README's port table.
var portNumber = regexp.MustCompile(`\b[0-9]{4,5}\b`)

// readmePorts returns the port numbers of the "| port | service |" table
// in deploy/README.md, both columns (the Jaeger row names 4317 in the
// second).
func readmePorts(path string) ([]string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	var ports []string
	in := false
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| port | service |"):
			in = true
		case in && strings.HasPrefix(line, "|"):
			ports = append(ports, portNumber.FindAllString(line, -1)...)
		case in:
			return ports, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !in {
		return nil, fmt.Errorf("%s has no \"| port | service |\" table", path)
	}
	return ports, nil
}
