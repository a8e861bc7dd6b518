package admin

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestPprof checks that /debug/pprof is served only when admin.pprof is
// on, and then only with the admin token.
func TestPprof(t *testing.T) {
	auth := []string{"Authorization", "Bearer s3cret"}

	t.Run("off", func(t *testing.T) {
		gw := startAPI(t, Options{Token: "s3cret"})
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/profile?seconds=1"} {
			if code, body := testutil.Get(t, gw.URL+path, auth...); code != http.StatusNotFound {
				t.Errorf("GET %s with pprof off: %d %s, want 404", path, code, body)
			}
		}
	})
	t.Run("on", func(t *testing.T) {
		gw := startAPI(t, Options{Token: "s3cret", Pprof: true})
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/cmdline"} {
			if code, _ := testutil.Get(t, gw.URL+path); code != http.StatusUnauthorized {
				t.Errorf("GET %s without the token: %d, want 401", path, code)
			}
			if code, _ := testutil.Get(t, gw.URL+path, "Authorization", "Bearer wrong"); code != http.StatusUnauthorized {
				t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
			}
		}
		tests := []struct{ path, want string }{
			{"/debug/pprof/heap?debug=1", "heap profile:"},
			{"/debug/pprof/goroutine?debug=1", "goroutine profile:"},
			{"/debug/pprof/", "Types of profiles available"},
			{"/debug/pprof/cmdline", ""},
		}
		for _, tc := range tests {
			code, body := testutil.Get(t, gw.URL+tc.path, auth...)
			if code != http.StatusOK || !bytes.Contains(body, []byte(tc.want)) {
				t.Errorf("GET %s with the token: %d %.200q, want 200 with %q", tc.path, code, body, tc.want)
			}
		}
		// Binary profiles (allocs here; a CPU profile takes its seconds).
		if code, body := testutil.Get(t, gw.URL+"/debug/pprof/allocs", auth...); code != http.StatusOK || len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
			t.Errorf("GET /debug/pprof/allocs: %d, %d bytes, want a gzipped profile", code, len(body))
		}
	})
	t.Run("on without a token", func(t *testing.T) {
		gw := startAPI(t, Options{Pprof: true})
		if code, _ := testutil.Get(t, gw.URL+"/debug/pprof/heap?debug=1"); code != http.StatusOK {
			t.Errorf("GET /debug/pprof/heap with no admin.token set: %d, want 200 (open, like /admin)", code)
		}
	})
}
