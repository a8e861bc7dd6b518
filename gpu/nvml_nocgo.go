//go:build !cgo

package gpu

import "fmt"

// openNVML reports no GPU: go-nvml needs cgo, and a CGO_ENABLED=0 build of
// it does not compile.
func openNVML() (gpuReader, error) {
	return nil, fmt.Errorf("%w: built without cgo, NVML unavailable", errNoGPU)
}
