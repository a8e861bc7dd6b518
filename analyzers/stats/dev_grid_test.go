package stats

import (
	"encoding/json"
	"math"
	"os"
	"testing"
)

func relErr(got, want float64) float64 {
	if got == want {
		return 0
	}
	return math.Abs(got-want) / math.Max(math.Abs(want), 1e-300)
}

func TestDevGrid(t *testing.T) {
	raw, err := os.ReadFile("/tmp/dev/grid.json")
	if err != nil {
		t.Skip()
	}
	var g struct {
		Kstwo   [][4]float64 `json:"kstwo"`
		Smirnov [][3]float64 `json:"smirnov"`
		Exact   [][6]any     `json:"exact"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for _, c := range g.Kstwo {
		n, x := int(c[0]), c[1]
		sf, cdf := kstwoSF(n, x), kstwoCDF(n, x)
		e1, e2 := relErr(sf, c[2]), relErr(cdf, c[3])
		if (e1 > 1e-9 && math.Abs(sf-c[2]) > 1e-300) || (e2 > 1e-9 && math.Abs(cdf-c[3]) > 1e-300) {
			t.Errorf("n=%d x=%v nx2=%.3g sf=%v want %v (%.2g) cdf=%v want %v (%.2g)", n, x, float64(n)*x*x, sf, c[2], e1, cdf, c[3], e2)
		}
		if c[2] > 1e-300 {
			worst = max(worst, e1)
		}
	}
	t.Logf("kstwo worst rel %.3g", worst)
	worst = 0
	for _, c := range g.Smirnov {
		got := smirnovSF(int(c[0]), c[1])
		e := relErr(got, c[2])
		if e > 1e-9 && c[2] > 1e-300 {
			t.Errorf("smirnov n=%v x=%v got %v want %v (%.2g)", c[0], c[1], got, c[2], e)
		}
		if c[2] > 1e-300 {
			worst = max(worst, e)
		}
	}
	t.Logf("smirnov worst rel %.3g", worst)
	worst = 0
	for _, c := range g.Exact {
		n1, n2, d := int(c[0].(float64)), int(c[1].(float64)), c[2].(float64)
		dd, p, ok := ksExact(n1, n2, d)
		if ok != c[3].(bool) || dd != c[4].(float64) || relErr(p, c[5].(float64)) > 1e-9 {
			t.Errorf("exact %d %d %v: got %v %v %v want %v %v %v", n1, n2, d, ok, dd, p, c[3], c[4], c[5])
		}
		worst = max(worst, relErr(p, c[5].(float64)))
	}
	t.Logf("exact worst rel %.3g", worst)
}
