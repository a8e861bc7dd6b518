//go:build race

package testutil

// Race says whether the race detector is on.
const Race = true
