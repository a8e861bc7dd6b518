package analyzers

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/exchange"
)

// A backend's slowness is how much slower than its peers it answers. Each
// of its latest good answers is measured against the other backends'
// answers to the requests that started around the same time (see around):
//   - a stream by its time to the first content chunk
//     (exchange.Response.FirstToken, not the first byte: Responses and
//     Messages streams open with events sent before any token) over the
//     peers' upper quartile, and by its longest pause over theirs,
//     whichever is larger;
//   - a non-streamed answer, whose first byte is its last, by its latency
//     over what the peers' streams take for as many tokens: their upper
//     quartiles of time to first token and of time per token (a stream's
//     median pause). Output lengths differ by tenant and prompt; per
//     token they do not. A backend the balancer has moved off answers
//     seldom, and half of a fleet's answers may be non-streamed: counting
//     them doubles its evidence.
//
// The backend's slowness is the largest of these ratios that at least
// three quarters of its answers reach: above 1 only when most of its
// answers are slower than most of the others' around them, so one stalled
// answer does not make a backend slow. The signals watch the service as
// clients see it; a backend the balancer routes around leaves them, and
// this is what still tells that it is slow. It compares backends with each
// other, not with a learnt baseline, so that a fault in every backend
// (which the latency signal reports) does not make one of them slow, and
// one backend's fault shows from its first few answers.
//
// Answers are placed in time by when their request started, not when it
// ended: a change (a slowdown, its end) reaches the requests that start
// after it, and a long stream that ended after the change began before
// it. Each answer is compared with the peers' answers that started just
// before and just after it, half each, so that a change that reaches
// every backend is on both sides alike whichever backend's answers come
// in first, and however the few requests around the change fell among the
// backends (a span's pooled quartiles are not: a backend that happened to
// get three of the first six requests after a slowdown looked ten times
// slower than peers whose answers in the span were mostly from before
// it). An answer whose later peers have not finished yet waits for them.
// Each backend keeps its last ringSize answers; a peer's answers older
// than what its ring still holds whole are not used. Memory is bounded by
// the configured backends.
type speeds struct {
	mu sync.Mutex
	m  map[string]*speedRing
}

// speedSamples is how many of a backend's latest answers its slowness
// reads at least, where the last alert period holds fewer: few enough
// that a backend the balancer has moved off within seconds has recent
// ones (three of four slow make it slow).
const speedSamples = 4

// ringSize is how many answers each backend keeps: the peers' side of a
// sparse backend's answers.
const ringSize = 128

// Slowness needs at least minSlowSamples answers of the backend (three
// slow ones: two are not enough), each measured against minPeerSamples
// streams of its peers (of each measure): a quartile of fewer says
// little.
const (
	minSlowSamples = 3
	minPeerSamples = 8
)

// speedSample is one good answer; times in milliseconds.
type speedSample struct {
	at int64 // when its request started, unix nanoseconds; 0: an empty slot
	// A stream's time to first token, longest pause and median pause,
	// each when its has* flag is set.
	ttft, gap, itl  float64
	hasTTFT, hasGap bool
	// A non-streamed answer's latency and completion tokens; tokens 0
	// for a stream.
	latency float64
	tokens  int
}

type speedRing struct {
	s    [ringSize]speedSample
	next int
	// covers is the latest start among the answers the ring has dropped:
	// it holds every answer started after it. Answers arrive in the order
	// they end, so the oldest dropped is not always the earliest started.
	covers int64
}

func newSpeeds() *speeds { return &speeds{m: map[string]*speedRing{}} }

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// add records a good answer of backend to a request started at start.
func (s *speeds) add(backend string, start time.Time, stream bool, resp *exchange.Response) {
	smp := speedSample{at: start.UnixNano()}
	if stream {
		if resp.FirstToken > 0 {
			smp.ttft, smp.hasTTFT = millis(resp.FirstToken), true
		}
		if resp.Gaps.Count > 0 {
			smp.gap, smp.itl, smp.hasGap = millis(resp.Gaps.Max), millis(resp.Gaps.P50), true
		}
		if !smp.hasTTFT && !smp.hasGap {
			return
		}
	} else {
		// Without a token count there is nothing to scale the peers'
		// streams by.
		if resp.CompletionTokens <= 0 || resp.Latency <= 0 {
			return
		}
		smp.latency, smp.tokens = millis(resp.Latency), resp.CompletionTokens
	}
	if backend == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[backend]
	if r == nil {
		r = &speedRing{}
		s.m[backend] = r
	}
	if old := r.s[r.next].at; old != 0 {
		r.covers = max(r.covers, old)
	}
	r.s[r.next] = smp
	r.next = (r.next + 1) % ringSize
}

