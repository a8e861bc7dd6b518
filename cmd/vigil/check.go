package main

import (
	"flag"
	"fmt"
	"io"
)

// runCheck validates a config file as serve would use it.
func runCheck(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config `file` to validate (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *path == "" {
		fs.Usage()
		return usageError{"check: --config is required"}
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	if err := cfg.ValidateServe(); err != nil {
		return fmt.Errorf("%s is invalid:\n%w", *path, err)
	}
	fmt.Fprintf(stdout, "%s: ok (%d backends)\n", *path, len(cfg.Backends))
	return nil
}
