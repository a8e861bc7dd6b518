package config_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
)

func TestRedacted(t *testing.T) {
	c := config.Default()
	c.Backends = []config.Backend{{
		Name: "a", URL: "http://user:pw@h:8000", Kind: "openai", Weight: 100, Models: []string{"m"},
		Agent: "http://h:9400", Metrics: "http://:pw@h:8000/metrics",
	}}
	c.State.Redis.URL = "redis://:hunter2@redis:6379/0"
	c.Alerts.AlertmanagerURL = "https://am:pw@am.internal:9093"
	c.Alerts.WebhookURL = "https://hooks.slack.com/services/T000/B000/XXXX?token=abc#frag"
	c.Admin.Token = "s3cret"
	orig := c
	orig.Backends = []config.Backend{c.Backends[0]}
	orig.Backends[0].Models = []string{"m"}

	want := c
	want.Backends = []config.Backend{{
		Name: "a", URL: "http://user:xxxxx@h:8000", Kind: "openai", Weight: 100, Models: []string{"m"},
		Agent: "http://h:9400", Metrics: "http://:xxxxx@h:8000/metrics",
	}}
	want.State.Redis.URL = "redis://:xxxxx@redis:6379/0"
	want.Alerts.AlertmanagerURL = "https://am:xxxxx@am.internal:9093"
	want.Alerts.WebhookURL = "https://hooks.slack.com/xxxxx?xxxxx"
	want.Admin.Token = "xxxxx"

	got := c.Redacted()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Redacted() mismatch (-want +got):\n%s", diff)
	}
	got.Backends[0].Models[0] = "changed"
	if diff := cmp.Diff(orig, c); diff != "" {
		t.Errorf("Redacted() changed its receiver (-want +got):\n%s", diff)
	}
}

func TestRedactedLeavesEmptyAndPlainValues(t *testing.T) {
	c := config.Default()
	c.Backends = []config.Backend{{Name: "a", URL: "http://h:1", Kind: "openai", Weight: 1}}
	c.Alerts.WebhookURL = "https://hooks.example.com/"
	if diff := cmp.Diff(c, c.Redacted()); diff != "" {
		t.Errorf("Redacted() mismatch (-want +got):\n%s", diff)
	}
	c.Backends[0].URL = "http://h:port"
	if got := c.Redacted().Backends[0].URL; got != "xxxxx" {
		t.Errorf("Redacted() of an unparsable URL = %q, want %q", got, "xxxxx")
	}
}
