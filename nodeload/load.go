// Package nodeload samples a node's load for the balancer: CPU and memory
// from /proc, and NVIDIA GPUs through package gpu. A node without NVML (no
// driver, a CGO_ENABLED=0 build) reports no GPU and everything else works.
//
// A Sampler publishes immutable Load snapshots behind an atomic pointer;
// readers take no lock. Handler serves them as JSON and Prometheus text, which
// is what `vigil agent` runs.
package nodeload

import (
	"encoding/json"
	"time"

	"github.com/vigil-gw/vigil/gpu"
)

// Load is one sample of a node's load. Shares are in [0,1]. A Load returned
// by Sampler.Load is a snapshot: its GPUs slice is shared with other readers
// and must not be modified.
type Load struct {
	// Time is when the sample was taken; zero before the first sample. A
	// pinned Load (see Override) carries the time it was read.
	Time time.Time `json:"time"`
	// CPU is the share of CPU time spent busy (all but idle and iowait)
	// over the last interval, across all CPUs.
	CPU float64 `json:"cpu"`
	// Mem is the used share of memory: 1 − MemAvailable/MemTotal.
	Mem float64 `json:"mem"`
	// GPUs are the node's NVIDIA devices; empty without NVML.
	GPUs []gpu.Device `json:"gpus,omitempty"`
	// GPU is the mean utilization of the devices. Meaningful only when
	// HasGPU is set; the JSON form omits it otherwise.
	GPU float64 `json:"gpu"`
	// GPUMem is the used share of all devices' memory together (used bytes
	// over total bytes). Meaningful only when HasGPU is set; the JSON form
	// omits it otherwise.
	GPUMem float64 `json:"gpu_mem"`
	// HasGPU reports whether GPU and GPUMem are known.
	HasGPU bool `json:"has_gpu"`
	// Err describes what could not be read in this sample (a /proc file, a
	// device query); empty when everything was read. A node without NVML is
	// not an error: it has HasGPU false and an empty Err.
	Err string `json:"error,omitempty"`
}

// MarshalJSON writes gpu and gpu_mem only when HasGPU is set, so that a
// consumer sees "absent" rather than a misleading 0.
func (l Load) MarshalJSON() ([]byte, error) {
	type plain Load // drops the method, avoiding recursion
	// The outer fields are shallower than the embedded ones of the same
	// name, so encoding/json uses them.
	aux := struct {
		plain
		GPU    *float64 `json:"gpu,omitempty"`
		GPUMem *float64 `json:"gpu_mem,omitempty"`
	}{plain: plain(l)}
	if l.HasGPU {
		aux.GPU, aux.GPUMem = &l.GPU, &l.GPUMem
	}
	return json.Marshal(aux)
}

// Override pins some load values, replacing the measured ones in every Load
// until it is cleared. It is a testing and demo aid: the balancer's tests use
// it to give agents known loads. A nil field keeps the measured value.
type Override struct {
	CPU    *float64 `json:"cpu,omitempty"`
	Mem    *float64 `json:"mem,omitempty"`
	GPU    *float64 `json:"gpu,omitempty"`
	GPUMem *float64 `json:"gpu_mem,omitempty"`
}

// apply returns l with o's values in place; setting GPU or GPUMem sets
// HasGPU, so a node without a GPU can play one.
func (o *Override) apply(l Load, now time.Time) Load {
	l.Time = now
	if o.CPU != nil {
		l.CPU = *o.CPU
	}
	if o.Mem != nil {
		l.Mem = *o.Mem
	}
	if o.GPU != nil {
		l.GPU, l.HasGPU = *o.GPU, true
	}
	if o.GPUMem != nil {
		l.GPUMem, l.HasGPU = *o.GPUMem, true
	}
	return l
}
