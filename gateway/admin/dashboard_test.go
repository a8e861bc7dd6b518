package admin

import (
	"bytes"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// The page and every asset it links are served without the admin token,
// with fixed content types, and revalidated by ETag.
func TestDashboardServed(t *testing.T) {
	gw := startAPI(t, Options{Token: "s3cret"})

	resp, page := testutil.GetResp(t, gw.URL+"/dashboard")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/dashboard: %d", resp.StatusCode)
	}
	for h, want := range map[string]string{
		"Content-Type":           "text/html; charset=utf-8",
		"Cache-Control":          "no-cache",
		"X-Content-Type-Options": "nosniff",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("/dashboard %s = %q, want %q", h, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("/dashboard Content-Security-Policy = %q", csp)
	}
	if !bytes.Contains(page, []byte("<title>Vigil</title>")) {
		t.Errorf("/dashboard body has no title:\n%s", page)
	}

	// The page links exactly these assets, all served.
	var linked []string
	for _, m := range regexp.MustCompile(`(?:src|href)="(/dashboard/assets/[^"]+)"`).FindAllSubmatch(page, -1) {
		linked = append(linked, string(m[1]))
	}
	wantLinked := []string{
		"/dashboard/assets/vendor/uPlot.min.css",
		"/dashboard/assets/dashboard.css",
		"/dashboard/assets/vendor/uPlot.iife.min.js",
		"/dashboard/assets/dashboard.js",
	}
	if diff := cmp.Diff(wantLinked, linked); diff != "" {
		t.Errorf("assets linked from the page (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		path, contentType string
	}{
		{"/dashboard/assets/dashboard.js", "text/javascript; charset=utf-8"},
		{"/dashboard/assets/dashboard.css", "text/css; charset=utf-8"},
		{"/dashboard/assets/vendor/uPlot.iife.min.js", "text/javascript; charset=utf-8"},
		{"/dashboard/assets/vendor/uPlot.min.css", "text/css; charset=utf-8"},
		{"/dashboard/assets/vendor/LICENSE", "text/plain; charset=utf-8"},
		{"/dashboard/assets/vendor/README.md", "text/markdown; charset=utf-8"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, body := testutil.GetResp(t, gw.URL+tc.path)
			if resp.StatusCode != http.StatusOK || len(body) == 0 {
				t.Fatalf("status %d, %d bytes", resp.StatusCode, len(body))
			}
			if got := resp.Header.Get("Content-Type"); got != tc.contentType {
				t.Errorf("Content-Type = %q, want %q", got, tc.contentType)
			}
			etag := resp.Header.Get("ETag")
			if resp.Header.Get("Cache-Control") != "no-cache" || etag == "" {
				t.Errorf("Cache-Control %q, ETag %q: want no-cache and an ETag", resp.Header.Get("Cache-Control"), etag)
			}
			if resp, _ := testutil.GetResp(t, gw.URL+tc.path, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
				t.Errorf("with If-None-Match: status %d, want 304", resp.StatusCode)
			}
		})
	}

	for _, p := range []string{"/dashboard/assets/nope.js", "/dashboard/assets/", "/dashboard/assets/../dashboard.go", "/dashboard/assets/vendor"} {
		if resp, _ := testutil.GetResp(t, gw.URL+p); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: status %d, want 404", p, resp.StatusCode)
		}
	}

	// The data behind the page still needs the token.
	if resp, _ := testutil.GetResp(t, gw.URL+"/admin/backends"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/admin/backends without a token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := testutil.GetResp(t, gw.URL+"/admin/backends", "Authorization", "Bearer s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("/admin/backends with the token: %d, want 200", resp.StatusCode)
	}
}

// The vendored uPlot is the pinned release, with its license.
func TestDashboardVendoredUPlot(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"vendor/uPlot.iife.min.js", []string{"/*! https://github.com/leeoniya/uPlot (v1.6.32) */", "var uPlot="}},
		{"vendor/uPlot.min.css", []string{".uplot"}},
		{"vendor/LICENSE", []string{"The MIT License", "Leon Sorokin"}},
		{"vendor/README.md", []string{"uplot@1.6.32"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := dashboardAssets[tc.name]
			if !ok {
				t.Fatalf("%s is not embedded", tc.name)
			}
			for _, w := range tc.want {
				if !bytes.Contains(f.body, []byte(w)) {
					t.Errorf("%s lacks %q", tc.name, w)
				}
			}
		})
	}
}

// The page carries the ids a browser test relies on, and its script sends
// the fragment's token with every admin fetch.
func TestDashboardContract(t *testing.T) {
	page := string(dashboardHTML)
	for _, id := range []string{
		"tile-drift", "tile-confidence", "tile-latency", "tile-output", "tile-precision",
		"chart-drift", "chart-confidence", "chart-output", "chart-latency", "chart-precision",
		"chart-backends-weight", "chart-backends-load", "chart-backends-prefix", "chart-calibration",
		"backends", "alerts", "notifications",
	} {
		if !strings.Contains(page, `id="`+id+`"`) {
			t.Errorf("the page has no element with id %q", id)
		}
	}
	if n := strings.Count(page, "data-state="); n != 5 {
		t.Errorf("%d tiles with data-state, want 5", n)
	}
	js := string(dashboardAssets["dashboard.js"].body)
	for _, w := range []string{
		`location.hash`, `params.get("token")`, `Authorization: "Bearer " + token`, `fetch(path, { headers`,
		`"/admin/signals"`, `"/admin/backends"`, `"/admin/alerts"`, `"/admin/notifications"`, `"/admin/history?since="`,
		`window.vigilCharts = charts`, `tile.dataset.state = state`,
	} {
		if !strings.Contains(js, w) {
			t.Errorf("dashboard.js lacks %q", w)
		}
	}
	if strings.Contains(page, "<script>") {
		t.Error("the page has an inline script, which its Content-Security-Policy forbids")
	}
}
