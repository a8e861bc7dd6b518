package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kustomization is the part of kustomize's Kustomization that
// deploy/kubernetes uses (kustomize's own types would bring kustomize and
// kyaml into the module). It is decoded strictly, so a field kustomize knows
// but this struct does not (images, namePrefix, …) fails here: add it, and a
// check if it changes what the others see.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// kubeDecoder decodes manifests as the API server does with strict field
// validation: into the typed object of the document's apiVersion and kind,
// unknown and duplicate fields being errors. It knows the groups below; a
// manifest of another group fails with "no kind … is registered" until its
// group is added here.
var kubeDecoder = sync.OnceValue(func() runtime.Decoder {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, networkingv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err) // only on a programming error in k8s.io/api
		}
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
})

// kubeObjects are the typed objects the cross-reference checks read.
type kubeObjects struct {
	deployments []*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	configMaps  map[string]*corev1.ConfigMap
}

// checkKubernetes checks deploy/kubernetes: the kustomization and the
// manifests it lists, decoded strictly, then the references between them.
func checkKubernetes(deploy string) (f findings) {
	dir := filepath.Join(deploy, "kubernetes")
	files := checkKustomization(&f, dir)
	objs := kubeObjects{configMaps: map[string]*corev1.ConfigMap{}}
	dec := kubeDecoder()
	seen := map[string]bool{}
	for _, file := range files {
		docs, err := yamlDocuments(filepath.Join(dir, file))
		if err != nil {
			f.errorf("kubernetes/%s: %v", file, err)
			continue
		}
		for i, doc := range docs {
			where := fmt.Sprintf("kubernetes/%s (document %d)", file, i+1)
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				f.errorf("%s: %v", where, err)
			}
			if obj == nil {
				continue
			}
			if !checkMetadata(&f, where, gvk.Kind, obj, seen) {
				continue
			}
			if err == nil {
				f.logf("%s: %s %s decoded strictly into %T", where, gvk.GroupVersion(), gvk.Kind, obj)
			}
			switch o := obj.(type) {
			case *appsv1.Deployment:
				objs.deployments = append(objs.deployments, o)
			case *corev1.Service:
				objs.services = append(objs.services, o)
			case *policyv1.PodDisruptionBudget:
				objs.pdbs = append(objs.pdbs, o)
			case *corev1.ConfigMap:
				objs.configMaps[o.Name] = o
			}
		}
	}
	if len(objs.deployments) == 0 {
		f.errorf("kubernetes: no Deployment among %v", files)
	}
	mounted := map[string]bool{}
	for _, d := range objs.deployments {
		checkDeployment(&f, d, objs.configMaps, mounted)
	}
	for _, s := range objs.services {
		checkService(&f, s, objs.deployments)
	}
	for _, p := range objs.pdbs {
		checkPDB(&f, p, objs.deployments)
	}
	for name, cm := range objs.configMaps {
		if !mounted[name] {
			f.errorf("ConfigMap %s: mounted by no Deployment", name)
		}
		for key, data := range cm.Data {
			if ext := filepath.Ext(key); ext != ".yaml" && ext != ".yml" {
				continue
			}
			var v any
			if err := yaml.Unmarshal([]byte(data), &v); err != nil {
				f.errorf("ConfigMap %s: key %s is not YAML: %v", name, key, err)
			}
		}
	}
	return f
}

// checkKustomization decodes kustomization.yaml strictly and returns the
// resources it lists that exist. Every other YAML file in the directory must
// be listed: `kubectl apply -k` would skip it silently.
func checkKustomization(f *findings, dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		f.errorf("kubernetes: %v", err)
		return nil
	}
	var k kustomization
	if err := decodeStrict(data, &k); err != nil {
		f.errorf("kubernetes/kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		f.errorf("kubernetes/kustomization.yaml: apiVersion %q kind %q, want kustomize.config.k8s.io/v1beta1 Kustomization", k.APIVersion, k.Kind)
	}
	var files []string
	for _, r := range k.Resources {
		st, err := os.Stat(filepath.Join(dir, r))
		switch {
		case err != nil:
			f.errorf("kubernetes/kustomization.yaml: resource %s does not exist (%v)", r, err)
		case st.IsDir():
			f.errorf("kubernetes/kustomization.yaml: resource %s is a directory; list its files, or teach this test about it", r)
		default:
			files = append(files, r)
		}
	}
	all, _ := filepath.Glob(filepath.Join(dir, "*.y*ml"))
	for _, p := range all {
		name := filepath.Base(p)
		if name != "kustomization.yaml" && !slices.Contains(k.Resources, name) {
			f.errorf("kubernetes/%s: not listed in kustomization.yaml's resources, so `kubectl apply -k` skips it", name)
		}
	}
	return files
}

