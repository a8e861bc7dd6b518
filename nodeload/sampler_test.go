package nodeload

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vigil-gw/vigil/gpu"
	vtest "github.com/vigil-gw/vigil/internal/testutil"
)

// procDir returns a temporary /proc with the named fixtures installed as
// stat and meminfo, and a func that installs another stat fixture.
func procDir(t *testing.T, stat, meminfo string) (dir string, setStat func(string)) {
	t.Helper()
	dir = t.TempDir()
	install := func(fixture, as string) {
		b, err := os.ReadFile(filepath.Join("testdata", fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, as), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	install(stat, "stat")
	install(meminfo, "meminfo")
	return dir, func(f string) { install(f, "stat") }
}

var fixedTime = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

// TestSampleFixtures feeds two /proc/stat readings and checks the shares
// exactly: the fixtures are built so that 500 of 1000 ticks are busy (guest
// ticks excluded) and 4 of 16 GB are available.
func TestSampleFixtures(t *testing.T) {
	dir, setStat := procDir(t, "stat1", "meminfo")
	s := NewSampler(time.Second, WithProcRoot(dir), WithoutGPU())
	s.now = func() time.Time { return fixedTime }
	s.primeCPU()
	setStat("stat2")
	got := s.sample()
	want := &Load{Time: fixedTime, CPU: 0.5, Mem: 0.75}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(*want, s.Load()); diff != "" {
		t.Errorf("Load after sample (-want +got):\n%s", diff)
	}
	// No tick since: the share of the last interval still stands.
	if got := s.sample(); got.CPU != 0.5 || got.Err != "" {
		t.Errorf("sample without new ticks: cpu %v, err %q; want 0.5, none", got.CPU, got.Err)
	}
}

// TestSampleMissingProc: unreadable /proc files end up in Err, not in a
// panic or a stopped sampler.
func TestSampleMissingProc(t *testing.T) {
	s := NewSampler(time.Second, WithProcRoot(t.TempDir()), WithoutGPU())
	s.primeCPU()
	l := s.sample()
	if !strings.Contains(l.Err, "cpu: ") || !strings.Contains(l.Err, "mem: ") {
		t.Errorf("Err = %q, want cpu and mem errors", l.Err)
	}
	if l.Time.IsZero() {
		t.Error("a sample with errors must still be published")
	}
}

// TestRunLifecycle runs the sampler with a short interval while readers
// poll Load, then cancels: Run returns nil, a second concurrent Run is
// refused, and the Sampler can run again afterwards. Run with -race.
func TestRunLifecycle(t *testing.T) {
	dir, _ := procDir(t, "stat1", "meminfo")
	s := NewSampler(2*time.Millisecond, WithProcRoot(dir), WithoutGPU())
	if l := s.Load(); !l.Time.IsZero() {
		t.Fatalf("Load before Run = %+v, want zero", l)
	}
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				deadline := time.Now().Add(vtest.WaitDeadline)
				// A sample of this round: Run is in progress.
				for !s.Load().Time.After(start) {
					if time.Now().After(deadline) {
						t.Errorf("no sample within %v", vtest.WaitDeadline)
						return
					}
					time.Sleep(time.Millisecond)
				}
				if l := s.Load(); l.Mem != 0.75 {
					t.Errorf("round %d: mem = %v, want 0.75", round, l.Mem)
				}
			})
		}
		wg.Wait()
		// Done already: were it wrongly let in, it would return at once.
		stopped, stop := context.WithCancel(context.Background())
		stop()
		if err := s.Run(stopped); err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("second Run = %v, want already running", err)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil after cancel", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after cancel")
		}
	}
}

