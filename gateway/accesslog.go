package gateway

import (
	"context"
	"math"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/accesslog"
	"github.com/vigil-gw/vigil/gateway/balance"
)

// logAccess writes the access log line of a finished request.
func (s *Server) logAccess(ctx context.Context, x *call, status int, class exchange.ErrorClass) {
	var ttft, tps float64
	if !x.resp.firstByte.IsZero() {
		d := x.resp.firstByte.Sub(x.req.Start)
		ttft = ms(d)
		if gen := x.resp.latency - d; x.req.Stream && x.resp.completionTokens > 0 && gen > 0 {
			tps = float64(x.resp.completionTokens) / gen.Seconds()
		}
	}
	var quotaTokens int64
	if x.quota != nil {
		quotaTokens = x.quota.Charged()
	}
	s.access.Log(ctx, &accesslog.Line{
		RequestID: x.req.ID, TraceID: x.req.TraceID, Route: x.req.Route, Path: logPath(x.path), Model: x.req.Model, Backend: x.backendName(),
		Status: status, Stream: x.req.Stream, Latency: ms(x.resp.latency), TTFT: ttft,
		PromptTokens: x.resp.prompt(), CompletionTokens: x.resp.completionTokens,
		UsageSource: string(x.resp.usageSource), Tenant: x.req.Tenant,
		Quota: x.quotaDecision.String(), QuotaTokens: quotaTokens,
		ITLP50: ms(x.resp.gaps.P50), ITLP95: ms(x.resp.gaps.P95), MaxGap: ms(x.resp.gaps.Max), TPS: math.Round(tps*10) / 10,
		ErrorClass: string(class), Attempts: x.retry.attempts,
		RouteStrategy: s.routeStrategy(x), RouteBlocks: int(x.route.blocks), RouteMatched: int(x.route.matched),
		RouteReason: x.route.reason.String(), RouteGuard: x.route.reason == balance.ReasonLoad,
		RouteHot: x.route.hot,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
