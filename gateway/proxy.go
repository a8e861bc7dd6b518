package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/apierror"
	"github.com/vigil-gw/vigil/gateway/inject"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// The proxy loop. A request that reaches a backend goes through proxy:
// the call's own httputil.ReverseProxy makes the outbound request of the
// client's (hop-by-hop headers gone) and copies the answer back (flushing
// streams, trailers, aborting the client's connection when a copy breaks),
// which is what it does well; between the two it calls the call's
// RoundTrip, the loop of attempts, which calls the transport itself:
//
//	for each attempt:   attempt  → the backend's response, or an error
//	                    judge    → answered, retried (failover chose the
//	                               next backend), or failed
//	answered: accept (the tap and the strippers) → the proxy copies it
//	failed:   answerFailure writes the gateway's error
//
// Retries. An attempt that fails before anything reached the client — a
// transport error before the response (refused or reset connection, closed
// keep-alive; not a timeout, which may leave the generation running, and
// not a client that went away), a 5xx answer, whose body is discarded
// unread, or a backend marked down while the attempt waited for its
// headers — goes on to another backend chosen by the balancer, never one
// already tried, up to retries.attempts tries in all (failover decides,
// and nothing else does). The request body is replayed from the bytes the
// gateway already holds; a streamed upload (passthrough.go), which it does
// not hold, is retried only while no byte of it was read. The last
// attempt, or one with no other healthy backend left, answers as it would
// without retries: the backend's 5xx passes through, a transport error is
// a 502. Each attempt is its own inference span. Once the response headers
// are accepted there is no retry: a stream that breaks later ends with an
// error event (tap.go).
//
// The proxy finds its call as its Transport, and answerFailure finds it in
// the error RoundTrip returns: no lookup through the request's context.

// attemptState is a call's attempts: how many were made, the backends
// that failed, and the current one's control. Only this file writes it.
type attemptState struct {
	attempts int                 // attempts started
	start    time.Time           // when the current attempt started
	tried    []*upstream.Backend // backends that failed this request, over triedBuf
	triedBuf [maxAttempts]*upstream.Backend
	ctl      *attemptCtl // cancels the current attempt (cancel.go)
	// acquired: the current attempt holds its backend's in-flight count.
	acquired bool
	settled  bool // the observer has the request (settle)

	// The first attempt's body reader and control, kept here rather than
	// allocated; a retry, rare, allocates its own.
	body bytes.Reader
	ctl0 attemptCtl
}

// answerState is what the client is answered: the status of the response
// passed on (the backend's, or the response cache's), or the error the
// gateway answers with itself. The proxy loop and fail decide it; only
// this file writes it.
type answerState struct {
	status int             // of the response passed on; 0 until one is accepted
	apiErr *apierror.Error // the error the gateway answered with; nil: none
}

// maxAttempts bounds retries.attempts (config validates [1, 10]).
const maxAttempts = 10

// Retry reasons, the values of vigil_retries_total's reason label.
const (
	retryConnect   = "connect"   // the backend could not be reached
	retryTransport = "transport" // the connection failed after it was made
	retryStatus    = "status_5xx"
)

// verdict is how an attempt ended, as the loop sees it.
type verdict uint8

const (
	answered verdict = iota // a response goes to the client
	retried                 // the next attempt goes to x.backend, chosen by failover
	failed                  // x.answer.apiErr is the client's answer
)

// proxy sends the prepared body to x.backend, and on to others while
// attempts fail, and copies the answer to w.
func (s *Server) proxy(ctx context.Context, w http.ResponseWriter, r *http.Request, x *call, body []byte) {
	x.srv, x.ctx, x.in, x.body = s, ctx, r, body
	x.forwardedHeaders(r)
	x.retry.tried = x.retry.triedBuf[:0]
	x.rp = httputil.ReverseProxy{
		Rewrite:      keepOutbound,
		Transport:    x,
		ErrorHandler: answerFailure,
		BufferPool:   s.buffers,
		ErrorLog:     s.proxyLog,
	}
	// The last attempt ends once its answer was copied (until then the
	// idle watch reads its control and the backend counts it in flight),
	// or when the copy broke and the proxy panicked.
	defer x.endAttempt()
	x.rp.ServeHTTP(w, r)
}

// keepOutbound is the proxy's Rewrite hook: the outbound request is made
// per attempt, by attempt.
func keepOutbound(*httputil.ProxyRequest) {}

// RoundTrip is the loop of attempts: the call's ReverseProxy calls it
// once, with the outbound request it made of the client's. It returns the
// response to copy to the client, or a *failedCall for answerFailure.
func (x *call) RoundTrip(out *http.Request) (*http.Response, error) {
	s := x.srv
	x.outboundHeaders(out.Header)
	for {
		resp, err := s.attempt(x, out)
		switch s.judge(x, resp, err) {
		case answered:
			s.accept(x, resp)
			return resp, nil
		case failed:
			return nil, (*failedCall)(x)
		}
	}
}

