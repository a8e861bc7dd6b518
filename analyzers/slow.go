package analyzers

import (
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/exchange"
)

// A backend's slowness is how much slower than its peers it answers: the
// lower quartile of the time to first token of its latest good streamed
// answers over the upper quartile of the other backends' (see ratio), and
// the same for the longest pause within a stream, whichever is larger.
// Only streams count, with their time to the first content chunk
// (exchange.Response.FirstToken), not to the first byte: a non-streamed
// answer's first byte is its last, and Responses and Messages streams open
// with events sent before any token (response.created, message_start);
// mixed in, either would make alike backends look apart. The signals
// watch the service as clients see it; a backend the balancer routes
// around leaves them, and this is what still tells that it is slow. It compares backends with each
// other, not with a learnt baseline, so that a fault in every backend
// (which the latency signal reports) does not make one of them slow, and
// one backend's fault shows from its first few answers.
//
// The two sides are read over the same span of time: the backend's
// answers over the last alert period, or back to its speedSamples-th
// latest where that reaches further (a backend the balancer has moved off
// answers seldom), within the window the caller gives, and the others'
// answers over the same time. A change that reaches every
// backend (a slowdown, its end) then shows on both sides alike, whichever
// backend's answers come in first. Each backend keeps its last ringSize
// answers; where a busy peer's ring no longer reaches back to the start
// of that span, the span starts where it does. Memory is bounded by the
// configured backends.
type speeds struct {
	mu sync.Mutex
	m  map[string]*speedRing
}

// speedSamples is how many of a backend's latest answers its slowness
// reads at least: few enough that a backend the balancer has moved off
// within seconds has recent ones (three of four slow make it slow),
// enough that two slow answers do not.
const speedSamples = 4

// ringSize is how many answers each backend keeps: the peers' side of a
// sparse backend's span.
const ringSize = 128

// Slowness needs at least minSlowSamples answers of the backend and
// minPeerSamples of its peers (of each measure) in the span: a median of
// fewer says little.
const (
	minSlowSamples = 4
	minPeerSamples = 8
)

type speedSample struct {
	at      int64   // unix nanoseconds; 0: an empty slot
	ttft    float64 // milliseconds, when hasTTFT
	gap     float64 // longest pause within the stream, milliseconds, when hasGap
	hasTTFT bool
	hasGap  bool
}

type speedRing struct {
	s    [ringSize]speedSample
	next int
	full bool // wrapped: the oldest sample is s[next]
}

func newSpeeds() *speeds { return &speeds{m: map[string]*speedRing{}} }

// add records a good streamed answer of backend at t.
func (s *speeds) add(backend string, t time.Time, resp *exchange.Response) {
	smp := speedSample{at: t.UnixNano()}
	if resp.FirstToken > 0 {
		smp.ttft, smp.hasTTFT = float64(resp.FirstToken)/float64(time.Millisecond), true
	}
	if resp.Gaps.Count > 0 {
		smp.gap, smp.hasGap = float64(resp.Gaps.Max)/float64(time.Millisecond), true
	}
	if backend == "" || !smp.hasTTFT && !smp.hasGap {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[backend]
	if r == nil {
		r = &speedRing{}
		s.m[backend] = r
	}
	r.s[r.next] = smp
	r.next++
	if r.next == ringSize {
		r.next, r.full = 0, true
	}
}

// timed is one measure of one answer.
type timed struct {
	at int64
	v  float64
}

// slowness returns each backend's slowness as of now, counting the
// answers since now − window: each backend's over the last span or back
// to its speedSamples-th latest answer, whichever reaches further, and
// its peers' over the same time. A backend without enough answers, or
// whose peers have too few in that time, has none.
func (s *speeds) slowness(now time.Time, window, span time.Duration) map[string]float64 {
	from := now.Add(-window).UnixNano()
	type backend struct {
		ttft, gap []timed // oldest first
		covers    int64   // the oldest answer its ring still holds, when full
	}
	s.mu.Lock()
	all := make(map[string]*backend, len(s.m))
	for name, r := range s.m {
		b := &backend{}
		if r.full {
			b.covers = r.s[r.next].at
		}
		for i := range ringSize {
			x := r.s[(r.next+i)%ringSize] // oldest first
			if x.at == 0 || x.at < from {
				continue
			}
			if x.hasTTFT {
				b.ttft = append(b.ttft, timed{x.at, x.ttft})
			}
			if x.hasGap {
				b.gap = append(b.gap, timed{x.at, x.gap})
			}
		}
		all[name] = b
	}
	s.mu.Unlock()
	out := map[string]float64{}
	for name, b := range all {
		measure := func(of func(*backend) []timed) (float64, bool) {
			own := of(b)
			if len(own) < minSlowSamples {
				return 0, false
			}
			// The span: back to the backend's speedSamples-th latest
			// answer, or span, whichever reaches further.
			start := min(own[max(0, len(own)-speedSamples)].at, now.Add(-span).UnixNano())
			for other, o := range all {
				if other != name {
					start = max(start, o.covers)
				}
			}
			var mine, peers []float64
			for _, x := range own {
				if x.at >= start {
					mine = append(mine, x.v)
				}
			}
			for other, o := range all {
				if other == name {
					continue
				}
				for _, x := range of(o) {
					if x.at >= start {
						peers = append(peers, x.v)
					}
				}
			}
			return ratio(mine, peers)
		}
		r, ok := measure(func(b *backend) []timed { return b.ttft })
		if g, gok := measure(func(b *backend) []timed { return b.gap }); gok && (!ok || g > r) {
			r, ok = g, true
		}
		if ok {
			out[name] = r
		}
	}
	return out
}

// ratio is the lower quartile of own over the upper quartile of peers,
// when both have enough values and the peers' quartile is above zero: the
// backend's faster answers against the others' slower ones. A ratio of
// medians would flip while a change reaches the backends one after the
// other (a median of half slow, half fast answers is either), and a mean
// would let one stalled answer make a backend slow; this is above 1 only
// when most of the backend's answers are slower than most of the others'.
func ratio(own, peers []float64) (float64, bool) {
	if len(own) < minSlowSamples || len(peers) < minPeerSamples {
		return 0, false
	}
	p := alert.Percentile(peers, 0.75)
	if !(p > 0) {
		return 0, false
	}
	return alert.Percentile(own, 0.25) / p, true
}
