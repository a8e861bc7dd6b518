package analyzers

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/analyzers/inputdrift"
	"github.com/vigil-gw/vigil/analyzers/inputdrift/content"
	"github.com/vigil-gw/vigil/analyzers/latency"
	"github.com/vigil-gw/vigil/analyzers/logprob"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
)

// BenchmarkPipelineRequest is the analyzers' cost of one request (its
// prompt's features, the response's logprobs, every window) with the
// traffic spread over 1 or 4 models: a segment per model must not make a
// fleet of several models dearer per request than one model.
//
//	go test -run '^$' -bench PipelineRequest -benchmem -count 5 ./analyzers/
func BenchmarkPipelineRequest(b *testing.B) {
	for _, models := range []int{1, 4} {
		b.Run(fmt.Sprintf("models=%d", models), func(b *testing.B) {
			cfg := config.Default()
			now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
			p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			type req struct {
				model      string
				body, resp []byte
			}
			var reqs []req
			for m := range models {
				model := fmt.Sprintf("model-%d", m)
				h := sim.New(sim.Options{Model: model, Seed: int64(m)}).Handler()
				for i := range 16 {
					body := fmt.Appendf(nil, `{"model":%q,"max_tokens":16,"logprobs":true,"top_logprobs":3,"messages":[{"role":"user","content":"a question, number %d, about the weather"}]}`, model, i)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
					reqs = append(reqs, req{model, body, rec.Body.Bytes()})
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
			send := func(i int, step time.Duration) {
				q := &reqs[i%len(reqs)]
				now = now.Add(step)
				r := &exchange.Request{Operation: exchange.OpChat, Model: q.model, Backend: "a", Start: now, Body: q.body}
				p.OnPrompt(now, r.Operation, r.Body)
				p.OnRequest(r)
				p.OnResponse(r, &exchange.Response{Status: 200, Latency: 200 * time.Millisecond, Body: q.resp, CompletionTokens: 16})
			}
			// A steady state: every window's buckets made once, at two
			// requests a second, then the current window's recycled at the
			// measured rate, so that their reservoirs have grown to what
			// that rate fills (the rings then reuse them).
			span := cfg.Analyzers.Window + cfg.Analyzers.Reference + time.Minute
			for i := range int(span / (500 * time.Millisecond)) {
				send(i, 500*time.Millisecond)
			}
			for i := range int((cfg.Analyzers.Window + time.Minute) / (10 * time.Millisecond)) {
				send(i, 10*time.Millisecond)
			}
			p.Evaluate()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				send(i, 10*time.Millisecond)
			}
		})
	}
}

// BenchmarkSegmentMemory measures what one segment holds with every window
// full at the default settings (10 s buckets, a 15 min window, a 1 h
// reference, 256 prompts sampled per drift bucket): traffic for the whole
// span at 30 requests a second to each segment, more than the reservoirs
// keep, with log-normal latencies (median 200 ms, σ 0.5).
//
//	go test -run '^$' -bench SegmentMemory -benchtime 1x ./analyzers/
func BenchmarkSegmentMemory(b *testing.B) {
	cfg := config.Default().Analyzers
	const segs = 4
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		s := newSegments(cfg, time.Hour, nil, nil, []string{"a"})
		rng := rand.New(rand.NewPCG(1, 2))
		t := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		end := t.Add(cfg.Window + cfg.Reference)
		var f inputdrift.Features
		// Each prompt's content: 20 words of a 5,000-word vocabulary.
		var rd content.Reader
		var doc content.Doc
		f.Content = &doc
		sum := logprob.Summary{Tokens: 16, MarginTokens: 16}
		var smp latency.Sample
		for ; t.Before(end); t = t.Add(time.Second / (30 * segs)) {
			for i := range f.Vector {
				f.Vector[i] = rng.Float64() * 100
			}
			f.Model = fmt.Sprintf("m%d", rng.IntN(segs))
			rd.Reset(&doc, false)
			for range 20 {
				for _, c := range fmt.Sprintf("w%dq ", rng.IntN(5000)) {
					rd.Rune(c)
				}
			}
			rd.Finish()
			sum.MeanLogprob = -rng.Float64()
			sum.Perplexity, sum.MeanEntropy, sum.LowShare, sum.MeanMargin = math.Exp(-sum.MeanLogprob), rng.Float64(), rng.Float64(), rng.Float64()
			for i := range smp.Values {
				smp.Values[i] = 0.2 * math.Exp(0.5*rng.NormFloat64()) // seconds, log-normal
			}
			smp.MeanLogprob = sum.MeanLogprob
			mm := s.route(t, f.Model, true, true)
			mm.observe(&observation{at: t, prompt: &f})
			mm.observe(&observation{at: t, summary: &sum, sample: &smp, backend: "a"})
			s.errs.Add(t, mm.name, false)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/segs/(1<<20), "MiB/segment")
		runtime.KeepAlive(s)
	}
}
