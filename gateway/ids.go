package gateway

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"syscall"

	"go.opentelemetry.io/otel/trace"
)

var jsonUnmarshal = json.Unmarshal

// requestID returns the client's X-Request-Id when it is short and printable,
// else a new random one.
func requestID(r *http.Request) string {
	if id := clientRequestID(r); id != "" {
		return id
	}
	var b [16]byte
	fillRandom(b[:])
	return hex.EncodeToString(b[:])
}

// clientRequestID returns the client's X-Request-Id when it is short and
// printable, else "".
func clientRequestID(r *http.Request) string {
	if v := r.Header["X-Request-Id"]; len(v) > 0 {
		if id := v[0]; id != "" && len(id) <= 128 && printable(id) {
			return id
		}
	}
	return ""
}

// ids returns the request id (as requestID) and the hex form of the
// trace id tid. A new request id and the trace id share one string: one
// allocation for both.
func ids(r *http.Request, tid trace.TraceID) (id, traceID string) {
	if id := clientRequestID(r); id != "" {
		return id, tid.String()
	}
	var b [16]byte
	fillRandom(b[:])
	var buf [64]byte
	hex.Encode(buf[:32], b[:])
	hex.Encode(buf[32:], tid[:])
	both := string(buf[:])
	return both[:32], both[32:]
}

func printable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func fillRandom(b []byte) {
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
}

// isDialError reports whether err means the backend could not be reached at
// all (refused or unreachable), as opposed to failing mid-request.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
