package nodeload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseStat(t *testing.T) {
	fixture, err := os.ReadFile("testdata/stat1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		in      string
		want    cpuTimes
		wantErr string
	}{
		{"fixture", string(fixture), cpuTimes{busy: 150, total: 1000}, ""},
		// guest and guest_nice are inside user and nice: not added again.
		{"guest excluded", "cpu  10 0 0 80 0 0 0 10 5 5\n", cpuTimes{busy: 20, total: 100}, ""},
		{"no steal (old kernel)", "cpu  10 5 5 70 10\n", cpuTimes{busy: 20, total: 100}, ""},
		{"per-cpu lines only", "cpu0 1 2 3 4 5\n", cpuTimes{}, "no aggregate cpu line"},
		{"too few fields", "cpu  1 2 3\n", cpuTimes{}, "3 fields"},
		{"bad number", "cpu  1 2 x 4 5 6 7 8\n", cpuTimes{}, "cpu field 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCPUShare(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur cpuTimes
		want      float64
		wantOK    bool
	}{
		{"half busy", cpuTimes{150, 1000}, cpuTimes{650, 2000}, 0.5, true},
		{"idle", cpuTimes{150, 1000}, cpuTimes{150, 1100}, 0, true},
		{"all busy", cpuTimes{0, 0}, cpuTimes{100, 100}, 1, true},
		{"no tick elapsed", cpuTimes{150, 1000}, cpuTimes{150, 1000}, 0, false},
		{"total went backwards", cpuTimes{150, 1000}, cpuTimes{100, 900}, 0, false},
		// iowait can decrease on some kernels, making busy look smaller.
		{"busy went backwards", cpuTimes{150, 1000}, cpuTimes{140, 1100}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cpuShare(tt.prev, tt.cur)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("cpuShare = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name    string
		in      string
		want    float64
		wantErr string
	}{
		{"MemAvailable", read("meminfo"), 0.75, ""},                       // 1 − 4000000/16000000
		{"old kernel: free+buffers+cached", read("meminfo-old"), 0.5, ""}, // 1 − 500/1000
		{"available above total", "MemTotal: 100 kB\nMemAvailable: 200 kB\n", 0, ""},
		{"no MemTotal", "MemFree: 100 kB\n", 0, "no MemTotal"},
		{"zero MemTotal", "MemTotal: 0 kB\n", 0, "no MemTotal"},
		{"bad value", "MemTotal: lots kB\n", 0, "MemTotal"},
		{"empty value", "MemTotal:\n", 0, "no value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("used share (-want +got):\n%s", diff)
			}
		})
	}
}
