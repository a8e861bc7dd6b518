package gateway

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/internal/testutil"
)

// heldLog is an access-log handler whose lines wait until release is
// closed, having said on entered that one came: the request's
// bookkeeping, stopped in the middle.
type heldLog struct{ entered, release chan struct{} }

func (h heldLog) Enabled(context.Context, slog.Level) bool { return true }
func (h heldLog) Handle(context.Context, slog.Record) error {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
	return nil
}
func (h heldLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h heldLog) WithGroup(string) slog.Handler      { return h }

// TestAnswerBeforeBookkeeping: a whole non-streamed answer reaches the
// client while the request's bookkeeping (here its access-log line) is
// still under way, not when the handler returns after it.
func TestAnswerBeforeBookkeeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &testutil.Network{}
		_, url := startSimIn(t, n, "m", nil)
		held := heldLog{entered: make(chan struct{}, 1), release: make(chan struct{})}
		gw := startGatewayIn(t, n, []config.Backend{backend("a", url)}, nil, func(o *Options) {
			o.AccessLog = slog.New(held)
		})
		release := sync.OnceFunc(func() { close(held.release) })
		defer release()
		type answer struct {
			size int64
			body string
			err  error
		}
		got := make(chan answer, 1)
		go func() {
			resp, err := gw.hc.Post(gw.URL+"/v1/chat/completions", "application/json",
				strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
			if err != nil {
				got <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			got <- answer{resp.ContentLength, string(b), err}
		}()
		// Once the handler waits in the access log and every goroutine of
		// the bubble is blocked, the client has read what was sent.
		<-held.entered
		synctest.Wait()
		select {
		case a := <-got:
			if a.err != nil || !strings.Contains(a.body, `"chat.completion"`) {
				t.Fatalf("the answer: %v, %q", a.err, a.body)
			}
			if a.size <= 0 {
				t.Errorf("Content-Length %d: a sized answer stays sized", a.size)
			}
		default:
			release()
			a := <-got
			t.Fatalf("the answer was not complete at the client before the request's access-log line was written (then: size %d, %v, %.80q)", a.size, a.err, a.body)
		}
	})
}
