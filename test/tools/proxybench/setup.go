package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Target names, in the order of every table.
const (
	direct        = "direct"
	nginx         = "nginx"
	goProxy       = "go-proxy"
	fastProxyName = "fast-proxy"
	vigilMin      = "vigil-min"
	vigilFull     = "vigil-full"
)

var targetNames = []string{direct, nginx, goProxy, fastProxyName, vigilMin, vigilFull}

// adminToken guards both Vigils' /admin and /debug/pprof routes.
const adminToken = "proxybench-token"

// target is one thing measured: a base URL and the processes whose CPU
// time and memory it is charged.
type target struct {
	name string
	base string // http://host:port
	// pids returns the processes charged: the mock for direct, nginx's
	// workers, the vigil process.
	pids func() []int
	// aux are helper processes whose CPU is reported next to the
	// target's (Jaeger and Redis for vigil-full), by name.
	aux map[string]int
}

// cpu returns the CPU time used so far by the target's processes and by
// each helper.
func (t *target) cpu() (time.Duration, map[string]time.Duration, error) {
	var own time.Duration
	if t.pids != nil {
		var err error
		if own, err = sumCPU(t.pids()); err != nil {
			return 0, nil, fmt.Errorf("%s: %w", t.name, err)
		}
	}
	var aux map[string]time.Duration
	for name, pid := range t.aux {
		d, err := cpuTime(pid)
		if err != nil {
			return 0, nil, fmt.Errorf("%s's %s: %w", t.name, name, err)
		}
		if aux == nil {
			aux = map[string]time.Duration{}
		}
		aux[name] = d
	}
	return own, aux, nil
}

// rss returns the summed resident memory of the target's processes.
func (t *target) rss() (int64, error) {
	if t.pids == nil {
		return 0, nil
	}
	return sumRSS(t.pids())
}

// lab is everything started for a run.
type lab struct {
	ps        *procs
	targets   []*target
	byName    map[string]*target
	jaegerAPI string // base URL of Jaeger's query API
	accessLog string // vigil-full's access log
	notes     []string
	pprof     bool // the Vigils were configured with admin.pprof
	unsettled int  // measurements started before the lab was idle (settle)
}

// nginxConf is nginx as a reference reverse proxy: one worker per core,
// upstream keep-alive, HTTP/1.1 to the backend, no buffering (so that SSE
// passes event by event), no access log.
const nginxConf = `worker_processes auto;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    client_body_temp_path %[1]s/nginx-client-body;
    proxy_temp_path %[1]s/nginx-proxy;
    fastcgi_temp_path %[1]s/nginx-fastcgi;
    uwsgi_temp_path %[1]s/nginx-uwsgi;
    scgi_temp_path %[1]s/nginx-scgi;
    upstream backend {
        server %[2]s;
        keepalive 64;
    }
    server {
        listen %[3]s;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`

// jaegerConf is a minimal Jaeger v2 all-in-one (as test/jaegertest runs
// it): the OTLP/gRPC receiver, in-memory storage and the query API, each on
// a port chosen here, its own telemetry off.
const jaegerConf = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 50000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: mem
    http:
      endpoint: %s
    grpc:
      endpoint: %s
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// quietConf ends a Vigil config with nothing that needs another service or
// costs CPU: no span exporter, analyzers off, no access log; the admin
// token is the driver's.
const quietConf = `tracing:
  exporter: none
analyzers:
  drift: {enabled: false}
  confidence: {enabled: false}
  latency: {enabled: false}
  output: {enabled: false}
  precision: {enabled: false}
log:
  access: false
admin:
  token: ` + adminToken + `
`

// vigilMinConf: analyzers off, no span exporter, no access log.
const vigilMinConf = `listen: %s
backends:
  - name: mock
    url: http://%s
` + quietConf

// vigilFullConf: the defaults (every analyzer on, access log on), every
// request traced to Jaeger (OTEL_EXPORTER_OTLP_* in its environment) and
// shared state in Redis.
const vigilFullConf = `listen: %s
backends:
  - name: mock
    url: http://%s
` + fullFeatures

// fullFeatures is the part of vigil-full's config after its backends:
// shared state in Redis (%s: its host:port), every request traced, the
// access log on.
const fullFeatures = `state:
  redis:
    url: redis://%s/0
tracing:
  sample_ratio: 1
  exporter: otlp
log:
  access: true
admin:
  token: ` + adminToken + `
`

