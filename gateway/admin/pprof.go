package admin

import (
	"net/http/pprof"

	"github.com/gin-gonic/gin"
)

// pprofRoutes serves the Go runtime's profiles under /debug/pprof behind
// the admin token (admin.pprof, off by default: the paths are then
// unknown and answer 404). The handlers are net/http/pprof's, called
// directly: the package's registration on http.DefaultServeMux is never
// served by the gateway.
func (a *API) pprofRoutes(e *gin.Engine) {
	g := e.Group("/debug/pprof", a.auth)
	g.GET("/*name", func(c *gin.Context) {
		// Index serves the list at "/" and any named profile (heap,
		// allocs, goroutine, block, mutex, threadcreate) by its path.
		switch c.Param("name") {
		case "/cmdline":
			pprof.Cmdline(c.Writer, c.Request)
		case "/profile":
			pprof.Profile(c.Writer, c.Request)
		case "/symbol":
			pprof.Symbol(c.Writer, c.Request)
		case "/trace":
			pprof.Trace(c.Writer, c.Request)
		default:
			pprof.Index(c.Writer, c.Request)
		}
	})
	// pprof's symbol lookup also takes the addresses as a POST body.
	g.POST("/symbol", gin.WrapF(pprof.Symbol))
}