// yamlDocuments splits a file into its non-empty YAML documents.
func yamlDocuments(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err == nil && len(m) == 0 {
			continue // only comments or "---"
		}
		docs = append(docs, doc)
	}
}

// checkMetadata checks what every object needs: a valid, unique name,
// valid labels and no namespace (the README applies the directory with
// -n NAMESPACE, which a namespace in the file would contradict). It reports
// whether the object can be cross-referenced.
func checkMetadata(f *findings, where, kind string, obj runtime.Object, seen map[string]bool) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		f.errorf("%s: %v", where, err)
		return false
	}
	validName := validation.IsDNS1123Subdomain
	if kind == "Service" {
		validName = validation.IsDNS1035Label
	}
	for _, msg := range validName(m.GetName()) {
		f.errorf("%s: metadata.name %q: %s", where, m.GetName(), msg)
	}
	for _, e := range metav1validation.ValidateLabels(m.GetLabels(), field.NewPath("metadata", "labels")) {
		f.errorf("%s: %v", where, e)
	}
	if ns := m.GetNamespace(); ns != "" {
		f.errorf("%s: metadata.namespace %q: leave it out, the namespace comes from `kubectl apply -n`", where, ns)
	}
	key := kind + "/" + m.GetName()
	if seen[key] {
		f.errorf("%s: a second %s", where, key)
		return false
	}
	seen[key] = true
	return true
}

// vigilDefaultListen is Vigil's listen address when its config sets none
// (README, "Configuration").
const vigilDefaultListen = ":8080"

// checkDeployment checks a Deployment against itself and the ConfigMaps:
// its selector matches its pods, the vigil container's --config file is a
// key of a mounted ConfigMap whose listen port is a container port, the
// probes and Prometheus annotations use that port, and the termination
// grace period covers Vigil's shutdown. It records the ConfigMaps it mounts
// in mounted.
func checkDeployment(f *findings, d *appsv1.Deployment, cms map[string]*corev1.ConfigMap, mounted map[string]bool) {
	where := "Deployment " + d.Name
	pod := &d.Spec.Template
	if sel, err := selectorOf(d.Spec.Selector); err != nil {
		f.errorf("%s: spec.selector: %v", where, err)
	} else if !sel.Matches(labels.Set(pod.Labels)) {
		f.errorf("%s: spec.selector %s does not match the pod template's labels %v", where, sel, pod.Labels)
	}

	volumes := map[string]*corev1.Volume{}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		volumes[v.Name] = v
		if v.ConfigMap == nil {
			continue
		}
		mounted[v.ConfigMap.Name] = true
		cm := cms[v.ConfigMap.Name]
		if cm == nil {
			f.errorf("%s: volume %s mounts ConfigMap %s, which no manifest defines", where, v.Name, v.ConfigMap.Name)
			continue
		}
		for _, it := range v.ConfigMap.Items {
			if _, ok := cm.Data[it.Key]; !ok {
				f.errorf("%s: volume %s: ConfigMap %s has no key %s", where, v.Name, cm.Name, it.Key)
			}
		}
	}

	i := slices.IndexFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == "vigil" })
	if i < 0 {
		f.errorf("%s: no container named vigil", where)
		return
	}
	c := &pod.Spec.Containers[i]
	for _, m := range c.VolumeMounts {
		if volumes[m.Name] == nil {
			f.errorf("%s: container vigil mounts volume %s, which the pod does not declare", where, m.Name)
		}
	}

	// The port Vigil listens on, from the config file the container reads;
	// the port named http when that cannot be read.
	port, ok := resolvePort(c, intstr.FromString("http"))
	if cfg, err := mountedVigilConfig(c, volumes, cms); err != nil {
		f.errorf("%s: container vigil: %v", where, err)
	} else {
		listen := cfg.Listen
		if listen == "" {
			listen = vigilDefaultListen
		}
		p, err := listenPort(listen)
		switch {
		case err != nil:
			f.errorf("%s: container vigil's config: %v", where, err)
		case !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.ContainerPort == p }):
			f.errorf("%s: container vigil listens on %d (config listen %q), which is not one of its ports %v", where, p, listen, containerPorts(c))
		default:
			port, ok = p, true
		}
		checkShutdownGrace(f, where, d, cfg)
	}
	if !ok {
		f.errorf("%s: container vigil: no port to check the probes against", where)
		return
	}
	f.logf("%s: container vigil serves on port %d", where, port)

	checkProbe(f, where+": readinessProbe", c, c.ReadinessProbe, "/readyz", port)
	checkProbe(f, where+": livenessProbe", c, c.LivenessProbe, "/healthz", port)

	if v, ok := pod.Annotations["prometheus.io/port"]; ok && v != strconv.Itoa(int(port)) {
		f.errorf("%s: annotation prometheus.io/port %q, but Vigil serves /metrics on %d", where, v, port)
	}
	if v, ok := pod.Annotations["prometheus.io/path"]; ok && v != "/metrics" {
		f.errorf("%s: annotation prometheus.io/path %q, want /metrics", where, v)
	}
}

