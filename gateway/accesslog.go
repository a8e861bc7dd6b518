package gateway

import (
	"context"
	"math"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/accesslog"
)

// logAccess writes the access log line of a finished request.
func (s *Server) logAccess(ctx context.Context, x *call, status int, class exchange.ErrorClass) {
	var ttft, tps float64
	if !x.firstByte.IsZero() {
		d := x.firstByte.Sub(x.req.Start)
		ttft = ms(d)
		if gen := x.latency - d; x.req.Stream && x.completionTokens > 0 && gen > 0 {
			tps = float64(x.completionTokens) / gen.Seconds()
		}
	}
	s.access.Log(ctx, &accesslog.Line{
		RequestID: x.req.ID, TraceID: x.req.TraceID, Route: x.req.Route, Model: x.req.Model, Backend: x.req.Backend,
		Status: status, Stream: x.req.Stream, Latency: ms(x.latency), TTFT: ttft,
		PromptTokens: x.promptTokens, CompletionTokens: x.completionTokens,
		UsageSource: string(x.usageSource), Tenant: x.req.Tenant,
		ITLP50: ms(x.gaps.P50), ITLP95: ms(x.gaps.P95), MaxGap: ms(x.gaps.Max), TPS: math.Round(tps*10) / 10,
		ErrorClass: string(class), Attempts: x.attempts,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
