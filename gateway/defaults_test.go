package gateway

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/config"
)

// TestServerTakesConfigValues: the gateway's transport and side client run
// with the limits of its configuration, config.Default()'s or others,
// never with values of its own.
func TestServerTakesConfigValues(t *testing.T) {
	other := config.Default()
	other.Limits.MaxIdleConns, other.Limits.MaxIdleConnsPerHost, other.Limits.SideTimeout = 7, 3, 4*time.Second
	for name, cfg := range map[string]config.Config{"default": config.Default(), "other": other} {
		t.Run(name, func(t *testing.T) {
			cfg.Backends = []config.Backend{{Name: "a", URL: "http://127.0.0.1:1", Kind: config.KindOpenAI, Weight: 1}}
			s, err := New(Options{Config: cfg, Log: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			tr, ok := s.transport.(*http.Transport)
			if !ok {
				t.Fatalf("transport %T, want *http.Transport", s.transport)
			}
			if tr.MaxIdleConns != cfg.Limits.MaxIdleConns || tr.MaxIdleConnsPerHost != cfg.Limits.MaxIdleConnsPerHost {
				t.Errorf("idle connections %d, %d per host; want limits.max_idle_conns %d, limits.max_idle_conns_per_host %d",
					tr.MaxIdleConns, tr.MaxIdleConnsPerHost, cfg.Limits.MaxIdleConns, cfg.Limits.MaxIdleConnsPerHost)
			}
			if tr.ResponseHeaderTimeout != cfg.Limits.UpstreamTimeout {
				t.Errorf("response header timeout %v, want limits.upstream_timeout %v", tr.ResponseHeaderTimeout, cfg.Limits.UpstreamTimeout)
			}
			if s.client.Timeout != cfg.Limits.SideTimeout {
				t.Errorf("side client timeout %v, want limits.side_timeout %v", s.client.Timeout, cfg.Limits.SideTimeout)
			}
		})
	}
}