// TestNoGPUOnThisMachine runs the sampler as `vigil agent` does, on the real
// /proc, with NVML probing on. Without NVML (this machine, CI) it reports
// HasGPU false and no error; with it, devices.
func TestNoGPUOnThisMachine(t *testing.T) {
	r, probeErr := gpu.Open()
	if r != nil {
		r.Close()
	}
	if probeErr != nil && !errors.Is(probeErr, gpu.ErrNoGPU) {
		t.Skipf("NVML is present but fails (%v): neither path applies", probeErr)
	}
	s := NewSampler(5 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(vtest.WaitDeadline)
	for s.Load().Time.IsZero() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	l := s.Load()
	if l.Time.IsZero() {
		t.Fatal("no sample within 5s")
	}
	if l.Err != "" {
		t.Errorf("Err = %q, want none", l.Err)
	}
	if l.CPU < 0 || l.CPU > 1 || l.Mem <= 0 || l.Mem > 1 {
		t.Errorf("cpu %v, mem %v: want cpu in [0,1], mem in (0,1]", l.CPU, l.Mem)
	}
	if wantGPU := probeErr == nil; l.HasGPU != wantGPU || (len(l.GPUs) > 0) != wantGPU {
		t.Errorf("HasGPU %v with %d devices; NVML probe said %v", l.HasGPU, len(l.GPUs), probeErr)
	}
	if !l.HasGPU {
		t.Logf("no GPU, as expected: %v", probeErr)
	} else if l.GPU < 0 || l.GPU > 1 || l.GPUMem < 0 || l.GPUMem > 1 {
		t.Errorf("gpu %v, gpu_mem %v: want shares in [0,1]", l.GPU, l.GPUMem)
	}
}

// fakeGPU stands in for NVML: a gpu.Reader that returns fixed devices.
type fakeGPU struct {
	devs   []gpu.Device
	err    error
	closed bool
}

func (f *fakeGPU) Read() ([]gpu.Device, error) { return f.devs, f.err }
func (f *fakeGPU) Close()                      { f.closed = true }

var twoGPUs = []gpu.Device{
	{Index: 0, Name: "NVIDIA H200", UUID: "GPU-0", Util: 0.9, MemUsed: 60e9, MemTotal: 100e9, TempC: 61, PowerW: 512.5},
	{Index: 1, Name: "NVIDIA H200", UUID: "GPU-1", Util: 0.3, MemUsed: 20e9, MemTotal: 100e9, TempC: 40, PowerW: 120},
}

// TestSampleGPUs checks the aggregation and the metrics with a fake NVML:
// GPU is the mean utilization, GPUMem used bytes over total bytes.
func TestSampleGPUs(t *testing.T) {
	dir, setStat := procDir(t, "stat1", "meminfo")
	fake := &fakeGPU{devs: twoGPUs, err: errors.New("gpu 1: power: ERROR_UNKNOWN")}
	s := NewSampler(time.Second, WithProcRoot(dir))
	s.openGPU = func() (gpu.Reader, error) { return fake, nil }
	s.now = func() time.Time { return fixedTime }
	s.open()
	s.primeCPU()
	setStat("stat2")
	got := s.sample()
	want := &Load{Time: fixedTime, CPU: 0.5, Mem: 0.75, GPUs: twoGPUs, GPU: 0.6, GPUMem: 0.4, HasGPU: true,
		Err: "gpu: gpu 1: power: ERROR_UNKNOWN"}
	if diff := cmp.Diff(want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
	s.close()
	if !fake.closed {
		t.Error("close did not close the GPU library")
	}

	const metrics = `
# HELP vigil_gpu_power_watts GPU power draw.
# TYPE vigil_gpu_power_watts gauge
vigil_gpu_power_watts{gpu="0"} 512.5
vigil_gpu_power_watts{gpu="1"} 120
# HELP vigil_gpu_memory_total_bytes GPU memory installed.
# TYPE vigil_gpu_memory_total_bytes gauge
vigil_gpu_memory_total_bytes{gpu="0"} 1e+11
vigil_gpu_memory_total_bytes{gpu="1"} 1e+11
# HELP vigil_node_cpu_utilization Share of CPU time spent busy over the last sampling interval, across all CPUs.
# TYPE vigil_node_cpu_utilization gauge
vigil_node_cpu_utilization 0.5
`
	if err := testutil.CollectAndCompare(s.Collector(), strings.NewReader(metrics),
		"vigil_gpu_power_watts", "vigil_gpu_memory_total_bytes", "vigil_node_cpu_utilization"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.Collector()); n != 2+5*2 {
		t.Errorf("%d metrics, want 12 (2 node + 5 per device)", n)
	}
	if n := testutil.CollectAndCount(NewSampler(time.Second).Collector()); n != 0 {
		t.Errorf("%d metrics before the first sample, want 0", n)
	}
}

// TestGPUOpenErrors: having no GPU is not an error; a GPU library that is
// there but fails is, in every sample.
func TestGPUOpenErrors(t *testing.T) {
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"no library", gpu.ErrNoGPU, ""},
		{"driver fails", errors.New("nvml init: ERROR_DRIVER_NOT_LOADED"), "gpu: nvml init: ERROR_DRIVER_NOT_LOADED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, _ := procDir(t, "stat1", "meminfo")
			s := NewSampler(time.Second, WithProcRoot(dir))
			s.openGPU = func() (gpu.Reader, error) { return nil, tt.err }
			s.open()
			s.primeCPU()
			l := s.sample()
			if l.Err != tt.wantErr || l.HasGPU {
				t.Errorf("Err %q, HasGPU %v; want %q, false", l.Err, l.HasGPU, tt.wantErr)
			}
		})
	}
}

