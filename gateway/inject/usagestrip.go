package inject

import (
	"io"

	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// usageStripper passes an SSE response body (text/event-stream) through
// with what usage injection (usageinject.go) added taken back out, so that
// the client receives the bytes the backend would have sent it without
// stream_options.include_usage:
//
//   - a "data:" line whose document is the final usage chunk, a root
//     object whose "choices" is an empty array and whose "usage" is an
//     object (of duplicate keys the last counts), is dropped. When it is
//     the first line of its event, as vLLM and OpenAI send it, the blank
//     line that ends the event goes too; after other lines of its event
//     ("event:", "id:") were handed out, that blank line stays, and an SSE
//     client dispatches no event without data.
//   - from every other data line's document, each root "usage" member
//     (null on every chunk from OpenAI, an object on every chunk with
//     vLLM's continuous_usage_stats) is removed with its separating comma.
//
// Everything else passes unchanged: other lines, [DONE], documents that
// are not a JSON object or not valid JSON (as json.Valid decides), nested
// "usage" keys. Lines end in "\n", "\r\n" or "\r"; a line cut off by the
// end of the stream is filtered like the others.
//
// A data line is held until its end, which costs a client nothing, since an
// SSE client dispatches an event only at the blank line after it; every
// other line is passed on as its bytes arrive, and a line is handed out as
// soon as its end arrives, without waiting for more. A line longer than
// maxUsageLine is passed through unmodified: what was held goes out, the
// rest as it arrives, and the next line is filtered again; so what is held
// stays bounded. The buffer comes from strip.go's pool. A usageStripper is
// used by the one goroutine that copies the response.
type usageStripper struct {
	src  io.ReadCloser
	buf  *[]byte // input; pooled until a long line makes it grow; nil before the first Read and after Close
	r, w int     // (*buf)[r:w] is read from src and not yet handed out or dropped
	scan int     // bytes of the held line, from r, known to hold no line end
	out  []byte  // filtered bytes ready for the caller, in *buf before r
	err  error   // src's error, returned once everything is handed out
	st   usageLineState

	// eventStart: no line of the current event has been handed out.
	// dropped: a line of the current event has been dropped (and none
	// handed out), so the blank line that ends it goes too.
	eventStart, dropped bool
	dropLF              bool // the line ending in '\r' was dropped: so is a '\n' after it
}

type usageLineState uint8

const (
	usageLine  usageLineState = iota // at or in a line that may be a data line, held
	usageCR                          // after a line ending in '\r': a '\n' is part of its ending
	usageOther                       // in a line that is passed through as it arrives
)

// maxUsageLine bounds the bytes of a line a usageStripper holds. The
// longest vLLM chunk, a token with top_logprobs=20, is a few KiB.
const maxUsageLine = 1 << 20

// NewUsageStripper returns src, an SSE body of a request that had usage
// injected, with the injected usage taken out.
func NewUsageStripper(src io.ReadCloser) io.ReadCloser {
	return &usageStripper{src: src, eventStart: true}
}

// Read hands out every filtered byte ready, reading src only when none
// is.
func (s *usageStripper) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n := 0
	for {
		k := copy(p[n:], s.out)
		s.out = s.out[k:]
		n += k
		if n == len(p) {
			return n, nil
		}
		if s.r < s.w && s.step() {
			continue
		}
		if n > 0 {
			return n, nil
		}
		if s.err != nil {
			if s.r < s.w { // a line cut off by the end of the stream
				s.endLine(s.w - s.r)
				continue
			}
			return 0, s.err
		}
		s.fill()
	}
}

// Close closes src and returns the buffer to its pool.
func (s *usageStripper) Close() error {
	err := s.src.Close()
	if s.buf != nil {
		if cap(*s.buf) == stripBufSize {
			stripBufs.Put(s.buf)
		}
		s.buf, s.out, s.r, s.w = nil, nil, 0, 0
	}
	return err
}

// fill reads src into the buffer after what is held, first moving that to
// the buffer's start or growing the buffer when there is no room.
func (s *usageStripper) fill() {
	if s.buf == nil {
		s.buf = stripBufs.Get().(*[]byte)
	}
	if s.r == s.w {
		s.r, s.w = 0, 0
	}
	b := *s.buf
	if s.w == len(b) {
		if s.r > 0 {
			s.w = copy(b, b[s.r:s.w])
			s.r = 0
		} else {
			// The held line fills the buffer and is at most maxUsageLine
			// long (step passes longer lines through), so the buffer is
			// smaller than its bound.
			nb := make([]byte, min(2*len(b), maxUsageLine+stripBufSize))
			copy(nb, b[:s.w])
			if cap(b) == stripBufSize {
				stripBufs.Put(s.buf)
			}
			s.buf, b = &nb, nb
		}
	}
	m, err := s.src.Read(b[s.w:])
	s.w += m
	s.err = err
}

// step filters from (*s.buf)[s.r:s.w], which is not empty, setting s.out
// or dropping bytes. It reports false when it needs more input.
func (s *usageStripper) step() bool {
	b := (*s.buf)[:s.w]
	switch s.st {
	case usageCR:
		s.st = usageLine
		if b[s.r] == '\n' {
			if !s.dropLF {
				s.out = b[s.r : s.r+1]
			}
			s.r++
		}
		return true
	case usageOther:
		i := s.r + lineEnd(b[s.r:])
		if i < len(b) {
			s.setEnd(b[i])
			i++
		}
		s.out = b[s.r:i]
		s.r = i
		return true
	}
	line := b[s.r:]
	i := s.scan + lineEnd(line[s.scan:])
	if k := min(i, len(dataField)); string(line[:k]) != dataField[:k] {
		s.other()
		return true
	}
	if i > maxUsageLine {
		s.other() // documented: a longer line passes unmodified
		return true
	}
	if i == len(line) {
		s.scan = i
		return false
	}
	s.endLine(i)
	return true
}