// Vigil's shutdown timing when its config sets none (config.Default in the
// main module; deploy/README.md, "Kubernetes").
const (
	vigilDefaultShutdownDelay = 5 * time.Second
	vigilDefaultShutdownGrace = 60 * time.Second
)

// checkShutdownGrace checks that the kubelet waits for Vigil's shutdown: on
// SIGTERM it keeps serving for limits.shutdown_delay, lets streams finish
// for up to limits.shutdown_grace, then flushes; a pod killed before that
// cuts streams and loses its last window.
func checkShutdownGrace(f *findings, where string, d *appsv1.Deployment, cfg *vigilConfig) {
	need := time.Duration(0)
	for _, l := range []struct {
		name, value string
		def         time.Duration
	}{
		{"limits.shutdown_delay", cfg.Limits.ShutdownDelay, vigilDefaultShutdownDelay},
		{"limits.shutdown_grace", cfg.Limits.ShutdownGrace, vigilDefaultShutdownGrace},
	} {
		v := l.def
		if l.value != "" {
			var err error
			if v, err = time.ParseDuration(l.value); err != nil {
				f.errorf("%s: container vigil's config: %s: %v", where, l.name, err)
				return
			}
		}
		need += v
	}
	grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	if time.Duration(grace)*time.Second <= need {
		f.errorf("%s: terminationGracePeriodSeconds %d does not cover limits.shutdown_delay + limits.shutdown_grace (%s) and the final flush: the kubelet would kill Vigil mid-drain", where, grace, need)
	}
}

// mountedVigilConfig reads the config file the vigil container is started
// with (args "serve --config PATH") out of the ConfigMap mounted at PATH.
func mountedVigilConfig(c *corev1.Container, volumes map[string]*corev1.Volume, cms map[string]*corev1.ConfigMap) (*vigilConfig, error) {
	path := flagValue(c.Args, "--config")
	if path == "" {
		return nil, fmt.Errorf("args %q name no --config file", c.Args)
	}
	for _, m := range c.VolumeMounts {
		rel := m.SubPath
		if rel == "" {
			r, err := filepath.Rel(m.MountPath, path)
			if err != nil || r == "." || strings.HasPrefix(r, "..") {
				continue
			}
			rel = r
		} else if m.MountPath != path {
			continue
		}
		v := volumes[m.Name]
		if v == nil || v.ConfigMap == nil {
			return nil, fmt.Errorf("--config %s is in volume %s, which is not a ConfigMap", path, m.Name)
		}
		key := rel
		if len(v.ConfigMap.Items) > 0 {
			key = ""
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
		}
		cm := cms[v.ConfigMap.Name]
		if cm == nil {
			return nil, fmt.Errorf("--config %s: ConfigMap %s is not defined", path, v.ConfigMap.Name)
		}
		data, ok := cm.Data[key]
		if !ok || key == "" {
			return nil, fmt.Errorf("--config %s: ConfigMap %s has no key %q (its keys: %v)", path, cm.Name, key, slices.Sorted(maps.Keys(cm.Data)))
		}
		var cfg vigilConfig
		if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
			return nil, fmt.Errorf("--config %s: ConfigMap %s key %s is not YAML: %v", path, cm.Name, key, err)
		}
		return &cfg, nil
	}
	return nil, fmt.Errorf("--config %s: no volumeMount provides it", path)
}

