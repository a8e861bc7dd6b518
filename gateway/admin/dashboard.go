package admin

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
)

// The dashboard is one page and its assets (a script, a style sheet and the
// vendored uPlot), all embedded so that it works offline and matches the
// binary that serves it. The page and assets are public: the data comes from
// the admin API, which the page calls with the bearer token it reads from
// its URL fragment (/dashboard#token=SECRET).

//go:embed dashboard.html
var dashboardHTML []byte

//go:embed dashboard
var dashboardFiles embed.FS

// dashboardFile is one embedded file, ready to serve.
type dashboardFile struct {
	body        []byte
	contentType string
	etag        string
}

// dashboardPage and dashboardAssets are built once from the embedded
// files; the assets are keyed by their path under dashboard/.
var (
	dashboardPage   = newDashboardFile("dashboard.html", dashboardHTML)
	dashboardAssets = loadDashboardAssets()
)

// dashboardTypes are the assets' content types, fixed here rather than
// taken from the system's MIME tables, which differ between hosts (a
// Windows registry served .js as text/plain, golang/go#32350).
var dashboardTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".md":   "text/markdown; charset=utf-8",
	"":      "text/plain; charset=utf-8", // LICENSE
}

// dashboardCSP lets the page run only its own scripts and talk only to its
// own origin; inline styles stay allowed for uPlot's legend markers.
const dashboardCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func newDashboardFile(name string, body []byte) *dashboardFile {
	sum := sha256.Sum256(body)
	ct, ok := dashboardTypes[path.Ext(name)]
	if !ok {
		ct = "application/octet-stream"
	}
	return &dashboardFile{body: body, contentType: ct, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
}

func loadDashboardAssets() map[string]*dashboardFile {
	sub, err := fs.Sub(dashboardFiles, "dashboard")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	out := map[string]*dashboardFile{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		out[p] = newDashboardFile(p, body)
		return nil
	})
	if err != nil {
		panic(err)
	}
	return out
}

// dashboard serves the page (GET /dashboard).
func (a *API) dashboard(c *gin.Context) {
	c.Header("Content-Security-Policy", dashboardCSP)
	c.Header("Referrer-Policy", "no-referrer")
	serveDashboardFile(c, "dashboard.html", dashboardPage)
}

// dashboardAsset serves the page's scripts and styles
// (GET /dashboard/assets/*file).
func (a *API) dashboardAsset(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("file"), "/")
	f, ok := dashboardAssets[name]
	if !ok {
		apierror.Write(c.Writer, apierror.New(http.StatusNotFound, "invalid_request_error", "not_found",
			"no dashboard asset "+name, exchange.ClassBadRequest))
		return
	}
	serveDashboardFile(c, name, f)
}

// serveDashboardFile writes f with an ETag and "no-cache", so that browsers
// keep a copy but revalidate it (a 304 when unchanged): the URLs do not
// change between releases, the content does.
func serveDashboardFile(c *gin.Context, name string, f *dashboardFile) {
	h := c.Writer.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", f.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(c.Writer, c.Request, name, time.Time{}, bytes.NewReader(f.body))
}
