package stats

import (
	"testing"
	"time"
)

func TestDevTime(t *testing.T) {
	for _, c := range [][3]float64{{10000, 9999, 0.02}, {10000, 9999, 0.5}, {10000, 9999, 1}, {10000, 2000, 0.5}} {
		s := time.Now()
		_, p, _ := ksExact(int(c[0]), int(c[1]), c[2])
		t.Log(c, p, time.Since(s))
	}
	for _, c := range [][2]float64{{1000000, 0.01}, {1000000, 0.0017}, {100000, 0.003}, {100000, 0.006}} {
		s := time.Now()
		p := kstwoSF(int(c[0]), c[1])
		t.Log(c, p, time.Since(s))
	}
}
