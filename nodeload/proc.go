package nodeload

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// cpuTimes are the aggregate counters of /proc/stat's "cpu" line, in ticks.
type cpuTimes struct {
	busy, total uint64
}

// readCPU reads the aggregate "cpu" line of root/stat.
func readCPU(root string) (cpuTimes, error) {
	b, err := os.ReadFile(filepath.Join(root, "stat"))
	if err != nil {
		return cpuTimes{}, err
	}
	return parseStat(b)
}

// parseStat parses the aggregate "cpu" line: user nice system idle iowait irq
// softirq steal [guest guest_nice]. guest and guest_nice are already counted
// in user and nice (proc(5)), so the total stops at steal; busy is the total
// less idle and iowait.
func parseStat(b []byte) (cpuTimes, error) {
	for line := range bytes.Lines(b) {
		f := bytes.Fields(line)
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 5 { // pre-2.5.41 kernels stop at idle; nothing older is plausible
			return cpuTimes{}, fmt.Errorf("stat: cpu line has %d fields", len(f)-1)
		}
		var t cpuTimes
		var idle uint64
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(string(s), 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("stat: cpu field %d: %w", i+1, err)
			}
			t.total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		t.busy = t.total - idle
		return t, nil
	}
	return cpuTimes{}, errors.New("stat: no aggregate cpu line")
}

// cpuShare is the busy share of the ticks between two readings, in [0,1].
// ok is false when no tick elapsed or a counter went backwards (iowait can,
// on some kernels), so that the caller keeps no made-up value.
func cpuShare(prev, cur cpuTimes) (share float64, ok bool) {
	if cur.total <= prev.total {
		return 0, false
	}
	dt := float64(cur.total - prev.total)
	if cur.busy < prev.busy {
		return 0, true
	}
	return min(float64(cur.busy-prev.busy)/dt, 1), true
}

// readMem reads root/meminfo and returns the used share of memory.
func readMem(root string) (float64, error) {
	b, err := os.ReadFile(filepath.Join(root, "meminfo"))
	if err != nil {
		return 0, err
	}
	return parseMeminfo(b)
}

// parseMeminfo returns 1 − MemAvailable/MemTotal. Kernels before 3.14 have no
// MemAvailable; MemFree + Buffers + Cached stands in for it there.
func parseMeminfo(b []byte) (float64, error) {
	var total, avail, free, buffers, cached uint64
	var haveTotal, haveAvail bool
	for line := range bytes.Lines(b) {
		key, rest, found := bytes.Cut(line, []byte(":"))
		if !found {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, haveTotal = &total, true
		case "MemAvailable":
			dst, haveAvail = &avail, true
		case "MemFree":
			dst = &free
		case "Buffers":
			dst = &buffers
		case "Cached":
			dst = &cached
		default:
			continue
		}
		f := bytes.Fields(rest) // "16318916 kB"
		if len(f) == 0 {
			return 0, fmt.Errorf("meminfo: %s: no value", key)
		}
		v, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("meminfo: %s: %w", key, err)
		}
		*dst = v
	}
	if !haveTotal || total == 0 {
		return 0, errors.New("meminfo: no MemTotal")
	}
	if !haveAvail {
		avail = free + buffers + cached
	}
	if avail >= total {
		return 0, nil
	}
	return 1 - float64(avail)/float64(total), nil
}
