package faults

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// outcome is what one client request came to.
type outcome struct {
	start   time.Time
	took    time.Duration
	backend string // X-Vigil-Backend; "" when no answer came
	traceID string // X-Vigil-Trace-Id
	err     error
}

// load sends requests from a few clients, one after the other with a short
// pause, until stop, and files each outcome under the phase current when
// the request started. Its methods are safe for concurrent use.
type load struct {
	mu     sync.Mutex
	phase  string
	order  []string
	phases map[string][]outcome

	stopc chan struct{}
	wg    sync.WaitGroup
}

// request is one client request: it returns what became of it.
type request func(ctx context.Context, worker, i int) outcome

// startLoad runs workers clients doing req, each pausing between two
// requests, so that the gateway is busy but not saturated on two cores: the
// figures are about waiting, not about CPU. phase names the first phase.
func startLoad(t *testing.T, phase string, workers int, pause time.Duration, req request) *load {
	l := &load{phase: phase, order: []string{phase}, phases: map[string][]outcome{}, stopc: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-l.stopc:
					return
				default:
				}
				l.mu.Lock()
				ph := l.phase
				l.mu.Unlock()
				o := req(context.Background(), w, i)
				l.mu.Lock()
				l.phases[ph] = append(l.phases[ph], o)
				l.mu.Unlock()
				time.Sleep(pause)
			}
		})
	}
	t.Cleanup(l.stop)
	return l
}

// setPhase files the requests that start from now on under name.
func (l *load) setPhase(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.phase = name
	if !slices.Contains(l.order, name) {
		l.order = append(l.order, name)
	}
}

// stop ends the load and waits for the requests in flight. Safe to call
// more than once.
func (l *load) stop() {
	l.mu.Lock()
	select {
	case <-l.stopc:
	default:
		close(l.stopc)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// outcomes returns the outcomes of phase name so far.
func (l *load) outcomes(name string) []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.phases[name])
}

// total returns the number of requests finished so far, all phases.
func (l *load) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, outs := range l.phases {
		n += len(outs)
	}
	return n
}

// summary is the figures of a set of outcomes.
type summary struct {
	n, failed int
	p50, p99  time.Duration
	max       time.Duration
	byBackend map[string]int
	firstErr  error
}

func summarize(outs []outcome) summary {
	s := summary{n: len(outs), byBackend: map[string]int{}}
	var lat []time.Duration
	for _, o := range outs {
		if o.err != nil {
			s.failed++
			if s.firstErr == nil {
				s.firstErr = o.err
			}
		} else {
			lat = append(lat, o.took)
		}
		s.byBackend[o.backend]++
	}
	slices.Sort(lat)
	s.p50, s.p99 = quantile(lat, 0.5), quantile(lat, 0.99)
	if len(lat) > 0 {
		s.max = lat[len(lat)-1]
	}
	return s
}

// quantile is the nearest-rank quantile of sorted values; 0 for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func (s summary) String() string {
	out := fmt.Sprintf("%4d requests, %d failed, P50 %v, P99 %v, max %v", s.n, s.failed,
		s.p50.Round(100*time.Microsecond), s.p99.Round(100*time.Microsecond), s.max.Round(100*time.Microsecond))
	if len(s.byBackend) > 1 {
		out += fmt.Sprintf(", by backend %v", s.byBackend)
	}
	if s.firstErr != nil {
		out += fmt.Sprintf(" (first error: %v)", s.firstErr)
	}
	return out
}

// report logs the summary of each phase of the loads and returns them by
// phase.
func report(t *testing.T, loads ...*load) map[string]summary {
	t.Helper()
	out := map[string]summary{}
	for _, l := range loads {
		l.mu.Lock()
		order := slices.Clone(l.order)
		l.mu.Unlock()
		for _, ph := range order {
			s := summarize(l.outcomes(ph))
			out[ph] = s
			t.Logf("%-22s %v", ph+":", s)
		}
	}
	return out
}

// newClient is an OpenAI SDK client of the gateway at url: no retries, so
// that every failure is counted, and a keep-alive pool as large as the load.
func newClient(url string) openai.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return openai.NewClient(option.WithBaseURL(url+"/v1"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
}

// chat returns a request that sends a non-streaming chat completion of
// model m through the SDK to one of clients (in turn), each failing after
// timeout.
func chat(timeout time.Duration, clients ...openai.Client) request {
	return func(ctx context.Context, w, i int) outcome {
		c := clients[(w+i)%len(clients)]
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var resp *http.Response
		start := time.Now()
		comp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("worker %d question %d", w, i))},
		}, option.WithResponseInto(&resp))
		o := outcome{start: start, took: time.Since(start), err: err}
		if resp != nil {
			o.backend, o.traceID = resp.Header.Get("X-Vigil-Backend"), resp.Header.Get("X-Vigil-Trace-Id")
		}
		if err == nil && (len(comp.Choices) != 1 || comp.Choices[0].Message.Content == "") {
			o.err = fmt.Errorf("empty completion %+v", comp)
		}
		return o
	}
}

// stream returns a request that streams a chat completion of model m
// through the SDK and reads it to the end; the request fails if the whole
// stream takes longer than timeout.
func stream(timeout time.Duration, client openai.Client) request {
	return func(ctx context.Context, w, i int) outcome {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var resp *http.Response
		start := time.Now()
		s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:    "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("worker %d stream %d", w, i))},
		}, option.WithResponseInto(&resp))
		var text strings.Builder
		for s.Next() {
			for _, c := range s.Current().Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		err := s.Err()
		s.Close()
		o := outcome{start: start, took: time.Since(start), err: err}
		if resp != nil {
			o.backend, o.traceID = resp.Header.Get("X-Vigil-Backend"), resp.Header.Get("X-Vigil-Trace-Id")
		}
		if err == nil && text.Len() == 0 {
			o.err = fmt.Errorf("empty stream")
		}
		return o
	}
}