// timed is one measure of one answer: when its request started, and the
// backend that answered.
type timed struct {
	at      int64
	v       float64
	backend string
}

// measures are every backend's streams' measures, each by start.
type measures struct {
	ttft, gap, itl []timed
}

// around returns the upper quartile of the values of the half answers of
// other backends that started last at or before at and of the half that
// started first after it, none at or before clip; false when either side
// has too few or the quartile is not above zero.
func around(list []timed, at, clip int64, own string) (float64, bool) {
	const half = minPeerSamples / 2
	var arr [minPeerSamples]float64
	vals := arr[:0]
	i, _ := slices.BinarySearchFunc(list, at, func(x timed, at int64) int {
		if x.at <= at {
			return -1
		}
		return 1
	})
	for j := i - 1; j >= 0 && len(vals) < half && list[j].at > clip; j-- {
		if list[j].backend != own {
			vals = append(vals, list[j].v)
		}
	}
	if len(vals) < half {
		return 0, false
	}
	for j := i; j < len(list) && len(vals) < 2*half; j++ {
		if list[j].backend != own {
			vals = append(vals, list[j].v)
		}
	}
	if len(vals) < 2*half {
		return 0, false
	}
	q := alert.Percentile(vals, 0.75)
	return q, q > 0
}

// ratio is how many times slower than the other backends' answers around
// it x is; false when they have nothing to measure it by yet.
func (m *measures) ratio(x speedSample, own string, clip int64) (float64, bool) {
	ttft, hasTTFT := around(m.ttft, x.at, clip, own)
	if x.tokens > 0 {
		itl, ok := around(m.itl, x.at, clip, own)
		if !ok || !hasTTFT {
			return 0, false
		}
		return x.latency / (ttft + float64(x.tokens-1)*itl), true
	}
	var v float64
	ok := false
	if x.hasTTFT && hasTTFT {
		v, ok = x.ttft/ttft, true
	}
	if x.hasGap {
		if gap, gapOK := around(m.gap, x.at, clip, own); gapOK {
			v, ok = max(v, x.gap/gap), true
		}
	}
	return v, ok
}

// slowness returns each backend's slowness as of now, from the answers
// started since now − window: each backend's latest answers that can be
// measured, those of the last span and at least speedSamples. A backend
// without enough of them has none.
func (s *speeds) slowness(now time.Time, window, span time.Duration) map[string]float64 {
	from := now.Add(-window).UnixNano()
	type backend struct {
		answers []speedSample // by start, oldest first
		covers  int64
	}
	var m measures
	s.mu.Lock()
	all := make(map[string]*backend, len(s.m))
	for name, r := range s.m {
		b := &backend{covers: r.covers}
		for _, x := range r.s {
			if x.at == 0 || x.at < from {
				continue
			}
			b.answers = append(b.answers, x)
			if x.hasTTFT {
				m.ttft = append(m.ttft, timed{x.at, x.ttft, name})
			}
			if x.hasGap {
				m.gap = append(m.gap, timed{x.at, x.gap, name})
				m.itl = append(m.itl, timed{x.at, x.itl, name})
			}
		}
		all[name] = b
	}
	s.mu.Unlock()
	byStart := func(x, y timed) int { return cmp.Compare(x.at, y.at) }
	slices.SortFunc(m.ttft, byStart)
	slices.SortFunc(m.gap, byStart)
	slices.SortFunc(m.itl, byStart)
	out := map[string]float64{}
	var ratios []float64
	recent := now.Add(-span).UnixNano()
	for name, b := range all {
		slices.SortFunc(b.answers, func(x, y speedSample) int { return cmp.Compare(x.at, y.at) })
		// The others' answers started after clip are all held.
		var clip int64
		for other, o := range all {
			if other != name {
				clip = max(clip, o.covers)
			}
		}
		ratios = ratios[:0]
		for i := len(b.answers) - 1; i >= 0; i-- {
			x := b.answers[i]
			if len(ratios) >= speedSamples && x.at < recent {
				break
			}
			if r, ok := m.ratio(x, name, clip); ok {
				ratios = append(ratios, r)
			}
		}
		if len(ratios) < minSlowSamples {
			continue
		}
		// The largest ratio that at least three quarters of the
		// answers reach.
		slices.Sort(ratios)
		out[name] = ratios[len(ratios)/4]
	}
	return out
}
