//go:build !race

package logprob

const raceEnabled = false