func TestLoadJSON(t *testing.T) {
	tests := []struct {
		name string
		in   Load
		want map[string]any
	}{
		{"no GPU: gpu fields absent", Load{Time: fixedTime, CPU: 0.5, Mem: 0.25},
			map[string]any{"time": "2026-11-29T10:00:00Z", "cpu": 0.5, "mem": 0.25, "has_gpu": false}},
		{"idle GPU: zeros present", Load{Time: fixedTime, CPU: 0.5, Mem: 0.25, HasGPU: true,
			GPUs: []gpu.Device{{Index: 0, Name: "H200", UUID: "GPU-0", MemTotal: 1e9}}},
			map[string]any{"time": "2026-11-29T10:00:00Z", "cpu": 0.5, "mem": 0.25, "has_gpu": true, "gpu": 0.0, "gpu_mem": 0.0,
				"gpus": []any{map[string]any{"index": 0.0, "name": "H200", "uuid": "GPU-0", "util": 0.0,
					"mem_used": 0.0, "mem_total": 1e9, "temp_c": 0.0, "power_w": 0.0}}}},
		{"error", Load{Time: fixedTime, Err: "mem: gone"},
			map[string]any{"time": "2026-11-29T10:00:00Z", "cpu": 0.0, "mem": 0.0, "has_gpu": false, "error": "mem: gone"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("JSON (-want +got):\n%s", diff)
			}
			var back Load
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.in, back); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOverride(t *testing.T) {
	dir, _ := procDir(t, "stat1", "meminfo")
	s := NewSampler(time.Second, WithProcRoot(dir), WithoutGPU())
	now := fixedTime
	s.now = func() time.Time { return now }
	f := func(v float64) *float64 { return &v }

	// Pinned before any sample: served, with the time it is read.
	if err := s.SetOverride(&Override{CPU: f(0.5), GPU: f(0.9)}); err != nil {
		t.Fatal(err)
	}
	want := Load{Time: fixedTime, CPU: 0.5, GPU: 0.9, HasGPU: true}
	if diff := cmp.Diff(want, s.Load()); diff != "" {
		t.Errorf("pinned, no sample (-want +got):\n%s", diff)
	}
	s.primeCPU()
	s.sample()
	now = now.Add(time.Minute)
	want = Load{Time: now, CPU: 0.5, Mem: 0.75, GPU: 0.9, HasGPU: true}
	if diff := cmp.Diff(want, s.Load()); diff != "" {
		t.Errorf("pinned over a sample (-want +got):\n%s", diff)
	}
	if !s.Overridden() {
		t.Error("Overridden = false while pinned")
	}

	for _, bad := range []*Override{{CPU: f(1.5)}, {Mem: f(-0.1)}, {GPUMem: f(math.NaN())}} {
		if err := s.SetOverride(bad); err == nil {
			t.Errorf("SetOverride(%+v) accepted an out-of-range value", bad)
		}
	}
	if got := s.Load(); got.CPU != 0.5 {
		t.Errorf("a rejected override changed the pinned values: cpu %v", got.CPU)
	}

	s.SetOverride(nil)
	want = Load{Time: fixedTime, Mem: 0.75}
	if diff := cmp.Diff(want, s.Load()); diff != "" {
		t.Errorf("cleared (-want +got):\n%s", diff)
	}
}
