package testutil

import (
	"os"
	"strings"
	"testing"
)

// Fortunes returns the texts of fortune databases, Debian's fortunes
// package (short real-world texts filed by subject: "science", "food",
// "politics", …), which ./test/run installs, each on one line with single
// spaces (the databases' layouts, verse and indented attributions, differ
// by subject: a change of shape, not of content). It skips the test when
// the package is absent.
func Fortunes(t testing.TB, subjects ...string) []string {
	t.Helper()
	var out []string
	for _, name := range subjects {
		b, err := os.ReadFile("/usr/share/games/fortunes/" + name)
		if err != nil {
			t.Skipf("the fortunes package is not installed: %v", err)
		}
		for _, f := range strings.Split(string(b), "\n%\n") {
			if f = strings.Join(strings.Fields(f), " "); len(f) > 20 && len(f) < 1500 {
				out = append(out, f)
			}
		}
	}
	return out
}
