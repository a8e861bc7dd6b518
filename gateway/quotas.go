package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/quota"
	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/state"
)

// SetQuotas puts new quotas (validated) in force, as a reload does: the
// tenants' counts so far stand against the new limits.
func (s *Server) SetQuotas(q config.Quotas) {
	for name := range q.Tenants {
		s.tenantLabels.admit(name)
	}
	s.quota.Update(q)
}

// admitQuota holds a request to its tenant's limits (quotas): it reserves
// the request's estimated tokens and sets the rate-limit headers, or
// answers the request itself (429, or 503 while the store does not
// answer and quotas.fail is closed) and returns false.
func (s *Server) admitQuota(ctx context.Context, w http.ResponseWriter, x *call, f *request.Fields, body []byte) bool {
	if !s.quota.Enabled() || !x.req.Operation.HasPrompt() {
		return true
	}
	var maxTokens float64
	set := false
	if f != nil {
		for _, n := range []request.Num{f.MaxTokens, f.MaxCompletionTokens, f.MaxOutputTokens, f.Parameters.MaxNewTokens} {
			if v, ok := n.Get(); ok {
				maxTokens, set = v, true
				break
			}
		}
	}
	t, refused, err := s.quota.Admit(ctx, x.req.Tenant, x.req.Model, s.quota.Estimate(len(body), maxTokens, set))
	switch {
	case err == quota.ErrUnavailable:
		x.quotaDecision = quotaUnavailable
		w.Header().Set("Retry-After", "1")
		s.fail(w, x, apierror.New(http.StatusServiceUnavailable, "server_error", "quota_unavailable",
			"The gateway cannot check this tenant's quota right now (quotas.fail: closed). Please retry shortly.", exchange.ClassQuotaUnavailable))
		return false
	case err != nil:
		s.fail(w, x, apierror.Upstream(ctx, err))
		return false
	case refused != nil:
		x.quotaDecision = refusedFor(refused.Reason)
		refused.Headers(w.Header())
		s.fail(w, x, refusalError(refused))
		return false
	}
	if t == nil {
		return true // no limit applies to the tenant
	}
	x.quota, x.quotaDecision = t, quotaAdmitted
	if t.Local() {
		x.quotaDecision = quotaAdmittedLocal
	}
	t.Headers(w.Header())
	return true
}

// quotaDecision is what the quotas decided of a request, for the access
// log: a small enum, as call holds it beside its other small fields.
type quotaDecision uint8

const (
	_                       quotaDecision = iota // the zero value, "": no limit applies (or quotas are off)
	quotaAdmitted                                // reserved in the shared store
	quotaAdmittedLocal                           // reserved in this replica's share: the store did not answer
	quotaRefusedRequests                         // requests_per_minute
	quotaRefusedTokens                           // tokens_per_minute or tokens_per_day
	quotaRefusedConcurrency                      // max_concurrent
	quotaUnavailable                             // the store did not answer and quotas.fail is closed
)

var quotaDecisions = [...]string{"", "admitted", "admitted_local", "refused_requests", "refused_tokens", "refused_concurrency", "unavailable"}

func (d quotaDecision) String() string { return quotaDecisions[d] }

func refusedFor(reason string) quotaDecision {
	switch reason {
	case state.QuotaTokens:
		return quotaRefusedTokens
	case state.QuotaConcurrency:
		return quotaRefusedConcurrency
	}
	return quotaRefusedRequests
}

// refusalError is a quota refusal as OpenAI words its own: a 429 of type
// "requests" or "tokens" and code rate_limit_exceeded (Anthropic's
// rate_limit_error on the Messages API, by its status).
func refusalError(r *quota.Refusal) *apierror.Error {
	typ, what := "requests", "requests per minute"
	switch r.Reason {
	case "tokens":
		typ, what = "tokens", "tokens (per minute or per day)"
	case "concurrency":
		what = "requests in flight"
	}
	msg := fmt.Sprintf("Rate limit reached for tenant %q on %s. Please try again in %s.", r.Tenant, what, r.Verdict.RetryAfter.Round(100e6))
	if r.Verdict.TooLarge {
		msg = fmt.Sprintf("Request too large for tenant %q: it asks for %d tokens (prompt estimate and its maximum completion tokens), more than its limit allows at once. Lower max_tokens or shorten the prompt.", r.Tenant, r.Tokens)
	}
	return apierror.New(http.StatusTooManyRequests, typ, "rate_limit_exceeded", msg, exchange.ClassRateLimited)
}

// settleQuota ends the request's reservation with the tokens it used:
// the backend's usage, or the content chunks counted and the prompt's
// estimate (a stream the client left early). A request the gateway
// answered itself, or the backend failed with a 5xx, costs nothing; a
// cache hit or a backend's 4xx costs a request and no token; one whose
// use is unknown costs its estimate.
func (s *Server) settleQuota(x *call, status int, class exchange.ErrorClass) {
	if x.quota == nil {
		return
	}
	charged := x.answer.apiErr == nil && status < 500 && !class.Failed()
	var used int64
	switch {
	case x.cached, x.answer.status >= 400:
		// A cache hit, or the backend's refusal (a bad request, a
		// prompt too long): no generation, a request and no token. The
		// backend's status, not the outcome's: a client that left (499)
		// after its stream, or during it, used what the backend made.
		used = 0
	case x.resp.usageSource == exchange.UsageReported:
		used = int64(x.resp.prompt() + x.resp.completionTokens)
	case x.resp.usageSource == exchange.UsageCounted: // the content chunks; the prompt's tokens unknown
		used = quota.PromptEstimate(len(x.req.Body)) + int64(x.resp.completionTokens)
	default:
		used = -1
	}
	s.quota.Settle(x.quota, used, charged)
}
