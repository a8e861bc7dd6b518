package admin

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// TestAdminWithoutAnalyzers: an API built without analyzers says so
// rather than inventing a picture.
func TestAdminWithoutAnalyzers(t *testing.T) {
	gw := startAPI(t, Options{})
	if code, body := testutil.Get(t, gw.URL+"/admin/signals"); code != http.StatusNotImplemented || !strings.Contains(string(body), `"code":"not_enabled"`) {
		t.Errorf("/admin/signals without analyzers: %d %s", code, body)
	}
	if code, body := testutil.Get(t, gw.URL+"/admin/alerts"); code != 200 || string(body) != "[]" {
		t.Errorf("/admin/alerts without analyzers: %d %s", code, body)
	}
}
