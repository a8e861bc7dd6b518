//go:build !cgo

package gpu

import "fmt"

// openNVML is Open without cgo and reports no GPU: go-nvml needs cgo, and a
// CGO_ENABLED=0 build of it does not compile.
func openNVML() (Reader, error) {
	return nil, fmt.Errorf("%w: built without cgo, NVML unavailable", ErrNoGPU)
}
