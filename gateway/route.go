package gateway

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/balance"
	"github.com/vigil-gw/vigil/gateway/balance/affinity"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// pick chooses the backend of a request that no owner holds (an owner's
// pin comes first: the backend that holds a stored response must answer
// its follow-ups, whatever its prefix). Under the prefix strategy the
// prompt's key is computed here from the body already read, on the stack:
// it is large, and the call, allocated per request, must stay small. Once
// the backend is chosen, Picked records that it holds the prompt; a retry
// (Pick) is routed by load and records nothing. The decision goes into the
// call, for the server span (endSpans) and the access log.
func (s *Server) pick(r *http.Request, x *call, op exchange.Operation, kinds []string, body []byte) (*upstream.Backend, error) {
	h := s.balancer.Hasher()
	if h == nil {
		return s.balancer.Pick(x.req.Model, kinds)
	}
	var key affinity.Key
	var session string
	if v := r.Header[s.sessionHeader]; len(v) > 0 {
		session = v[0]
	}
	// A body that cannot be walked (or an operation without a prompt)
	// leaves the key empty, and the request is routed by load.
	h.Compute(&key, op, body, session)
	b, d, err := s.balancer.PickFor(x.req.Model, kinds, &key)
	if err != nil {
		return nil, err
	}
	s.balancer.Picked(b, &key)
	x.route.set(d)
	return b, nil
}

// routeNote is a balancer.Decision as the access log needs it, small
// enough for the call (whose size class is the gateway's memory per
// request): the prompt's blocks (at most prefix.MaxBlocks), those the
// preferred backend held, the reason (ReasonLoad: the guard overrode the
// prefix) and whether the prompt's anchor was hot.
type routeNote struct {
	blocks, matched uint16
	reason          balance.Reason
	hot             bool
}

func (n *routeNote) set(d balance.Decision) {
	*n = routeNote{blocks: uint16(d.Blocks), matched: uint16(d.Matched), reason: d.Reason, hot: d.Hot}
}

// routeStrategy returns the access log's route_strategy: the balancer's
// strategy, or "owner" for a request pinned to the backend that holds
// its stored response or conversation.
func (s *Server) routeStrategy(x *call) string {
	switch {
	case x.pinned:
		return "owner"
	case s.balancer == nil: // a Server made by a test, without one
		return ""
	}
	return s.balancer.Strategy()
}

// appendRouteAttrs appends the decision's span attributes, under the
// prefix strategy only. They are set with the server span's last ones
// (endSpans), in one call: set apart, they would grow the span's
// attribute slice once more, an allocation per traced request.
func (s *Server) appendRouteAttrs(attrs []attribute.KeyValue, x *call) []attribute.KeyValue {
	if s.balancer == nil || s.balancer.Hasher() == nil {
		return attrs
	}
	return append(attrs,
		attribute.String("vigil.route.strategy", s.routeStrategy(x)),
		attribute.Int("vigil.route.blocks", int(x.route.blocks)),
		attribute.Int("vigil.route.matched_blocks", int(x.route.matched)),
		attribute.String("vigil.route.reason", x.route.reason.String()),
		attribute.Bool("vigil.route.guard_override", x.route.reason == balance.ReasonLoad),
		attribute.Bool("vigil.route.hot", x.route.hot),
	)
}
