package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/internal/app"
	"github.com/vigil-gw/vigil/sim"
)

// simFlags registers the simulator's flags on fs and returns a func that
// builds its options once fs is parsed.
func simFlags(fs *flag.FlagSet) func() sim.Options {
	d := sim.DefaultKnobs()
	// A zero-latency backend is not what anyone load-tests against; the
	// command line starts from a small, plausible GPU's pace.
	d.TTFT, d.ITL = 50*time.Millisecond, 10*time.Millisecond
	model := fs.String("model", "sim-model", "served model `name`")
	seed := fs.Int64("seed", 1, "random seed; responses are a pure function of seed, request body and knobs")
	created := fs.Int64("created", 0, "fixed `unix` time for the created field (0: now)")
	ttft := fs.Duration("ttft", d.TTFT, "time to first token")
	itl := fs.Duration("itl", d.ITL, "inter-token latency")
	stall := fs.Duration("stall", d.Stall, "extra delay, once per request, before the token after --stall-after tokens of each choice (0: none)")
	stallAfter := fs.Int("stall-after", d.StallAfter, "tokens of each choice generated before the --stall pause")
	errRate := fs.Float64("error-rate", d.ErrorRate, "share of requests answered with HTTP 500")
	hang := fs.Bool("hang", d.Hang, "accept every request and answer nothing until the client goes away (a wedged backend)")
	maxLen := fs.Int("max-model-len", d.MaxModelLen, "context length in tokens; longer requests get vLLM's 400 (0: no limit)")
	conf := fs.Float64("confidence", d.Confidence, "mean probability of the chosen token, in (0,1]")
	noise := fs.Float64("noise", d.Noise, "std-dev of quantization-like noise on logprobs")
	outTok := fs.Int("output-tokens", d.OutputTokens, "tokens generated when a request sets no max_tokens")
	seqs := fs.Int("max-num-seqs", d.MaxNumSeqs, "sequences served at once; more wait in a queue")
	prefill := fs.Duration("prefill-per-token", d.PrefillPerToken, "prefill time per prompt token not in the prefix cache, added to --ttft (0: none)")
	cacheBlocks := fs.Int("prefix-cache-blocks", d.PrefixCacheBlocks, "prefix cache capacity in blocks of --block-size tokens (0: prefix caching off)")
	blockSize := fs.Int("block-size", d.BlockSize, "tokens per KV cache block")
	lora := fs.String("lora-modules", "", "comma-separated `names` of LoRA adapters served on top of --model")
	anyModel := fs.Bool("any-model", false, "serve every model name a request gives, under that name (a server that routes by model)")
	return func() sim.Options {
		var adapters []string
		for _, a := range strings.Split(*lora, ",") {
			// vLLM's name=path form is accepted; the path is not read.
			if name, _, _ := strings.Cut(strings.TrimSpace(a), "="); name != "" {
				adapters = append(adapters, name)
			}
		}
		return sim.Options{Model: *model, Seed: *seed, Created: *created, LoRAModules: adapters, AnyModel: *anyModel, Knobs: sim.Knobs{
			TTFT: *ttft, ITL: *itl, Stall: *stall, StallAfter: *stallAfter, ErrorRate: *errRate, Hang: *hang,
			MaxModelLen: *maxLen, Confidence: *conf, Noise: *noise, OutputTokens: *outTok, MaxNumSeqs: *seqs,
			PrefillPerToken: *prefill, PrefixCacheBlocks: *cacheBlocks, BlockSize: *blockSize,
		}}
	}
}

func runSim(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "listen `address`")
	opts := simFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// A flag out of range is refused, naming its knob, rather than
	// clamped as Server.SetKnobs would.
	if err := opts().Knobs.Validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	log := newLogger(stderr, "info")
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := sim.New(opts())
	log.Info("simulator serving", "listen", ln.Addr().String(), "model", opts().Model)
	return app.ServeHandler(ctx, ln, s.Handler())
}
