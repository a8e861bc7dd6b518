// Command vigil is the Vigil gateway and its companions: the inference
// backend simulator and a demo that runs both.
//
//	vigil serve   [--config FILE] [--listen ADDR] [--backend URL]... [--redis URL]
//	vigil sim     [--listen ADDR] [--model NAME] [--ttft DUR] [--itl DUR] [--stall DUR --stall-after N] ...
//	vigil agent   [--listen ADDR] [--interval DUR] [--allow-override]
//	vigil demo    [--scenario incident|matrix|none] [--loop] [--scale F] [--alertmanager URL] [--listen ADDR] [--rps N] [--duration DUR]
//	vigil check   --config FILE
//	vigil version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

const usage = `Vigil: an observability gateway for LLM inference.

Usage:
  vigil serve   [--config FILE] [--listen ADDR] [--backend URL]... [--redis URL]
  vigil sim     [--listen ADDR] [--model NAME] [--ttft DUR] [--itl DUR] [--stall DUR --stall-after N] [--error-rate F] ...
  vigil agent   [--listen ADDR] [--interval DUR] [--allow-override]
  vigil demo    [--scenario incident|matrix|none] [--loop] [--scale F] [--alertmanager URL] [--listen ADDR] [--rps N] [--duration DUR]
  vigil check   --config FILE
  vigil version

Run "vigil COMMAND --help" for a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; a second one ends the
	// process at once (the default action, restored by stop).
	context.AfterFunc(ctx, stop)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) { // -h printed the usage: success
		fmt.Fprintln(os.Stderr, "vigil:", err)
		os.Exit(exitCode(err))
	}
}

// exitCode is 2 for usage errors (flag parsing included), 1 for everything else.
func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "sim":
		return runSim(ctx, rest, stderr)
	case "agent":
		return runAgent(ctx, rest, stderr)
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "check":
		return runCheck(rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "vigil", buildVersion())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

// buildVersion is the version that -ldflags set, or else the one the build
// info gives.
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(version, bi)
}

// formatVersion picks the version to report: ldflags when set; else the main
// module's version from bi, which go build stamps from VCS since Go 1.24; else,
// when bi has only VCS settings (older toolchains, or a stamp without a
// version), "devel-" and the revision's first 12 hex digits, "-dirty" for
// uncommitted changes and the commit time in parentheses; else "(devel)"
// (-buildvcs=false, go run, go test). bi may be nil.
func formatVersion(ldflags string, bi *debug.BuildInfo) string {
	if ldflags != "" {
		return ldflags
	}
	if bi == nil {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, at string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	v := "devel-" + rev[:min(len(rev), 12)]
	if dirty {
		v += "-dirty"
	}
	if at != "" {
		v += " (" + at + ")"
	}
	return v
}
