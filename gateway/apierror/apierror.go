// Package apierror holds the errors the gateway makes itself and writes to
// clients as an OpenAI error body (an Anthropic one on the Messages API's
// routes), and the mapping of a failed round trip to
// the status a client gets.
package apierror

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"

	"github.com/vigil-gw/vigil/exchange"
)

// StatusClientClosed is the status recorded (never sent) when the client went
// away first, as nginx logs it.
const StatusClientClosed = 499

// Error is a gateway-made error, written as an OpenAI error body. Its fields
// may be changed by the gateway before it is written (a message naming the
// backend, say); an Error is not shared between requests.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	Class   exchange.ErrorClass
}

func (e *Error) Error() string { return e.Message }

// BadRequest is a 400 invalid_request_error with msg.
func BadRequest(msg string) *Error {
	return New(http.StatusBadRequest, "invalid_request_error", "invalid_request", msg, exchange.ClassBadRequest)
}

// body is the OpenAI error shape, {"error": {"message", "type", "code"}}.
type body struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    string `json:"code"`
	} `json:"error"`
}

// Write writes e as {"error": {"message", "type", "code"}} with e's status.
func Write(w http.ResponseWriter, e *Error) {
	var v body
	v.Error.Message, v.Error.Type, v.Error.Code = e.Message, e.Type, e.Code
	b, _ := json.Marshal(v)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Status)
	w.Write(b)
}

// Shape is the error body a route's clients understand.
type Shape uint8

// The error shapes.
const (
	// ShapeOpenAI: {"error": {"message", "type", "code"}}.
	ShapeOpenAI Shape = iota
	// ShapeAnthropic: {"type": "error", "error": {"type", "message"}}, the
	// Messages API's, whose SDK reads the error's type from it.
	ShapeAnthropic
)

// anthropicBody is Anthropic's error shape.
type anthropicBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// AnthropicType is the Anthropic error type of a status: Anthropic names
// its errors by status, not by cause.
func AnthropicType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusUnprocessableEntity:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// AnthropicJSON is e as Anthropic's error body.
func AnthropicJSON(e *Error) []byte {
	var v anthropicBody
	v.Type, v.Error.Type, v.Error.Message = "error", AnthropicType(e.Status), e.Message
	b, _ := json.Marshal(v)
	return b
}

// WriteShape writes e with e's status in the given shape.
func WriteShape(w http.ResponseWriter, e *Error, shape Shape) {
	if shape != ShapeAnthropic {
		Write(w, e)
		return
	}
	b := AnthropicJSON(e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Status)
	w.Write(b)
}

// Upstream maps an error from the round trip to the backend to the response
// the client gets: 504 on timeout, 499 (nothing sent) when the client
// cancelled, 502 otherwise.
func Upstream(ctx context.Context, err error) *Error {
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.Canceled) {
		return New(StatusClientClosed, "client_closed", "client_closed", "client closed the request", exchange.ClassClientCancel)
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return New(http.StatusGatewayTimeout, "upstream_timeout", "upstream_timeout", "upstream timed out", exchange.ClassTimeout)
	}
	return New(http.StatusBadGateway, "upstream_error", "upstream_unavailable", "upstream request failed", exchange.ClassUpstream5xx)
}

// New is an Error with every field given.
func New(status int, typ, code, message string, class exchange.ErrorClass) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: message, Class: class}
}
