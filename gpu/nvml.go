//go:build cgo

package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlDevice is a device handle with the properties that do not change.
type nvmlDevice struct {
	h          nvml.Device
	index      int
	name, uuid string
}

// nvmlReader reads devices through the process-wide NVML library, which it
// initialized and shuts down once (go-nvml counts Init/Shutdown pairs).
type nvmlReader struct {
	devs    []nvmlDevice
	openErr error // devices whose handle could not be had: reported with every read
}

// openNVML is Open with cgo: go-nvml loads libnvidia-ml at run time, so a
// node without the driver gets an error wrapping ErrNoGPU, not a failed start.
func openNVML() (Reader, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			return nil, fmt.Errorf("%w: NVML library (libnvidia-ml.so.1) not found", ErrNoGPU)
		}
		return nil, fmt.Errorf("nvml init: %w", ret)
	}
	n, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, fmt.Errorf("nvml device count: %w", ret)
	}
	if n == 0 {
		nvml.Shutdown()
		return nil, fmt.Errorf("%w: NVML reports no devices", ErrNoGPU)
	}
	r := &nvmlReader{}
	var errs []error
	for i := range n {
		h, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// One lost GPU (ERROR_GPU_IS_LOST) must not hide the others.
			errs = append(errs, fmt.Errorf("gpu %d: handle: %w", i, ret))
			continue
		}
		d := nvmlDevice{h: h, index: i}
		d.name, _ = h.GetName()
		d.uuid, _ = h.GetUUID()
		r.devs = append(r.devs, d)
	}
	r.openErr = errors.Join(errs...)
	if len(r.devs) == 0 {
		nvml.Shutdown()
		return nil, r.openErr
	}
	return r, nil
}

func (r *nvmlReader) Read() ([]Device, error) {
	errs := []error{r.openErr}
	// check keeps ERROR_NOT_SUPPORTED silent: such a value stays zero.
	check := func(i int, what string, ret nvml.Return) bool {
		if ret == nvml.SUCCESS {
			return true
		}
		if ret != nvml.ERROR_NOT_SUPPORTED {
			errs = append(errs, fmt.Errorf("gpu %d: %s: %w", i, what, ret))
		}
		return false
	}
	out := make([]Device, 0, len(r.devs))
	for _, d := range r.devs {
		dev := Device{Index: d.index, Name: d.name, UUID: d.uuid}
		if u, ret := d.h.GetUtilizationRates(); check(d.index, "utilization", ret) {
			dev.Util = min(float64(u.Gpu)/100, 1)
		}
		if m, ret := d.h.GetMemoryInfo(); check(d.index, "memory", ret) {
			dev.MemUsed, dev.MemTotal = float64(m.Used), float64(m.Total)
		}
		if t, ret := d.h.GetTemperature(nvml.TEMPERATURE_GPU); check(d.index, "temperature", ret) {
			dev.TempC = float64(t)
		}
		if p, ret := d.h.GetPowerUsage(); check(d.index, "power", ret) {
			dev.PowerW = float64(p) / 1000 // NVML reports milliwatts
		}
		out = append(out, dev)
	}
	return out, errors.Join(errs...)
}

func (r *nvmlReader) Close() { nvml.Shutdown() }
