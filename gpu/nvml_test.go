package gpu

import "testing"

// TestNVML reads the real devices where NVML initializes (a GPU node with
// its driver) and is skipped elsewhere; nodeload's TestNoGPUOnThisMachine
// checks the shares aggregated from them.
func TestNVML(t *testing.T) {
	r, err := Open()
	if err != nil {
		t.Skipf("NVML not available: no NVIDIA driver on this machine (%v)", err)
	}
	defer r.Close()
	devs, err := r.Read()
	if err != nil {
		t.Logf("some device values could not be read: %v", err)
	}
	if len(devs) == 0 {
		t.Fatal("NVML initialized but no device could be read")
	}
	for _, d := range devs {
		t.Logf("gpu %d: %s %s util %.2f mem %.0f/%.0f bytes %.0f°C %.1f W",
			d.Index, d.Name, d.UUID, d.Util, d.MemUsed, d.MemTotal, d.TempC, d.PowerW)
		if d.Util < 0 || d.Util > 1 {
			t.Errorf("gpu %d: utilization %v outside [0,1]", d.Index, d.Util)
		}
		if d.MemTotal <= 0 {
			t.Errorf("gpu %d: memory total %v, want > 0", d.Index, d.MemTotal)
		}
		if d.MemUsed < 0 || d.MemUsed > d.MemTotal {
			t.Errorf("gpu %d: memory used %v outside [0, total]", d.Index, d.MemUsed)
		}
		if d.Name == "" {
			t.Errorf("gpu %d: empty name", d.Index)
		}
	}
}
