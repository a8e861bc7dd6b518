package config

import (
	"net/url"
	"slices"
)

// redacted replaces a secret in Redacted's output, as [url.URL.Redacted] does.
const redacted = "xxxxx"

// Redacted returns a copy of c fit for logging: the admin token and the password
// of every URL are masked, and so are the path and query of the alert webhook URL,
// which for many services (Slack, Discord) is itself the secret. A URL that does not
// parse is masked whole. c is not changed.
func (c Config) Redacted() Config {
	r := c
	if c.Backends != nil {
		r.Backends = make([]Backend, len(c.Backends))
		for i, b := range c.Backends {
			b.Models = slices.Clone(b.Models)
			b.URL = redactURL(b.URL)
			b.Agent = redactURL(b.Agent)
			b.Metrics = redactURL(b.Metrics)
			r.Backends[i] = b
		}
	}
	r.State.Redis.URL = redactURL(c.State.Redis.URL)
	r.Alerts.AlertmanagerURL = redactURL(c.Alerts.AlertmanagerURL)
	r.Alerts.WebhookURL = redactWebhook(c.Alerts.WebhookURL)
	if r.Admin.Token != "" {
		r.Admin.Token = redacted
	}
	return r
}

func redactURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	return u.Redacted()
}

func redactWebhook(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil {
		return redacted
	}
	if u.Path != "" && u.Path != "/" {
		u.Path, u.RawPath = "/"+redacted, ""
	}
	if u.RawQuery != "" {
		u.RawQuery = redacted
	}
	u.Fragment, u.RawFragment = "", ""
	return u.Redacted()
}
