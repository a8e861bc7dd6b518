package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"

	"github.com/vigil-gw/vigil/internal/demo"
	"github.com/vigil-gw/vigil/internal/matrix"
)

// runDemo runs three simulated backends, a gateway in front of them with
// in-memory state and demo traffic and, unless --scenario none, tells a
// scripted incident (internal/demo) until ctx is done or the duration passes;
// --scenario matrix runs the fault-isolation matrix (internal/matrix) instead.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway listen `address`")
	duration := fs.Duration("duration", 0, "stop after this long (0: run until interrupted)")
	rps := fs.Float64("rps", 0, fmt.Sprintf("requests per second of demo traffic (default %d with a scenario, %d without; 0 with --scenario none: no traffic)", demo.ScenarioRPS, demo.PlainRPS))
	accessLog := fs.Bool("access-log", false, "print the gateway's access log to stdout")
	scenarioName := fs.String("scenario", demo.ScenarioIncident, "scripted `story`: "+demo.ScenarioIncident+" (faults injected one by one, each detected and alerted on), "+matrix.Scenario+" (each fault alone on a clean baseline with 3 seeds; prints the fault-isolation matrix; needs redis-server for its Redis row), or "+demo.ScenarioNone+" (plain traffic)")
	scale := fs.Float64("scale", 1, "matrix scenario: compress its durations by this factor (0.5: about half as long)")
	loop := fs.Bool("loop", false, "tell the scenario again and again until stopped")
	alertmanager := fs.String("alertmanager", "", "also send the alerts to the Alertmanager at `URL` (e.g. http://127.0.0.1:9093)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rpsSet := false
	fs.Visit(func(f *flag.Flag) { rpsSet = rpsSet || f.Name == "rps" })
	if fs.NArg() > 0 {
		return usageError{"demo: unexpected argument " + fs.Arg(0)}
	}
	if *duration < 0 {
		return usageError{fmt.Sprintf("demo: --duration must not be negative, got %v", *duration)}
	}
	if math.IsNaN(*rps) || math.IsInf(*rps, 0) || *rps < 0 || *rps > 1000 {
		return usageError{fmt.Sprintf("demo: --rps must be in [0, 1000], got %v", *rps)}
	}
	switch *scenarioName {
	case demo.ScenarioNone:
		if *loop {
			return usageError{"demo: --loop needs a scenario (not --scenario none)"}
		}
		if !rpsSet {
			*rps = demo.PlainRPS
		}
	case demo.ScenarioIncident, matrix.Scenario:
		if !rpsSet {
			*rps = demo.ScenarioRPS
		}
		if *rps == 0 {
			return usageError{"demo: a scenario needs traffic: --rps must be > 0 (or --scenario none)"}
		}
	default:
		return usageError{fmt.Sprintf("demo: unknown --scenario %q (known: %s, %s, %s)", *scenarioName, demo.ScenarioIncident, matrix.Scenario, demo.ScenarioNone)}
	}
	if *scenarioName == matrix.Scenario && *loop {
		return usageError{"demo: --loop does not apply to --scenario matrix"}
	}
	if math.IsNaN(*scale) || *scale < 0.25 || *scale > 4 {
		return usageError{fmt.Sprintf("demo: --scale must be in [0.25, 4], got %v", *scale)}
	}
	if *scenarioName == matrix.Scenario {
		return matrix.Run(ctx, matrix.Options{Duration: *duration, RPS: *rps, Scale: *scale, Out: stdout,
			Log: newLogger(stderr, "warn")})
	}
	var access *slog.Logger
	if *accessLog {
		access = slog.New(slog.NewJSONHandler(stdout, nil))
	}
	return demo.Run(ctx, demo.Options{Listen: *listen, Duration: *duration, RPS: *rps, Scenario: *scenarioName, Loop: *loop,
		Alertmanager: *alertmanager, Out: stdout, Log: newLogger(stderr, "warn"), Access: access,
		Version: buildVersion()})
}
