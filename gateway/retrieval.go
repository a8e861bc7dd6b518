package gateway

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
)

// retrieve runs the hook for a chat request under a "retrieval" span and
// returns the body to send upstream: with the context message, or as it was
// when the hook failed and on_error is skip.
func (s *Server) retrieve(ctx context.Context, x *call, body []byte) ([]byte, *apierror.Error) {
	ctx, span := s.tracer.Start(ctx, "retrieval")
	defer span.End()
	out, n, err := s.retrieval.Augment(ctx, body)
	span.SetAttributes(attribute.Int("vigil.retrieval.passages", n))
	if err == nil {
		return out, nil
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, "retrieval failed")
	s.log.Warn("retrieval failed", "request_id", x.req.ID, "err", err)
	if s.retrieval.FailOnError() {
		return nil, apierror.New(http.StatusBadGateway, "upstream_error", "retrieval_failed", "retrieval failed: "+err.Error(), exchange.ClassUpstream5xx)
	}
	return body, nil
}
