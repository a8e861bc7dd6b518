package main

import (
	"flag"
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/sim"
)

// TestSimFlags: the stall flags reach the simulator's knobs; without them
// there is no stall.
func TestSimFlags(t *testing.T) {
	tests := []struct {
		args             []string
		stall            time.Duration
		stallAfter       int
		wantTTFT, wantIT time.Duration
	}{
		{nil, 0, 0, 50 * time.Millisecond, 10 * time.Millisecond},
		{[]string{"--stall", "2s", "--stall-after", "8"}, 2 * time.Second, 8, 50 * time.Millisecond, 10 * time.Millisecond},
		{[]string{"--itl", "5ms", "--stall=750ms"}, 750 * time.Millisecond, 0, 50 * time.Millisecond, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("sim", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		opts := simFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		k := opts().Knobs
		want := sim.Knobs{TTFT: tt.wantTTFT, ITL: tt.wantIT, Stall: tt.stall, StallAfter: tt.stallAfter}
		got := sim.Knobs{TTFT: k.TTFT, ITL: k.ITL, Stall: k.Stall, StallAfter: k.StallAfter}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%v (-want +got):\n%s", tt.args, d)
		}
		if err := k.Validate(); err != nil {
			t.Errorf("%v: %v", tt.args, err)
		}
	}
}
