//go:build !unix

package gateway

import "time"

// processCPU returns 0: the CPU metric is reported on Unix only.
func processCPU() time.Duration { return 0 }
