//go:build race

package window

// raceEnabled: the race detector instruments allocations, so allocation
// counts are only checked without it.
const raceEnabled = true
