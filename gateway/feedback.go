package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/request"
)

// FeedbackSink takes calibration labels from POST /v1/feedback. It returns
// ErrUnknownResponse for an id it does not know.
type FeedbackSink interface {
	Feedback(ctx context.Context, id string, correct bool) error
}

// ErrUnknownResponse is returned by a FeedbackSink for an unknown response id.
var ErrUnknownResponse = exchange.ErrUnknownResponse

func (s *Server) postFeedback(c *gin.Context) {
	body, aerr := request.ReadBody(c.Request, c.Writer, deadlinesOf(c.Writer, c.Request), 64<<10, s.cfg.Limits.ReadTimeout)
	if aerr != nil {
		apierror.Write(c.Writer, aerr)
		return
	}
	var f struct {
		ID      string `json:"id"`
		Correct *bool  `json:"correct"`
	}
	if err := json.Unmarshal(body, &f); err != nil || f.ID == "" || f.Correct == nil {
		apierror.Write(c.Writer, apierror.BadRequest(`expected {"id": "<response id>", "correct": true|false}`))
		return
	}
	if s.feedback == nil {
		apierror.Write(c.Writer, notEnabled("calibration feedback"))
		return
	}
	switch err := s.feedback.Feedback(c.Request.Context(), f.ID, *f.Correct); {
	case errors.Is(err, ErrUnknownResponse):
		apierror.Write(c.Writer, apierror.New(http.StatusNotFound, "invalid_request_error", "unknown_response", "no response with id "+f.ID+" is known", exchange.ClassNone))
	case err != nil:
		apierror.Write(c.Writer, apierror.New(http.StatusInternalServerError, "server_error", "internal_error", err.Error(), exchange.ClassNone))
	default:
		c.JSON(http.StatusOK, gin.H{"recorded": true})
	}
}

func notEnabled(what string) *apierror.Error {
	return apierror.New(http.StatusNotImplemented, "invalid_request_error", "not_enabled", what+" is not enabled in this gateway", exchange.ClassNone)
}