// pprofKey is the opt-in for /debug/pprof behind the admin token, appended
// under admin: when this Vigil knows it.
const pprofKey = "  pprof: true\n"

// startLab starts the mock backend, nginx, Redis, Jaeger and the two Vigils
// on free ports of 127.0.0.1 and waits until each serves.
func startLab(c config, dir string) (*lab, error) {
	l := &lab{ps: &procs{dir: dir}, byName: map[string]*target{}}
	ok := false
	defer func() {
		if !ok {
			l.ps.stopAll()
		}
	}()
	ports, err := freePorts(10)
	if err != nil {
		return nil, err
	}
	mockAddr, nginxAddr, minAddr, fullAddr, redisAddr := ports[0], ports[1], ports[2], ports[3], ports[4]
	otlpAddr, queryHTTP, queryGRPC, goAddr, fastAddr := ports[5], ports[6], ports[7], ports[8], ports[9]
	env := cleanEnv()

	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	mock, err := l.ps.start("mock", self, []string{"mock", "-listen", mockAddr,
		"-chunks", fmt.Sprint(c.chunks), "-gap", c.gap.String()}, env, nil)
	if err != nil {
		return nil, err
	}
	if err := mock.waitReady(10*time.Second, func() bool { return httpOK("http://" + mockAddr + "/health") }); err != nil {
		return nil, err
	}
	l.add(&target{name: direct, base: "http://" + mockAddr, pids: func() []int { return []int{mock.pid()} }})

	// nginx runs as a child of its master process; the workers, which do
	// the work, are charged. They are found once, when nginx serves.
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, dir, mockAddr, nginxAddr), 0o644); err != nil {
		return nil, err
	}
	ng, err := l.ps.start("nginx", c.nginx, []string{"-p", dir, "-c", conf, "-e", filepath.Join(dir, "nginx-error.log")}, env, nil)
	if err != nil {
		return nil, err
	}
	if err := ng.waitReady(10*time.Second, func() bool { return httpOK("http://" + nginxAddr + "/health") }); err != nil {
		return nil, fmt.Errorf("%w\n(nginx-error.log: %s)", err, readTail(filepath.Join(dir, "nginx-error.log")))
	}
	workers := children(ng.pid())
	if len(workers) == 0 {
		return nil, fmt.Errorf("nginx (pid %d) has no worker processes", ng.pid())
	}
	l.add(&target{name: nginx, base: "http://" + nginxAddr, pids: func() []int { return workers }})

	gp, err := l.ps.start(goProxy, self, []string{"goproxy", "-listen", goAddr, "-backend", "http://" + mockAddr}, env, nil)
	if err != nil {
		return nil, err
	}
	if err := gp.waitReady(10*time.Second, func() bool { return httpOK("http://" + goAddr + "/health") }); err != nil {
		return nil, err
	}
	l.add(&target{name: goProxy, base: "http://" + goAddr, pids: func() []int { return []int{gp.pid()} }})

	fp, err := l.ps.start(fastProxyName, self, []string{"fastproxy", "-listen", fastAddr, "-backend", "http://" + mockAddr}, env, nil)
	if err != nil {
		return nil, err
	}
	if err := fp.waitReady(10*time.Second, func() bool { return httpOK("http://" + fastAddr + "/health") }); err != nil {
		return nil, err
	}
	l.add(&target{name: fastProxyName, base: "http://" + fastAddr, pids: func() []int { return []int{fp.pid()} }})

	rd, jg, err := l.startRedisJaeger(c, dir, env, redisAddr, otlpAddr, queryHTTP, queryGRPC)
	if err != nil {
		return nil, err
	}

	minYAML := fmt.Sprintf(vigilMinConf, minAddr, mockAddr)
	fullYAML := fmt.Sprintf(vigilFullConf, fullAddr, mockAddr, redisAddr)
	if l.pprof, err = pprofSupported(c.vigil, dir, fullYAML); err != nil {
		return nil, err
	}
	if l.pprof {
		minYAML += pprofKey
		fullYAML += pprofKey
	} else {
		l.notes = append(l.notes, "This vigil does not know admin.pprof (vigil check rejects it): no profiles of vigil-full.")
	}
	vmin, err := l.startVigil(c, dir, vigilMin, minAddr, minYAML, env, false)
	if err != nil {
		return nil, err
	}
	l.add(&target{name: vigilMin, base: "http://" + minAddr, pids: func() []int { return []int{vmin.pid()} }})

	fullEnv := otlpEnv(env, otlpAddr)
	vfull, err := l.startVigil(c, dir, vigilFull, fullAddr, fullYAML, fullEnv, true)
	if err != nil {
		return nil, err
	}
	l.add(&target{
		name: vigilFull, base: "http://" + fullAddr,
		pids: func() []int { return []int{vfull.pid()} },
		aux:  map[string]int{"jaeger": jg.pid(), "redis": rd.pid()},
	})
	ok = true
	return l, nil
}

