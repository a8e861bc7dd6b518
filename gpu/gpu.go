// Package gpu reads a node's NVIDIA GPUs through NVML
// (github.com/NVIDIA/go-nvml). go-nvml needs cgo; a CGO_ENABLED=0 build
// compiles a stand-in whose Open reports no GPU, so that the rest of the
// node-load agent (package nodeload) builds and runs without it.
package gpu

import "errors"

// Device is one GPU as NVML reports it. A value NVML does not support on the
// device (power on some boards, utilization under MIG) is zero. Its JSON form
// is part of the agent's GET /v1/load answer.
type Device struct {
	Index int    `json:"index"`
	Name  string `json:"name"`
	UUID  string `json:"uuid"`
	// Util is the share of the last sample period during which a kernel
	// ran on the device, in [0,1].
	Util float64 `json:"util"`
	// MemUsed and MemTotal are in bytes.
	MemUsed  float64 `json:"mem_used"`
	MemTotal float64 `json:"mem_total"`
	TempC    float64 `json:"temp_c"`
	PowerW   float64 `json:"power_w"`
}

// ErrNoGPU marks the ordinary ways of having no GPU to read: no NVML
// library, a build without cgo, a driver that reports no devices. Open's
// error wraps it in those cases, so that a caller can tell them from a
// driver that is there but fails, which deserves an operator's look.
var ErrNoGPU = errors.New("no GPU")

// Reader reads the devices of an opened GPU library. A Reader is not safe
// for concurrent use: its calls must not overlap, and nothing may be called
// after Close. Implementations therefore need no locking; the node-load
// sampler calls a Reader from its one sampling goroutine.
type Reader interface {
	// Read returns every device it could read, and what it could not
	// (joined errors); a device whose query failed is still returned, with
	// the failed values zero.
	Read() ([]Device, error)
	// Close releases the library. It is called once.
	Close()
}

// Open initializes NVML and takes a handle on every device. Without the
// library (no driver, a build without cgo) or without devices its error
// wraps ErrNoGPU. Open is safe to call from any goroutine; NVML counts
// initializations, so each Reader it returns must be closed on its own.
func Open() (Reader, error) { return openNVML() }
