package analyzers

import (
	"context"
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/vigil-gw/vigil/analyzers/embed"
	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/analyzers/precision"
	"github.com/vigil-gw/vigil/exchange"
)

// OnShadow records one shadow comparison (signal 5). It is safe for
// concurrent use; the gateway calls it from its shadow workers.
func (p *Pipeline) OnShadow(sh *exchange.Shadow) {
	if p.prec == nil {
		return
	}
	c, err := precision.FromShadow(sh)
	if err != nil {
		p.m.precisionResults.WithLabelValues("unreadable").Inc()
		p.log.Debug("shadow comparison unreadable", "backend", sh.Backend, "reference", sh.Reference, "method", sh.Method, "err", err)
		return
	}
	if p.prec.Add(sh.Time, precision.Pair{Backend: sh.Backend, Reference: sh.Reference}, &c) {
		p.m.precisionResults.WithLabelValues("compared").Inc()
	}
}

// formatOf maps an operation to the logprob format of its response; ok is
// false for operations without generated tokens and for the Messages API,
// whose responses carry no logprobs.
func formatOf(r *exchange.Request) (logprob.Format, bool) {
	switch r.Operation {
	case exchange.OpChat:
		return logprob.OpenAIChat, true
	case exchange.OpCompletion:
		return logprob.OpenAICompletion, true
	case exchange.OpResponses:
		return logprob.OpenAIResponses, true
	case exchange.OpGenerate:
		if r.Stream {
			return logprob.TGIStream, true
		}
		return logprob.TGIGenerate, true
	}
	return 0, false
}

// apiOf maps an operation to the request format its prompt is read in.
func apiOf(op exchange.Operation) inputdrift.API {
	switch op {
	case exchange.OpResponses:
		return inputdrift.Responses
	case exchange.OpMessages:
		return inputdrift.Messages
	}
	return inputdrift.Chat
}

// OnPrompt adds a prompt's features to the drift windows once a backend or
// the cache is to answer its request. Counted at their answer instead, the newest buckets,
// which make the current window, would lack the prompts still being
// answered: the long generations, and while a backend hangs every prompt
// routed to it (the prefix strategy sends alike prompts to one backend),
// a change in the mix that no client made. So prompt_tokens is the
// estimate from the prompt's characters, not the backend's count, which
// only its answer brings.
func (p *Pipeline) OnPrompt(start time.Time, op exchange.Operation, body []byte) {
	if !p.cfg.Drift.Enabled || !op.HasPrompt() {
		return
	}
	var err error
	sc := &p.scratch
	sampled := p.embed != nil && p.embedPick.Float64() < p.cfg.Drift.Text.Embeddings.SampleRatio
	if t := p.cfg.Drift.Text; t.Enabled {
		sc.reader.Capture(0)
		if sampled {
			sc.reader.Capture(t.Embeddings.MaxChars)
		}
		sc.features, err = inputdrift.ExtractText(apiOf(op), body, &sc.reader, &sc.doc, t.Explain)
	} else {
		sc.features, err = inputdrift.ExtractAPI(apiOf(op), body)
	}
	if err != nil {
		p.m.featureErrors.Inc()
		return
	}
	sc.obs = observation{at: start, prompt: &sc.features}
	seg := p.segs.route(start, sc.features.Model, true, false)
	p.observe(&sc.obs, seg)
	if text := sc.reader.Text(); sampled && sc.features.Content != nil && len(text) > 0 {
		p.embed.Offer(embed.Job{At: start, Chars: sc.features.Vector[inputdrift.FeatChars], Text: string(text),
			To: [2]embed.Target{driftMonitor(p.fleet), driftMonitor(seg.monitors)}})
	}
}

// driftMonitor returns the input drift monitor among ms; nil when there
// is none.
func driftMonitor(ms []monitor) embed.Target {
	for _, m := range ms {
		if d, ok := m.(inputMonitor); ok {
			return d.Monitor
		}
	}
	return nil
}

