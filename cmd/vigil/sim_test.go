package main

import (
	"flag"
	"io"
	"strings"
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

// TestSimPrefixCacheFlags: the prefix cache flags reach the knobs, the
// LoRA adapters the options (vLLM's name=path form included), and a flag
// out of range stops the command, naming its knob.
func TestSimPrefixCacheFlags(t *testing.T) {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	opts := simFlags(fs)
	if err := fs.Parse([]string{"--prefill-per-token", "200us", "--prefix-cache-blocks", "4096", "--block-size", "32",
		"--lora-modules", "sql-lora, chat-lora=/models/chat,,"}); err != nil {
		t.Fatal(err)
	}
	o := opts()
	k := o.Knobs
	if k.PrefillPerToken != 200*time.Microsecond || k.PrefixCacheBlocks != 4096 || k.BlockSize != 32 {
		t.Errorf("knobs: prefill %v, blocks %d, block size %d", k.PrefillPerToken, k.PrefixCacheBlocks, k.BlockSize)
	}
	if d := cmp.Diff([]string{"sql-lora", "chat-lora"}, o.LoRAModules); d != "" {
		t.Errorf("LoRA modules (-want +got):\n%s", d)
	}

	fs = flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if def := simFlags(fs)(); def.Knobs.BlockSize != 16 || def.Knobs.PrefixCacheBlocks != 0 || def.LoRAModules != nil {
		t.Errorf("defaults: %+v", def)
	}

	err := runSim(t.Context(), []string{"--listen", "127.0.0.1:0", "--block-size", "0"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "block_size: must be in [1, 4096], got 0") {
		t.Errorf("--block-size 0: %v", err)
	}
}
