package main

import (
	"runtime/debug"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	const rev = "241c80233827ab49fc8c198c0fdb65deb75f1039"
	info := func(version string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Path: "github.com/vigil-gw/vigil", Version: version}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	vcs := []string{"vcs", "git", "vcs.revision", rev, "vcs.time", "2026-12-01T14:37:34Z"}
	tests := []struct {
		name    string
		ldflags string
		bi      *debug.BuildInfo
		want    string
	}{
		{"ldflags wins", "v1.2.3", info("v0.0.0-20261201143734-241c80233827", vcs...), "v1.2.3"},
		{"no build info", "", nil, "(devel)"},
		{"module version", "", info("v1.4.0"), "v1.4.0"},
		{"stamped pseudo-version", "", info("v0.0.0-20261201143734-241c80233827+dirty", vcs...), "v0.0.0-20261201143734-241c80233827+dirty"},
		{"devel without vcs", "", info("(devel)"), "(devel)"},
		{"empty without vcs", "", info(""), "(devel)"},
		{"devel, clean", "", info("(devel)", append(vcs, "vcs.modified", "false")...), "devel-241c80233827 (2026-12-01T14:37:34Z)"},
		{"devel, dirty", "", info("(devel)", append(vcs, "vcs.modified", "true")...), "devel-241c80233827-dirty (2026-12-01T14:37:34Z)"},
		{"empty version, revision only", "", info("", "vcs.revision", rev), "devel-241c80233827"},
		{"short revision", "", info("(devel)", "vcs.revision", "abc123", "vcs.modified", "true"), "devel-abc123-dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := formatVersion(tt.ldflags, tt.bi); got != tt.want {
				t.Errorf("formatVersion(%q, …) = %q, want %q", tt.ldflags, got, tt.want)
			}
		})
	}
}