// observe hands o to the fleet's monitors and to those of seg, the
// segment of its model.
func (p *Pipeline) observe(o *observation, seg *modelMonitors) {
	for _, m := range p.fleet {
		m.observe(o)
	}
	seg.observe(o)
}

// parsesResponses says whether a signal reads responses (their logprobs
// or timings).
func (p *Pipeline) parsesResponses() bool {
	return p.cfg.Confidence.Enabled || p.cfg.Output.Enabled || p.cfg.Latency.Enabled
}

// OnRequest starts parsing the response of a generation request.
func (p *Pipeline) OnRequest(r *exchange.Request) {
	f, ok := formatOf(r)
	if !ok || !p.parsesResponses() {
		return
	}
	if len(p.order) >= maxOpen {
		p.close(p.order[0])
		p.m.abandoned.Inc()
	}
	var a *logprob.Accumulator
	if n := len(p.pool); n > 0 {
		a, p.pool = p.pool[n-1], p.pool[:n-1]
	} else {
		a = new(logprob.Accumulator)
	}
	a.Reset(f, logprob.Options{LowProb: p.cfg.Confidence.LowProb})
	p.open[r] = a
	p.order = append(p.order, r)
}

// close forgets r's accumulator and returns it to the pool.
func (p *Pipeline) close(r *exchange.Request) {
	a, ok := p.open[r]
	if !ok {
		return
	}
	delete(p.open, r)
	for i, q := range p.order {
		if q == r {
			p.order = append(p.order[:i], p.order[i+1:]...)
			break
		}
	}
	p.pool = append(p.pool, a)
}

// OnEvent parses one SSE event of a streamed response.
func (p *Pipeline) OnEvent(r *exchange.Request, data []byte) {
	if a := p.open[r]; a != nil {
		if err := a.AddEvent(data); err != nil {
			p.m.parseErrors.Inc()
		}
	}
}

// OnResponse finishes a response: its confidence and timings go to their
// windows.
func (p *Pipeline) OnResponse(r *exchange.Request, resp *exchange.Response) {
	t := r.Start.Add(resp.Latency)
	p.usage.Add(t, r, resp)
	seg := p.segs.route(t, r.Model, false, r.Backend != "")
	if !clientError(resp) {
		p.segs.errs.Add(t, seg.name, resp.ErrorClass.Failed())
	}
	if r.Backend == "" { // the gateway answered: only the error rates see it
		if !clientError(resp) {
			p.errs.Add(t, "", resp.ErrorClass.Failed())
		}
		return
	}
	if !clientError(resp) {
		p.errs.Add(t, r.Backend, resp.ErrorClass.Failed())
	}
	if resp.Status == 200 && resp.ErrorClass == exchange.ClassNone {
		p.speeds.add(r.Backend, r.Start, r.Stream, resp)
	}
	var attrs []attribute.KeyValue
	if p.tracer != nil && r.Span.IsSampled() {
		defer func() { p.postprocessSpan(r, attrs) }()
	}
	a := p.open[r]
	switch {
	case a != nil:
		defer p.close(r)
		if !r.Stream && len(resp.Body) > 0 {
			if err := a.AddBody(resp.Body); err != nil && !resp.Truncated {
				p.m.parseErrors.Inc()
			}
		}
	case r.Operation == exchange.OpMessages:
		// No logprobs to read: the confidence and output signals cannot
		// see the response (their Sources say so), its timings count.
		if resp.Status == 200 && resp.ErrorClass == exchange.ClassNone {
			p.unscored.Add(1)
		}
		if !p.cfg.Latency.Enabled {
			return
		}
	default:
		return
	}
	if resp.Status != 200 || resp.ErrorClass != exchange.ClassNone {
		return
	}
	sc := &p.scratch
	sc.summary = logprob.Summary{}
	if a != nil {
		sc.summary = a.Summary()
	}
	s := &sc.summary
	if s.Tokens > 0 {
		attrs = append(attrs,
			attribute.Int("vigil.logprob.tokens", s.Tokens),
			attribute.Float64("vigil.logprob.mean", s.MeanLogprob),
			attribute.Float64("vigil.perplexity", s.Perplexity),
			attribute.Float64("vigil.logprob.entropy", s.MeanEntropy),
			attribute.Float64("vigil.logprob.low_share", s.LowShare))
	}
	sc.obs = observation{at: t, backend: r.Backend}
	o := &sc.obs
	if a != nil {
		o.summary = s
		p.m.observeResponse(s)
	}
	if p.calib != nil && s.ID != "" && s.Tokens > 0 {
		p.calib.remember(s.ID, math.Exp(s.MeanLogprob), t)
	}
	sc.sample = sample(r, resp, s)
	o.sample = &sc.sample
	p.observe(o, seg)
	// Anomalies against the model's own limits: a model slower than the
	// others answers within its usual latency.
	var anomalous []string
	for i, bad := range o.anomalous {
		if bad {
			p.m.latencyAnomalies.WithLabelValues(latency.Names[i]).Inc()
			anomalous = append(anomalous, latency.Names[i])
		}
	}
	if len(anomalous) > 0 {
		attrs = append(attrs, attribute.StringSlice("vigil.latency.anomalous", anomalous))
	}
}