// other switches to passing the current line through as it arrives.
func (s *usageStripper) other() {
	s.st, s.scan = usageOther, 0
	s.eventStart, s.dropped = false, false
}

// setEnd records a line ending byte c that is handed out.
func (s *usageStripper) setEnd(c byte) {
	s.st, s.dropLF = usageLine, false
	if c == '\r' {
		s.st = usageCR
	}
}

// endLine filters the held line, (*s.buf)[s.r:s.r+i], whose ending (if it
// has one, i.e. it is not cut off by the end of the stream) is the byte
// after it.
func (s *usageStripper) endLine(i int) {
	b := (*s.buf)[:s.w]
	line := b[s.r : s.r+i]
	end := s.r + i // the end of what is handed out
	term := end < len(b)
	if term {
		end++
	}
	s.scan = 0
	drop, blank := false, i == 0
	switch {
	case blank:
		drop = s.dropped
		s.eventStart, s.dropped = true, false
	case i >= len(dataField) && string(line[:len(dataField)]) == dataField:
		doc := line[len(dataField):]
		n, usageChunk := stripUsage(doc)
		if usageChunk {
			drop = true
			s.dropped = s.dropped || s.eventStart
			break
		}
		if n < len(doc) {
			k := len(dataField) + n
			if term {
				line[k] = b[s.r+i] // the line ending follows the shortened line
				k++
			}
			end = s.r + k
		}
		fallthrough
	default:
		s.eventStart, s.dropped = false, false
	}
	if term {
		s.setEnd(b[s.r+i])
		s.dropLF = drop
	}
	if !drop {
		s.out = b[s.r:end]
	}
	s.r += i
	if term {
		s.r++
	}
}

// usageKey is searched for in a document before it is scanned. Root keys
// are compared as raw bytes: an escaped key ("us\u0061ge") is another key
// here. vLLM and OpenAI never escape them, and a miss only leaves bytes as
// the backend sent them.
const usageKey = `"usage"`

// rootScan is what a scan of a document's root object found.
type rootScan struct {
	usages       int  // root "usage" members
	from, to     int  // the bytes to cut to remove the first of them
	choicesEmpty bool // the last root "choices" is []
	usageObject  bool // the last root "usage" is an object
}

// stripUsage removes every root "usage" member from doc in place, with its
// separating comma, and returns doc's new length; or it reports that doc
// is the final usage chunk, a root object whose last "choices" is an
// empty array and whose last "usage" is an object (later duplicate keys
// win, as in the client's JSON decoder). A doc that is not a valid JSON
// object is left alone.
func stripUsage(doc []byte) (n int, usageChunk bool) {
	if len(doc) == 0 || jsonscan.IndexKey(doc, usageKey) < 0 {
		return len(doc), false // most documents: no scan
	}
	rs, ok := scanRoot(doc)
	if !ok || rs.usages == 0 {
		return len(doc), false
	}
	if rs.choicesEmpty && rs.usageObject {
		return 0, true
	}
	for {
		doc = doc[:rs.from+copy(doc[rs.from:], doc[rs.to:])]
		if rs.usages == 1 {
			return len(doc), false
		}
		rs, _ = scanRoot(doc) // still valid: a member went with its comma
	}
}

// scanRoot scans doc, which must be a valid JSON document whose root is
// an object, and reports on its root members.
//
// The cut that removes a member starts at the comma before it, or, for
// the first member, ends at the next member's key, so that removing a
// member that was appended to an object gives back that object's bytes.
//
// It follows the nesting json.Valid accepts (jsonscan.DefaultMaxDepth), so
// that it leaves alone exactly the documents json.Valid rejects. A lower
// cap would need a second, slow path for the deeper valid documents, and
// buys little: the scan's recursion grows the stack by a few MB at most,
// on a hostile 10000-deep document; the documents scanned are the
// backend's, and only those that hold a "usage" key; and the gateway's
// encoding/json fallbacks (its tap) recurse as deep on the same responses.
func scanRoot(doc []byte) (rs rootScan, ok bool) {
	s := jsonscan.New(doc, jsonscan.Options{})
	if s.Peek() != '{' || !s.Enter('{') {
		return rs, false
	}
	comma := -1 // the comma before the current member; -1 for the first
	for n := 0; s.Member(&n); {
		key, name := s.KeyOffset(), s.Key() // before Value reads nested keys
		v, ok := s.Value()
		if !ok {
			return rs, false
		}
		valEnd := s.Pos()
		next := s.Peek() // ',' or '}', else the next Member fails
		i := s.Pos()
		switch string(name) {
		case "usage":
			if rs.usages == 0 {
				switch {
				case comma >= 0:
					rs.from, rs.to = comma, valEnd
				case next == ',':
					rs.from, rs.to = key, jsonscan.SkipSpace(doc, i+1)
				default:
					rs.from, rs.to = key, valEnd
				}
			}
			rs.usages++
			rs.usageObject = v[0] == '{'
		case "choices":
			rs.choicesEmpty = v[0] == '[' && jsonscan.SkipSpace(v, 1) == len(v)-1
		}
		comma = i
	}
	return rs, s.End()
}
