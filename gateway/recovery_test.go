package gateway

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestRecoveryKeepsAbort: a handler's http.ErrAbortHandler must reach
// net/http (the client sees an aborted response), while other panics become
// a 500 with an OpenAI error body.
func TestRecoveryKeepsAbort(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.Use(recovery(slog.New(slog.DiscardHandler)))
	e.GET("/abort", func(c *gin.Context) {
		c.Writer.WriteHeader(200)
		c.Writer.Write([]byte("partial"))
		c.Writer.Flush()
		panic(http.ErrAbortHandler)
	})
	e.GET("/boom", func(c *gin.Context) { panic("boom") })
	srv := httptest.NewUnstartedServer(e)
	srv.Config.ErrorLog = slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)
	srv.Start()
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/abort")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("aborted response read cleanly; the abort was swallowed")
	}
	resp.Body.Close()

	resp, err = http.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || len(b) == 0 || b[0] != '{' {
		t.Errorf("panic gave %d %q, want 500 with an error body", resp.StatusCode, b)
	}
}