func (l *lab) add(t *target) {
	l.targets = append(l.targets, t)
	l.byName[t.name] = t
}

// startRedisJaeger starts redis-server on redisAddr and Jaeger (OTLP/gRPC
// on otlpAddr, its query API on queryHTTP and queryGRPC) and waits until
// both serve.
func (l *lab) startRedisJaeger(c config, dir string, env []string, redisAddr, otlpAddr, queryHTTP, queryGRPC string) (rd, jg *proc, err error) {
	rd, err = l.ps.start("redis", c.redis, []string{"--port", portOf(redisAddr), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no"}, env, nil)
	if err != nil {
		return nil, nil, err
	}
	if err := rd.waitReady(10*time.Second, func() bool { return tcpUp(redisAddr) }); err != nil {
		return nil, nil, err
	}
	jconf := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(jconf, fmt.Appendf(nil, jaegerConf, queryHTTP, queryGRPC, otlpAddr), 0o644); err != nil {
		return nil, nil, err
	}
	jg, err = l.ps.start("jaeger", c.jaeger, []string{"--config", "file:" + jconf}, env, nil)
	if err != nil {
		return nil, nil, err
	}
	l.jaegerAPI = "http://" + queryHTTP
	if err := jg.waitReady(30*time.Second, func() bool { return tcpUp(otlpAddr) && httpOK(l.jaegerAPI+"/api/services") }); err != nil {
		return nil, nil, err
	}
	return rd, jg, nil
}

// otlpEnv is env with vigil-full's span exporter pointed at otlpAddr.
func otlpEnv(env []string, otlpAddr string) []string {
	return slices.Concat(env, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + otlpAddr,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_SERVICE_NAME=vigil-bench",
	})
}

// startVigil writes the config, starts `vigil serve` listening on addr and
// waits for /readyz (its first health check has passed). With accessLog
// its stdout, the access log, goes to a file of its own.
func (l *lab) startVigil(c config, dir, name, addr, yaml string, env []string, accessLog bool) (*proc, error) {
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	var stdout io.Writer
	if accessLog {
		l.accessLog = filepath.Join(dir, name+"-access.log")
		f, err := os.Create(l.accessLog)
		if err != nil {
			return nil, err
		}
		defer f.Close() // the child holds its own descriptor
		stdout = f
	}
	p, err := l.ps.start(name, c.vigil, []string{"serve", "--config", path}, env, stdout)
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(30*time.Second, func() bool { return httpOK("http://" + addr + "/readyz") }); err != nil {
		return nil, err
	}
	return p, nil
}

// pprofSupported reports whether this vigil accepts admin.pprof, by
// checking a config with it.
func pprofSupported(vigil, dir, yaml string) (bool, error) {
	path := filepath.Join(dir, "pprof-check.yaml")
	if err := os.WriteFile(path, []byte(yaml+pprofKey), 0o644); err != nil {
		return false, err
	}
	out, err := exec.Command(vigil, "check", "--config", path).CombinedOutput()
	if err == nil {
		return true, nil
	}
	if strings.Contains(string(out), "pprof") {
		return false, nil
	}
	return false, fmt.Errorf("vigil check of the benchmark's config failed: %v\n%s", err, out)
}

// cleanEnv is the driver's environment without the variables that would
// change what the children do: OTEL_* (the exporter's endpoint is set per
// process), VIGIL_* (overrides of Vigil's config) and GOMAXPROCS/GOGC/
// GOMEMLIMIT (each Go process runs with the runtime's defaults).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "OTEL_"), strings.HasPrefix(k, "VIGIL_"),
			k == "GOMAXPROCS", k == "GOGC", k == "GOMEMLIMIT", k == "GODEBUG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func portOf(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	return addr[i+1:]
}

func readTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 1000 {
		b = b[len(b)-1000:]
	}
	return strings.TrimSpace(string(b))
}
