package gateway

import (
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"
)

// Counting a stream's tokens from its content chunks (issue 14): a backend
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

// maxGaps bounds the gaps kept per response; later gaps still count
// towards the maximum.
const maxGaps = 8192

// chunkCounter counts the content chunks of one stream and times the gaps
// between them. Its zero value is ready; it is used by one goroutine.
type chunkCounter struct {
	tokens int
	// When each choice's last content chunk arrived, since the request
	// started (zero: none yet); choices after the first only for n > 1.
	last0 time.Duration
	last  *[maxChoiceTimes]time.Duration
	gaps  []time.Duration // at most maxGaps, from gapBufs
	ngaps int
	max   time.Duration
}

// add counts the content of one chunk that arrived at the time at (since
// the request started): one token for each choice in mask (bit i: choice
// i) and extra for choices beyond maxChoiceTimes.
func (c *chunkCounter) add(mask uint64, extra int, at time.Duration) {
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
	c.ngaps++
	c.max = max(c.max, d)
	if len(c.gaps) < maxGaps {
		if c.gaps == nil {
			c.gaps = (*gapBufs.Get().(*[]time.Duration))[:0]
		}
		c.gaps = append(c.gaps, d)
	}
}

// summary returns the gaps' P50, P95 (nearest rank) and maximum, and
// releases the gap buffer.
func (c *chunkCounter) summary() (n int, p50, p95, mx time.Duration) {
	if c.ngaps == 0 {
		return 0, 0, 0, 0
	}
	g := c.gaps
	slices.Sort(g)
	p50, p95 = nearestRank(g, 0.5), nearestRank(g, 0.95)
	n, mx = c.ngaps, c.max
	c.release()
	return n, p50, p95, mx
}

func (c *chunkCounter) release() {
	if c.gaps != nil {
		g := c.gaps[:0]
		gapBufs.Put(&g)
		c.gaps = nil
	}
}

// nearestRank returns the q-quantile of sorted by the nearest-rank method.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// gapBufs pools the gap buffers of streams.
var gapBufs = sync.Pool{New: func() any { b := make([]time.Duration, 0, 256); return &b }}

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
	s := jscan{b: doc}
	if !s.open('{') {
		return 0, 0
	}
	for s.member() {
		key := s.key()
		if !s.colon() {
			return mask, extra
		}
		switch {
		case string(key) == "choices" && s.peek() == '[':
			s.open('[')
			for pos := 0; s.element(); pos++ {
				idx, content := s.choice()
				if idx < 0 {
					idx = pos
				}
				if content {
					if idx < maxChoiceTimes {
						mask |= 1 << idx
					} else {
						extra++
					}
				}
			}
			s.first = false
		case string(key) == "token" && s.peek() == '{':
			mask |= 1
			s.skip()
		default:
			s.skip()
		}
	}
	return mask, extra
}

// jscan is a minimal forward JSON scanner over one document: enough to
// walk objects and arrays, read keys and skip values. On malformed input
// it stops (its methods report false) rather than failing.
type jscan struct {
	b     []byte
	i     int
	first bool // at the first member or element of the current container
	bad   bool
}

func (s *jscan) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// open consumes c, the start of a container.
func (s *jscan) open(c byte) bool {
	if s.peek() != c {
		s.bad = true
		return false
	}
	s.i++
	s.first = true
	return true
}

// next moves to the next member or element of the container just opened
// (closed by end): false at its end or on an error.
func (s *jscan) next(end byte) bool {
	if s.bad {
		return false
	}
	c := s.peek()
	if c == end {
		s.i++
		return false
	}
	if !s.first {
		if c != ',' {
			s.bad = true
			return false
		}
		s.i++
	}
	s.first = false
	return s.i < len(s.b)
}

func (s *jscan) member() bool  { return s.next('}') }
func (s *jscan) element() bool { return s.next(']') }

// key reads a string and returns its raw bytes.
func (s *jscan) key() []byte {
	if s.peek() != '"' {
		s.bad = true
		return nil
	}
	start := s.i + 1
	s.str()
	if s.bad {
		return nil
	}
	return s.b[start : s.i-1]
}

func (s *jscan) colon() bool {
	if s.bad || s.peek() != ':' {
		s.bad = true
		return false
	}
	s.i++
	return true
}

// str skips a string starting at s.i (at its quote).
func (s *jscan) str() {
	for i := s.i + 1; i < len(s.b); i++ {
		switch s.b[i] {
		case '\\':
			i++
		case '"':
			s.i = i + 1
			return
		}
	}
	s.bad = true
	s.i = len(s.b)
}

// skip skips one value.
func (s *jscan) skip() {
	switch s.peek() {
	case '"':
		s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				s.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					s.first = false
					return
				}
			}
			s.i++
		}
		s.bad = true
	case 0:
		s.bad = true
	default: // number, true, false, null
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				s.first = false
				return
			}
			s.i++
		}
	}
	s.first = false
}

// nonEmptyString reports whether the value at s.i is a string with at
// least one character, and skips it.
func (s *jscan) nonEmptyString() bool {
	if s.peek() != '"' {
		s.skip()
		return false
	}
	start := s.i
	s.str()
	return !s.bad && s.i-start > 2
}

// nonEmptyArray reports whether the value at s.i is an array with at
// least one element, and skips it.
func (s *jscan) nonEmptyArray() bool {
	if s.peek() != '[' {
		s.skip()
		return false
	}
	j := s.i + 1
	for j < len(s.b) && isSpace(s.b[j]) {
		j++
	}
	empty := j < len(s.b) && s.b[j] == ']'
	s.skip()
	return !s.bad && !empty
}

// choice reads one element of "choices": its "index" (-1 when absent) and
// whether it carries generated content.
func (s *jscan) choice() (idx int, content bool) {
	idx = -1
	if s.peek() != '{' {
		s.skip()
		return idx, false
	}
	s.open('{')
	for s.member() {
		key := s.key()
		if !s.colon() {
			return idx, content
		}
		switch string(key) {
		case "index":
			idx = s.int()
		case "text":
			content = s.nonEmptyString() || content
		case "delta":
			content = s.delta() || content
		default:
			s.skip()
		}
	}
	s.first = false
	return idx, content
}

// delta reads a chat delta and reports whether it carries content.
func (s *jscan) delta() bool {
	if s.peek() != '{' {
		s.skip()
		return false
	}
	s.open('{')
	content := false
	for s.member() {
		key := s.key()
		if !s.colon() {
			return content
		}
		switch string(key) {
		case "content", "reasoning_content", "reasoning":
			content = s.nonEmptyString() || content
		case "tool_calls":
			content = s.nonEmptyArray() || content
		default:
			s.skip()
		}
	}
	s.first = false
	return content
}

// int reads a small non-negative integer; -1 for anything else.
func (s *jscan) int() int {
	s.ws()
	start, n := s.i, 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' && s.i-start < 9 {
		n = n*10 + int(s.b[s.i]-'0')
		s.i++
	}
	if s.i == start {
		s.skip()
		return -1
	}
	s.skip() // the rest of a long or fractional number
	return n
}
