package main

import (
	"runtime/debug"
	"testing"
)

// TestSetDefaultGC: without GOGC in the environment the collector's target
// becomes defaultGOGC; with it, the runtime's reading of GOGC stands.
func TestSetDefaultGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := setDefaultGC(getenv); got != "200" {
		t.Errorf("without GOGC: %q, want 200", got)
	}
	if p := debug.SetGCPercent(100); p != defaultGOGC {
		t.Errorf("GC percent %d, want %d", p, defaultGOGC)
	}
	env["GOGC"] = "off"
	if got := setDefaultGC(getenv); got != "off" {
		t.Errorf("with GOGC=off: %q, want off", got)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("GC percent %d after GOGC=off, want it untouched (100)", p)
	}
}
