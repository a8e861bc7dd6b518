package testutil

import (
	"os"
	"testing"
)

// EnvStatisticalWithoutRace names the environment variable that moves the
// statistical tests out of a -race run: when it is set, SkipStatisticalUnderRace
// skips them there. ./test/run sets it for its `go test -race ./...` pass
// and then runs them in a pass of their own without the race detector.
const EnvStatisticalWithoutRace = "VIGIL_STATISTICAL_WITHOUT_RACE"

// SkipStatisticalUnderRace skips a statistical test (a long simulation on
// one goroutine whose assertions are a detection power or a false-alarm
// rate) when the race detector is on and $VIGIL_STATISTICAL_WITHOUT_RACE
// is set. The race detector makes such a test 8 to 12 times slower and
// cannot change what it proves: its figures are the same with or without
// it, and the concurrency of the code it drives is exercised by the
// race-enabled tests of those packages. Without the variable the test runs
// as usual, so that a plain `go test -race` still runs everything.
// test/run finds the tests for its pass without the race detector by this
// call (`testutil.SkipStatisticalUnderRace(` inside `func TestX`), so the
// call must be written in the test function itself.
func SkipStatisticalUnderRace(t testing.TB) {
	t.Helper()
	if Race && os.Getenv(EnvStatisticalWithoutRace) != "" {
		t.Skip("statistical test: $" + EnvStatisticalWithoutRace + " is set, it runs in test/run's pass without the race detector")
	}
}
