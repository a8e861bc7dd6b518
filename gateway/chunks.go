package gateway

import (
	"math"
	"math/bits"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// Counting a stream's tokens from its content chunks, for streams without
// usage: a backend
// reports usage only when asked, and never for a stream cut short, so the
// tap counts the chunks that carry generated content, per choice, as they
// pass. vLLM and TGI send one token per chunk (vLLM merges a token whose
// text is still incomplete UTF-8 into the next chunk), so the count is the
// completion tokens the client was served, give or take such merges. The
// times between consecutive content chunks of one choice are that
// choice's inter-token latencies as the client saw them.

// maxChoiceTimes bounds the choices whose gaps are timed; content of later
// choices is counted but not timed.
const maxChoiceTimes = 64

// chunkCounter counts the content chunks of one stream and times the gaps
// between them. Its zero value is ready; it is used by one goroutine.
//
// The gaps go into a fixed log-linear histogram (gapHist) rather than a
// list: a long stream costs the same few hundred bytes as a short one,
// where keeping every gap cost 8 bytes a token (64 KiB for 8,192 tokens)
// for as long as the stream lasted. Quantiles come out within half a
// bucket, 6.25 %, clamped to the exact minimum and maximum, so a stream of
// even gaps reports them exactly.
type chunkCounter struct {
	tokens int
	// first is when the first content chunk arrived, since the request
	// started (zero: none yet): a stream's time to its first token, which
	// its first byte is not where an API opens with events of its own
	// (Responses' response.created, Messages' message_start).
	first time.Duration
	// When each choice's last content chunk arrived, since the request
	// started (zero: none yet); choices after the first only for n > 1.
	last0    time.Duration
	last     *[maxChoiceTimes]time.Duration
	hist     *gapHist // from gapHists, on the first gap
	ngaps    int
	min, max time.Duration
}

// add counts the content of one chunk that arrived at the time at (since
// the request started): one token for each choice in mask (bit i: choice
// i) and extra for choices beyond maxChoiceTimes.
func (c *chunkCounter) add(mask uint64, extra int, at time.Duration) {
	if c.first == 0 && (mask != 0 || extra > 0) {
		c.first = at
	}
	c.tokens += extra
	if mask == 1 { // the common case: one choice
		c.tokens++
		c.stamp(&c.last0, at)
		return
	}
	if c.last == nil {
		c.last = new([maxChoiceTimes]time.Duration)
		c.last[0] = c.last0
	}
	for mask != 0 {
		i := bits.TrailingZeros64(mask)
		mask &^= 1 << i
		c.tokens++
		c.stamp(&c.last[i], at)
	}
}

// stamp records a content chunk at the time at for the choice whose last
// one arrived at *last.
func (c *chunkCounter) stamp(last *time.Duration, at time.Duration) {
	if c.last != nil && last == &c.last0 {
		last = &c.last[0]
	}
	if *last != 0 {
		c.gap(at - *last)
	}
	*last = at
}

func (c *chunkCounter) gap(d time.Duration) {
	d = max(d, 0)
	if c.ngaps == 0 || d < c.min {
		c.min = d
	}
	c.ngaps++
	c.max = max(c.max, d)
	if c.hist == nil {
		c.hist = gapHists.Get().(*gapHist)
	}
	c.hist.add(d)
}

// summary returns the gaps' P50, P95 (nearest rank, within half a bucket)
// and maximum, and releases the histogram.
func (c *chunkCounter) summary() (n int, p50, p95, mx time.Duration) {
	if c.ngaps == 0 {
		return 0, 0, 0, 0
	}
	h := c.hist
	p50 = min(max(h.quantile(0.5), c.min), c.max)
	p95 = min(max(h.quantile(0.95), c.min), c.max)
	n, mx = c.ngaps, c.max
	c.release()
	return n, p50, p95, mx
}

func (c *chunkCounter) release() {
	if c.hist != nil {
		clear(c.hist[:])
		gapHists.Put(c.hist)
		c.hist = nil
	}
}

// gapHist is a log-linear histogram of durations: gapSub buckets per
// power of two from 2^gapMinExp ns (about 1 µs; shorter gaps count there)
// to 2^(gapMinExp+gapOctaves) ns (about 4.6 minutes; longer gaps count in
// the last bucket). A bucket's width is an eighth of its octave, so its
// midpoint is within 6.25 % of any value in it. Counts halve together
// before one would overflow, which keeps the shape.
type gapHist [gapOctaves * gapSub]uint16

const (
	gapSub     = 8
	gapSubBits = 3
	gapMinExp  = 10
	gapOctaves = 28
)

func gapBucket(d time.Duration) int {
	v := uint64(max(d, 1<<gapMinExp))
	e := bits.Len64(v) - 1
	if e >= gapMinExp+gapOctaves {
		return len(gapHist{}) - 1
	}
	sub := int(v>>(e-gapSubBits)) & (gapSub - 1)
	return (e-gapMinExp)*gapSub + sub
}

// gapMid is the midpoint of bucket b.
func gapMid(b int) time.Duration {
	e, sub := b/gapSub+gapMinExp, b%gapSub
	width := uint64(1) << (e - gapSubBits)
	return time.Duration(uint64(gapSub+sub)*width + width/2)
}

func (h *gapHist) add(d time.Duration) {
	b := gapBucket(d)
	if h[b] == math.MaxUint16 {
		for i := range h {
			h[i] /= 2
		}
	}
	h[b]++
}

// quantile returns the midpoint of the bucket holding the q-quantile by
// the nearest-rank method.
func (h *gapHist) quantile(q float64) time.Duration {
	total := 0
	for _, n := range h {
		total += int(n)
	}
	rank := max(int(math.Ceil(q*float64(total))), 1)
	seen := 0
	for b, n := range h {
		if seen += int(n); seen >= rank {
			return gapMid(b)
		}
	}
	return gapMid(len(h) - 1)
}

// gapHists pools the gap histograms of streams.
var gapHists = sync.Pool{New: func() any { return new(gapHist) }}

// contentChoices scans one stream event (a JSON document) without
// allocating and reports which choices it carries generated content for:
// bit i of mask for choice index i < maxChoiceTimes, extra for the others.
//
// OpenAI chat: root.choices[i].delta with a non-empty "content",
// "reasoning_content" or "reasoning" string, or a non-empty "tool_calls"
// array. OpenAI completions: root.choices[i].text non-empty. TGI
// (/generate_stream): a root "token" object, one token per event. The
// choice's position is its "index" member (its place in the array when
// absent). Keys are compared as raw bytes. Invalid JSON reports what was
// recognised before the error.
func contentChoices(doc []byte) (mask uint64, extra int) {
	sc := jsonscan.New(doc, jsonscan.Options{})
	s := &sc
	if s.Peek() != '{' {
		return 0, 0
	}
	s.Enter('{')
	for n := 0; s.Member(&n); {
		key := s.Key()
		switch {
		case string(key) == "choices" && s.Peek() == '[':
			s.Enter('[')
			for pos := 0; s.Element(&pos); {
				idx, content := choice(s)
				if idx < 0 {
					idx = pos - 1 // Element counted this one
				}
				if content {
					if idx < maxChoiceTimes {
						mask |= 1 << idx
					} else {
						extra++
					}
				}
			}
		case string(key) == "token" && s.Peek() == '{':
			mask |= 1
			s.Skip()
		default:
			s.Skip()
		}
	}
	return mask, extra
}

// nonEmptyString reports whether the value at s is a string with at least
// one character, and skips it.
func nonEmptyString(s *jsonscan.Scanner) bool {
	if s.Peek() != '"' {
		s.Skip()
		return false
	}
	raw, ok := s.Str()
	return ok && len(raw) > 0
}

// nonEmptyArray reports whether the value at s is an array with at least
// one element, and skips it.
func nonEmptyArray(s *jsonscan.Scanner) bool {
	if s.Peek() != '[' {
		s.Skip()
		return false
	}
	v, ok := s.Value()
	return ok && v[jsonscan.SkipSpace(v, 1)] != ']'
}

// choice reads one element of "choices": its "index" (-1 when absent) and
// whether it carries generated content.
func choice(s *jsonscan.Scanner) (idx int, content bool) {
	idx = -1
	if !s.Enter('{') {
		return idx, false
	}
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "index":
			idx = smallInt(s)
		case "text":
			content = nonEmptyString(s) || content
		case "delta":
			content = delta(s) || content
		default:
			s.Skip()
		}
	}
	return idx, content
}

// delta reads a chat delta and reports whether it carries content.
func delta(s *jsonscan.Scanner) bool {
	if !s.Enter('{') {
		return false
	}
	content := false
	for n := 0; s.Member(&n); {
		switch string(s.Key()) {
		case "content", "reasoning_content", "reasoning":
			content = nonEmptyString(s) || content
		case "tool_calls":
			content = nonEmptyArray(s) || content
		default:
			s.Skip()
		}
	}
	return content
}

// smallInt reads a number and returns the value of its first 9 integer
// digits (a longer index is beyond maxChoiceTimes anyway), or -1 for a
// negative number or a value of another type.
func smallInt(s *jsonscan.Scanner) int {
	if !jsonscan.IsDigit(s.Peek()) {
		s.Skip()
		return -1
	}
	raw, _, ok := s.Number()
	if !ok {
		return -1
	}
	n := 0
	for i := 0; i < len(raw) && i < 9 && jsonscan.IsDigit(raw[i]); i++ {
		n = n*10 + int(raw[i]-'0')
	}
	return n
}
