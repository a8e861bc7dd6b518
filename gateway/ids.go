package gateway

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"syscall"
)

var jsonUnmarshal = json.Unmarshal

// requestID returns the client's X-Request-Id when it is short and printable,
// else a new random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 128 && printable(id) {
		return id
	}
	var b [16]byte
	fillRandom(b[:])
	return hex.EncodeToString(b[:])
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

// traceContext continues the W3C trace of an incoming traceparent, or starts
// one, and returns the trace id (32 hex) and the traceparent to send
// upstream, which names a new span id of the gateway's.
func traceContext(r *http.Request) (traceID, upstream string) {
	flags := "01"
	if tp := r.Header.Get("Traceparent"); validTraceparent(tp) {
		traceID, flags = tp[3:35], tp[53:55]
	} else {
		var b [16]byte
		fillRandom(b[:])
		traceID = hex.EncodeToString(b[:])
	}
	var span [8]byte
	fillRandom(span[:])
	return traceID, "00-" + traceID + "-" + hex.EncodeToString(span[:]) + "-" + flags
}

// validTraceparent checks the version-00 form: 00-<32 hex>-<16 hex>-<2 hex>,
// with non-zero trace and parent ids.
func validTraceparent(tp string) bool {
	if len(tp) != 55 || tp[:3] != "00-" || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	if !isLowerHex(tp[3:35]) || !isLowerHex(tp[36:52]) || !isLowerHex(tp[53:55]) {
		return false
	}
	return tp[3:35] != "00000000000000000000000000000000" && tp[36:52] != "0000000000000000"
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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
