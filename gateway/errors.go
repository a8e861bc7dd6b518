package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/vigil-gw/vigil/exchange"
)

// statusClientClosed is the status recorded (never sent) when the client went
// away first, as nginx logs it.
const statusClientClosed = 499

// apiError is a gateway-made error, written as an OpenAI error body.
type apiError struct {
	status  int
	typ     string
	code    string
	message string
	class   exchange.ErrorClass
}

func (e *apiError) Error() string { return e.message }

func badRequest(msg string) *apiError {
	return &apiError{http.StatusBadRequest, "invalid_request_error", "invalid_request", msg, exchange.ClassBadRequest}
}

// writeError writes e as {"error": {"message", "type", "code"}}.
func writeError(w http.ResponseWriter, e *apiError) {
	body, _ := json.Marshal(struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    string `json:"code"`
		} `json:"error"`
	}{Error: struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	}{e.message, e.typ, e.code}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.status)
	w.Write(body)
}

// upstreamError maps an error from the round trip to the backend to the
// response the client gets: 504 on timeout, 499 (nothing sent) when the
// client cancelled, 502 otherwise.
func upstreamError(ctx context.Context, err error) *apiError {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return &apiError{statusClientClosed, "client_closed", "client_closed", "client closed the request", exchange.ClassClientCancel}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return &apiError{http.StatusGatewayTimeout, "upstream_timeout", "upstream_timeout", "upstream timed out", exchange.ClassTimeout}
	}
	return &apiError{http.StatusBadGateway, "upstream_error", "upstream_unavailable", "upstream request failed", exchange.ClassUpstream5xx}
}
