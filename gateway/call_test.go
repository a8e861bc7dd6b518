package gateway

import (
	"testing"
	"unsafe"
)

// TestCallSizeClass: a call is allocated once per request, and the Go
// allocator rounds it up to a size class; 2688 bytes is the class it has
// fit since the proxy's allocations were last measured. Two additions of a
// few fields each pushed it into the 3072-byte class this far (384 bytes
// more per request in BenchmarkServe) through padding alone: group small
// fields together before raising this bound, and measure when you do.
func TestCallSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(call{}); n > 2688 {
		t.Errorf("call is %d bytes, over the 2688-byte size class", n)
	}
}