// postprocessSpan records the analysis of one response as a child of its
// server span. It runs after the response ended, off the request path, so
// its start is the time of analysis.
func (p *Pipeline) postprocessSpan(r *exchange.Request, attrs []attribute.KeyValue) {
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), r.Span)
	_, sp := p.tracer.Start(ctx, "postprocess", trace.WithAttributes(attrs...))
	sp.End()
}

// sample derives a response's timings. The gap metrics come from the
// gaps the gateway measured between content chunks (resp.Gaps) and are
// NaN without them: a non-streaming response, or a stream of fewer than two
// content chunks. They are not estimated as (total − TTFT)/(tokens − 1),
// which spreads one long stall over every token.
func sample(r *exchange.Request, resp *exchange.Response, s *logprob.Summary) latency.Sample {
	nan := math.NaN()
	var smp latency.Sample
	for i := range smp.Values {
		smp.Values[i] = nan
	}
	smp.MeanLogprob = nan
	total := resp.Latency.Seconds()
	smp.Values[latency.E2E] = total
	gen := total
	if r.Stream && resp.TTFT > 0 {
		ttft := resp.TTFT.Seconds()
		smp.Values[latency.TTFT] = ttft
		gen = total - ttft
	}
	if g := resp.Gaps; g.Count > 0 {
		smp.Values[latency.ITL] = g.P50.Seconds()
		smp.Values[latency.ITLP95] = g.P95.Seconds()
		smp.Values[latency.Stall] = g.Max.Seconds()
	}
	if tokens := max(resp.CompletionTokens, s.OutputTokens); tokens > 0 && gen > 0 {
		smp.Values[latency.TPS] = float64(tokens) / gen
	}
	if s.Tokens > 0 {
		smp.MeanLogprob = s.MeanLogprob
	}
	return smp
}

// clientError reports whether resp is the client's own error (a 4xx: bad
// request, unknown model, prompt too long, the backend's 4xx answer, the
// client gone): the error rates and the error budget count neither it nor
// it as a request, since they measure what the service did wrong among the
// requests it could have served, and a client sending many bad requests
// must not dilute a backend's failures.
func clientError(resp *exchange.Response) bool {
	switch resp.ErrorClass {
	case exchange.ClassBadRequest, exchange.ClassPromptTooLong, exchange.ClassUnknownModel,
		exchange.ClassUpstream4xx, exchange.ClassClientCancel, exchange.ClassRateLimited:
		return true
	case exchange.ClassNone:
		return resp.Status >= 400 && resp.Status < 500
	}
	return false
}