// attempt sends the request to x.backend once, replaying the body bytes.
// Each attempt has its own request, body reader and context: the
// transport may still read the last attempt's after its response came.
func (s *Server) attempt(x *call, out *http.Request) (*http.Response, error) {
	b := x.backend
	b.Acquire()
	x.retry.acquired = true
	x.retry.attempts++
	x.retry.start = time.Now()
	rd, ctl := &x.retry.body, &x.retry.ctl0
	if x.retry.attempts > 1 {
		rd, ctl = new(bytes.Reader), new(attemptCtl)
	}
	var f = &x.fields
	if !x.parsed {
		f = nil
	}
	ictx := s.startInference(x.ctx, x, f)
	// The attempt's context is out's, which carries the proxy's trace that
	// passes 1xx answers on; the span reaches the backend in its headers.
	actx := s.startAttempt(out.Context(), x, ctl)
	x.retry.ctl = ctl
	var req *http.Request
	if x.retry.attempts == 1 {
		req = out.WithContext(actx) // out's URL and headers are this attempt's alone
	} else {
		req = out.Clone(actx)
		*req.URL = *x.in.URL
	}
	pr := httputil.ProxyRequest{In: x.in, Out: req}
	pr.SetURL(b.URL)
	// The backend's spans continue under the inference span.
	s.prop.Inject(ictx, headerCarrier(req.Header))
	switch {
	case x.stream != nil:
		req.Body = x.stream.reader() // ContentLength stays the client's
	case out.Body == nil && len(x.body) == 0:
		req.Body, req.ContentLength = nil, 0
	default:
		body := x.body
		if x.shadow.idsBody != nil && b == x.shadow.idsBackend {
			body = x.shadow.idsBody
		}
		rd.Reset(body)
		// A NopCloser over a *bytes.Reader: the transport knows it for an
		// in-memory body and sends the headers and body in one write.
		req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
	}
	return s.transport.RoundTrip(req)
}

// judge decides what follows an attempt: its response goes to the client,
// the request goes on to another backend, or the gateway answers.
func (s *Server) judge(x *call, resp *http.Response, err error) verdict {
	if err == nil && !x.retry.ctl.answered() {
		// The backend was marked down as its headers came: the attempt
		// was cancelled first, and goes on as one that had not answered.
		resp.Body.Close()
		resp, err = nil, errBackendDown
	}
	if err != nil {
		return s.judgeError(x, err)
	}
	switch {
	case resp.StatusCode >= 500:
		s.recordFailure(x.backend)
		if s.failover(x, retryStatus, resp.StatusCode) {
			resp.Body.Close() // unread: nothing of it reached the client
			return retried
		}
	case !isStream(resp):
		x.backend.Answered(time.Now())
		s.recordSuccess(x.backend)
	default:
		// A stream succeeds when it ends (observeBackend): one that
		// breaks or stalls after its headers is a failure, and its
		// headers must not reset the count that ejects its backend.
		x.backend.Answered(time.Now())
	}
	return answered
}

// judgeError is judge for an attempt that got no response.
func (s *Server) judgeError(x *call, err error) verdict {
	b := x.backend
	if x.retry.ctl.cancelledDown() {
		s.metrics.cancels.WithLabelValues(b.Name, retryDown).Inc()
		s.recordFailure(b)
		s.log.Warn("request moved off a backend marked down before it answered", "backend", b.Name, "request_id", x.req.ID, "attempt", x.retry.attempts)
		if s.failover(x, retryDown, 0) {
			return retried
		}
		// Another backend was healthy when the attempt was cancelled,
		// and is no longer.
		return x.fail(apierror.New(http.StatusBadGateway, "upstream_error", "upstream_unavailable",
			fmt.Sprintf("backend %q was marked down before it answered", b.Name), exchange.ClassUpstream5xx))
	}
	if x.stream != nil {
		// The client's upload failed, not the backend. A failed read of
		// the connection cancels the request's context (net/http), but
		// the client of a stalled or malformed body still waits for the
		// answer; one that broke off has nobody to answer.
		if rerr := x.stream.readErr(); rerr != nil && (x.ctx.Err() == nil || !clientGone(rerr)) {
			x.closeConn = true
			return x.fail(uploadError(rerr, s.cfg.Passthrough.MaxUploadBytes))
		}
	}
	e := apierror.Upstream(x.ctx, err)
	if e.Status != apierror.StatusClientClosed {
		s.recordFailure(b)
	}
	if e.Status == http.StatusBadGateway {
		s.log.Warn("upstream request failed", "backend", b.Name, "request_id", x.req.ID, "attempt", x.retry.attempts, "err", err)
		reason := retryTransport
		if isDialError(err) {
			reason = retryConnect
		}
		if s.failover(x, reason, 0) {
			return retried
		}
		e.Message = fmt.Sprintf("upstream request to backend %q failed", b.Name)
	}
	return x.fail(e)
}

