package gateway

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/gateway/accesslog"
)

// TestLogAccess: a request at the edge of what a duration holds still
// writes its one line.
func TestLogAccess(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{access: accesslog.New(slog.New(accesslog.NewHandler(&buf)))}
	x := benchCall()
	x.resp.latency = time.Duration(math.MaxInt64)
	s.logAccess(context.Background(), x, 200, "")
	if !bytes.Contains(buf.Bytes(), []byte(`"msg":"request"`)) || bytes.Count(buf.Bytes(), []byte("\n")) != 1 {
		t.Errorf("access line %q", buf.Bytes())
	}
}
