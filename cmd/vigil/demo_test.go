package main

import (
	"io"
	"strings"
	"testing"
)

// TestScenarioFlags: bad demo flags are usage errors that say what is
// wrong, never a panic, and start nothing.
func TestScenarioFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the error
	}{
		{[]string{"--scenario", "bogus"}, `unknown --scenario "bogus"`},
		{[]string{"--scenario", "none", "--loop"}, "--loop needs a scenario"},
		{[]string{"--scenario", "matrix", "--loop"}, "--loop does not apply to --scenario matrix"},
		{[]string{"--scenario", "matrix", "--scale", "0.1"}, "--scale must be in [0.25, 4]"},
		{[]string{"--rps", "-1"}, "--rps must be in [0, 1000]"},
		{[]string{"--rps", "NaN"}, "--rps must be in [0, 1000]"},
		{[]string{"--rps", "0"}, "a scenario needs traffic"},
		{[]string{"--duration", "-1s"}, "--duration must not be negative"},
		{[]string{"extra"}, "unexpected argument extra"},
		{[]string{"--listen", "127.0.0.1:0", "--alertmanager", "ftp://am:9093"}, "alerts.alertmanager_url"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := run(t.Context(), append([]string{"demo"}, tt.args...), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