// fail answers with a gateway-made error.
func (s *Server) fail(w http.ResponseWriter, x *call, e *apierror.Error) {
	x.answer.apiErr = e
	x.writeError(w, e)
}

// writeError writes e in the shape of the call's route.
func (x *call) writeError(w http.ResponseWriter, e *apierror.Error) {
	if x.spec != nil {
		apierror.WriteShape(w, e, x.spec.shape)
		return
	}
	apierror.Write(w, e)
}

// servedFromCache records that the response cache answered with status:
// not a backend, so to the analyzers the request is one the gateway
// answered (the Observer's contract).
func (x *call) servedFromCache(status int) {
	x.answer.status, x.backend, x.cached = status, nil, true
}

// fail settles the request with the gateway's answer e.
func (x *call) fail(e *apierror.Error) verdict {
	x.settle()
	x.answer.apiErr = e
	return failed
}

// failover decides whether the failed attempt goes on to another backend;
// if so it ends the attempt (its span, its control, its in-flight count),
// makes the chosen backend x.backend and counts the retry.
func (s *Server) failover(x *call, reason string, status int) bool {
	x.retry.tried = append(x.retry.tried, x.backend)
	if x.pinned || x.retry.attempts >= min(s.cfg.Retries.Attempts, maxAttempts) {
		return false
	}
	// A retry is routed by load, whatever the strategy: under prefix,
	// Pick (no prompt key) is the dynamic choice. The backend that held
	// the prompt's prefix was the one tried first; the others are alike
	// cold for it, so load alone tells them apart.
	next, err := s.balancer.Pick(x.req.Model, x.kinds, x.retry.tried...)
	if err != nil {
		return false
	}
	if x.stream != nil && !x.stream.handOn() {
		return false // the body streamed out in part; it cannot be sent again
	}
	s.metrics.retries.WithLabelValues(reason).Inc()
	s.log.Debug("retrying on another backend", "request_id", x.req.ID, "from", x.backend.Name, "to", next.Name, "reason", reason)
	s.endRetried(x, status, exchange.ClassUpstream5xx)
	x.endAttempt()
	x.backend = next
	return true
}

// endAttempt releases the current attempt: its control leaves the
// watchers' lists, its context ends, its backend no longer counts it. The
// control stays readable, for finish (was the stream cancelled idle?).
func (x *call) endAttempt() {
	if c := x.retry.ctl; c != nil {
		c.end()
	}
	if x.retry.acquired {
		x.backend.Release()
		x.retry.acquired = false
	}
}

// settle fixes the backend of the exchange once no attempt follows, and
// hands the request to the observer: before settling, req.Backend may still
// change, so the dispatcher goroutine must not see req yet.
func (x *call) settle() {
	if x.retry.settled {
		return
	}
	x.retry.settled = true
	x.req.Backend = x.backend.Name
	if x.disp != nil {
		x.disp.request(&x.pending)
	}
}

// isStream reports whether resp is an SSE stream the tap can read.
func isStream(resp *http.Response) bool {
	return strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && resp.Header.Get("Content-Encoding") == ""
}