// checkProbe checks that a probe is an HTTP GET of path on Vigil's port.
func checkProbe(f *findings, where string, c *corev1.Container, p *corev1.Probe, path string, port int32) {
	if p == nil || p.HTTPGet == nil {
		f.errorf("%s: want an httpGet of %s", where, path)
		return
	}
	if p.HTTPGet.Path != path {
		f.errorf("%s: path %q, want %s", where, p.HTTPGet.Path, path)
	}
	if got, ok := resolvePort(c, p.HTTPGet.Port); !ok {
		f.errorf("%s: port %s is not a port of container %s", where, p.HTTPGet.Port.String(), c.Name)
	} else if got != port {
		f.errorf("%s: port %s is %d, but Vigil serves on %d", where, p.HTTPGet.Port.String(), got, port)
	}
}

// checkService checks that a Service selects a Deployment's pods and that
// each of its ports targets a port their containers declare.
func checkService(f *findings, s *corev1.Service, deployments []*appsv1.Deployment) {
	where := "Service " + s.Name
	if len(s.Spec.Selector) == 0 {
		f.errorf("%s: no selector", where)
		return
	}
	sel := labels.SelectorFromSet(s.Spec.Selector)
	selected := selectedDeployments(sel, deployments)
	if len(selected) == 0 {
		f.errorf("%s: selector %s selects no Deployment's pods", where, sel)
		return
	}
	for _, p := range s.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.Int && target.IntVal == 0 {
			target = intstr.FromInt32(p.Port) // targetPort defaults to port
		}
		for _, d := range selected {
			if !slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool {
				_, ok := resolvePort(&c, target)
				return ok
			}) {
				f.errorf("%s: port %d targets %s, which no container of Deployment %s declares", where, p.Port, target.String(), d.Name)
			}
		}
	}
}

// checkPDB checks that a PodDisruptionBudget selects a Deployment's pods and
// still lets one of them go: a budget that allows no disruption blocks every
// node drain.
func checkPDB(f *findings, p *policyv1.PodDisruptionBudget, deployments []*appsv1.Deployment) {
	where := "PodDisruptionBudget " + p.Name
	sel, err := selectorOf(p.Spec.Selector)
	if err != nil {
		f.errorf("%s: spec.selector: %v", where, err)
		return
	}
	selected := selectedDeployments(sel, deployments)
	if len(selected) == 0 {
		f.errorf("%s: selector %s selects no Deployment's pods", where, sel)
		return
	}
	for _, d := range selected {
		replicas := 1
		if d.Spec.Replicas != nil {
			replicas = int(*d.Spec.Replicas)
		}
		// Rounded up, as the disruption controller does.
		allowed := replicas
		if p.Spec.MinAvailable != nil {
			minAvail, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MinAvailable, replicas, true)
			if err != nil {
				f.errorf("%s: minAvailable: %v", where, err)
				continue
			}
			allowed = replicas - minAvail
		}
		if p.Spec.MaxUnavailable != nil {
			maxUnavail, err := intstr.GetScaledValueFromIntOrPercent(p.Spec.MaxUnavailable, replicas, true)
			if err != nil {
				f.errorf("%s: maxUnavailable: %v", where, err)
				continue
			}
			allowed = min(allowed, maxUnavail)
		}
		if allowed < 1 {
			f.errorf("%s: allows no voluntary disruption of Deployment %s's %d replicas, so node drains block", where, d.Name, replicas)
		}
	}
}

// selectorOf converts a label selector, refusing an empty one (it would
// select every pod of the namespace).
func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return nil, errors.New("missing")
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, err
	}
	if sel.Empty() {
		return nil, errors.New("empty: it selects every pod")
	}
	return sel, nil
}

func selectedDeployments(sel labels.Selector, deployments []*appsv1.Deployment) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, d := range deployments {
		if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			out = append(out, d)
		}
	}
	return out
}

// resolvePort finds a port of the container by name or number, as the
// kubelet and the endpoints controller do.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// containerPorts lists a container's ports as NAME=NUMBER, for messages.
func containerPorts(c *corev1.Container) []string {
	var out []string
	for _, cp := range c.Ports {
		out = append(out, fmt.Sprintf("%s=%d", cp.Name, cp.ContainerPort))
	}
	return out
}

// flagValue returns the value of a command-line flag given as "NAME VALUE"
// or "NAME=VALUE" in args, or "" when it is absent.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