// accept readies the answer the client gets: the backend's headers as the
// client sees them, the tap for the analyzers and, after it, the
// strippers of what the gateway asked for on its own account.
func (s *Server) accept(x *call, resp *http.Response) {
	x.settle()
	x.answer.status = resp.StatusCode
	x.span.answering()
	h := resp.Header
	ct, plain := h.Get("Content-Type"), h.Get("Content-Encoding") == ""
	isSSE := isStream(resp)
	x.hdr[hdrBackend] = x.backend.Name
	h["X-Vigil-Backend"] = x.header(hdrBackend)
	// The writer has ours already (serveProxy), and ReverseProxy adds the
	// response's headers to the writer's: a backend's own (vLLM echoes
	// X-Request-Id) would make a second value.
	h.Del("X-Vigil-Trace-Id")
	h.Del("X-Request-Id")
	if x.req.Operation == exchange.OpResponses && resp.StatusCode == http.StatusOK {
		x.findOwner = true // the tap records the new response's owner
		if x.newConversation {
			s.owners.record(conversationKey(x.fields.Conversation), x.backend.Name)
		}
	}
	tp := x.newTap(resp.Body, isSSE, s.captureBytes())
	tp.api = x.req.Operation == exchange.OpResponses || x.req.Operation == exchange.OpMessages
	if isSSE {
		switch {
		case x.req.Operation == exchange.OpGenerate:
			tp.shape = shapeTGI
		case x.req.Operation == exchange.OpResponses:
			tp.shape = shapeResponses
		case x.spec != nil && x.spec.shape == apierror.ShapeAnthropic:
			tp.shape = shapeAnthropic
		}
		tp.count = x.req.Operation.Generates()
	}
	tp.spanned = x.span.recording
	if isSSE && s.cfg.Tracing.CaptureContent && x.span.recording {
		tp.keepStream = s.cfg.Tracing.MaxContentBytes
	}
	resp.Body = tp
	// Injected logprobs leave after the tap, so the analyzers see them and
	// the client does not. Error answers pass unchanged, as they always do.
	if x.req.Injected && resp.StatusCode == http.StatusOK && plain {
		strip := func(body io.ReadCloser, sse bool) io.ReadCloser {
			if x.req.Operation == exchange.OpResponses {
				return inject.NewResponsesStripper(body, sse, &x.fields)
			}
			return inject.NewStripper(body, sse)
		}
		// The body gets shorter, so it goes chunked: the client sees the
		// same body bytes as without injection, but no Content-Length
		// header (a server that buffers a short stream may send one).
		switch {
		case isSSE:
			resp.Body = strip(resp.Body, true)
			unsized(resp)
		case strings.HasPrefix(ct, "application/json"):
			resp.Body = strip(resp.Body, false)
			unsized(resp)
		}
	}
	// The usage that usage.inject asked for leaves last.
	if x.usageInjected && resp.StatusCode == http.StatusOK && isSSE {
		resp.Body = inject.NewUsageStripper(resp.Body)
		unsized(resp)
	}
}

// unsized drops the length of a response whose body the gateway shortens.
func unsized(resp *http.Response) {
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
}

// failedCall is the error RoundTrip returns when the gateway answers the
// request itself (x.answer.apiErr): a call, so that answerFailure finds it
// without an allocation.
type failedCall call

func (f *failedCall) Error() string { return f.answer.apiErr.Message }

// answerFailure is the proxy's ErrorHandler: it writes the gateway's
// answer for a request whose attempts failed, unless the client left.
func answerFailure(w http.ResponseWriter, _ *http.Request, err error) {
	var f *failedCall
	if !errors.As(err, &f) {
		// Not the loop's: the proxy's own (none is expected).
		apierror.Write(w, apierror.New(http.StatusBadGateway, "upstream_error", "upstream_unavailable", "upstream request failed", exchange.ClassUpstream5xx))
		return
	}
	x := (*call)(f)
	if x.answer.apiErr.Status == apierror.StatusClientClosed {
		return // nobody to answer
	}
	if x.closeConn {
		w.Header().Set("Connection", "close")
	}
	x.writeError(w, x.answer.apiErr)
}

// forwardedHeaders makes the values of the X-Forwarded-* headers that
// outboundHeaders sets: those of httputil.ProxyRequest.SetXForwarded after
// the client's own X-Forwarded-For was copied to the outgoing request.
func (x *call) forwardedHeaders(r *http.Request) {
	if clientIP, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := r.Header["X-Forwarded-For"]; len(prior) > 0 {
			clientIP = strings.Join(prior, ", ") + ", " + clientIP
		}
		x.hdr[hdrForwardedFor], x.forwardedFor = clientIP, true
	}
	x.hdr[hdrForwardedHost] = r.Host
	x.hdr[hdrForwardedProto] = "http"
	if r.TLS != nil {
		x.hdr[hdrForwardedProto] = "https"
	}
}

// outboundHeaders sets the headers every attempt sends: X-Forwarded-For,
// -Host and -Proto as pr.SetXForwarded would set them, keeping the chain
// of proxies in front of us as a Director-based proxy would (the proxy
// dropped the client's), and the request id.
func (x *call) outboundHeaders(out http.Header) {
	if x.forwardedFor {
		out["X-Forwarded-For"] = x.header(hdrForwardedFor)
	}
	out["X-Forwarded-Host"] = x.header(hdrForwardedHost)
	out["X-Forwarded-Proto"] = x.header(hdrForwardedProto)
	out["X-Request-Id"] = x.header(hdrID)
	if x.req.Injected || x.usageInjected || x.req.Operation == exchange.OpResponses {
		// The strippers read plain bodies only: ask for one, or what was
		// injected would reach the client compressed. A Responses body
		// must be plain too: its id names the backend that holds it.
		out.Del("Accept-Encoding")
	}
}
