package rewrite

import (
	"bytes"
	"io"
	"sync"

	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// stripper passes a response body through with the value of each
// root.choices[i].logprobs that is an object or an array replaced by null:
// it takes injected logprobs (inject.go) back out of what the client
// receives. vLLM (and the simulator) answer a request without logprobs with
// "logprobs":null in every choice, so the client gets the bytes it would
// have got without injection. Scalars (null included) pass unchanged.
//
// In SSE mode each "data:" line is one JSON document, as vLLM and OpenAI
// send them; other lines ("event:", comments, blank lines) and [DONE] pass.
// Otherwise the whole body is one JSON document.
//
// It never holds more than one input buffer: a byte-level JSON state
// machine tracks strings, escapes and nesting, knows only whether it is at
// root.choices[*].logprobs, and writes "null" in place of the value while
// skipping the value's bytes. Keys are compared after decoding their
// escapes, as a JSON parser would. Invalid JSON is passed through with the
// same rules and never panics. A stripper is used by the one goroutine that
// copies the response.
type stripper struct {
	src  io.ReadCloser
	sse  bool
	buf  *[]byte // pooled input buffer; nil before the first Read and after Close
	in   []byte  // input read but not yet filtered
	err  error   // src's error, returned once in is drained
	line lineState
	pfx  int // bytes of "data:" matched at the start of the line
	f    logprobsFilter
}

// stripBufSize is the input buffer's size: half the proxy's copy buffer, so
// that the output of a full buffer fits one Read almost always.
const stripBufSize = 16 << 10

var stripBufs = sync.Pool{New: func() any { b := make([]byte, stripBufSize); return &b }}

// NewStripper returns src, a response body of a request that had logprobs
// injected, with them taken out as a stripper does; sse says whether src
// is an SSE stream (else one JSON document).
func NewStripper(src io.ReadCloser, sse bool) io.ReadCloser {
	return &stripper{src: src, sse: sse}
}

// Read returns filtered bytes as soon as any are ready: it reads src again
// only when everything read so far has been handed out or dropped, so SSE
// events are not held back.
func (s *stripper) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		w := s.f.flushNull(p)
		if len(s.in) > 0 && w < len(p) {
			var n, k int
			if s.sse {
				n, k = s.filterSSE(p[w:], s.in)
			} else {
				n, k = s.f.filter(p[w:], s.in)
			}
			s.in = s.in[n:]
			w += k
		}
		if w > 0 {
			return w, nil
		}
		if s.err != nil {
			return 0, s.err
		}
		if s.buf == nil {
			s.buf = stripBufs.Get().(*[]byte)
		}
		m, err := s.src.Read(*s.buf)
		s.in, s.err = (*s.buf)[:m], err
	}
}

// Close closes src and returns the buffer to its pool.
func (s *stripper) Close() error {
	err := s.src.Close()
	if s.buf != nil {
		stripBufs.Put(s.buf)
		s.buf, s.in = nil, nil
	}
	return err
}

type lineState uint8

const (
	lineStart lineState = iota // matching "data:" at the start of a line
	lineData                   // in the payload of a data line
	lineOther                  // in any other line
)

const dataField = "data:"

// filterSSE filters in into out line by line, returning the bytes consumed
// and written. It stops when out is full.
func (s *stripper) filterSSE(out, in []byte) (n, w int) {
	for n < len(in) {
		switch s.line {
		case lineStart:
			if w == len(out) {
				return n, w
			}
			c := in[n]
			switch {
			case c == '\n' || c == '\r':
				s.pfx = 0
			case c == dataField[s.pfx]:
				s.pfx++
				if s.pfx == len(dataField) {
					s.pfx, s.line, s.f = 0, lineData, logprobsFilter{}
				}
			default:
				s.pfx, s.line = 0, lineOther
			}
			out[w] = c
			n++
			w++
		case lineOther:
			i := lineEnd(in[n:])
			k := copy(out[w:], in[n:n+i])
			n += k
			w += k
			if k < i {
				return n, w
			}
			if n < len(in) {
				s.line = lineStart
			}
		case lineData:
			i := lineEnd(in[n:])
			cn, cw := s.f.filter(out[w:], in[n:n+i])
			n += cn
			w += cw
			if cn < i {
				return n, w
			}
			if n < len(in) { // at the line's end; a cut-off value's "null" goes first
				w += s.f.flushNull(out[w:])
				if s.f.null > 0 {
					return n, w
				}
				s.line = lineStart
			}
		}
	}
	return n, w
}

// lineEnd returns the index of the first '\n' or '\r' in b, or len(b).
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		i = len(b)
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		i = j
	}
	return i
}

// What follows a matched key's colon.
const (
	valNone     uint8 = iota
	valChoices        // the value of root.choices
	valLogprobs       // the value of root.choices[i].logprobs
)

// logprobsFilter is the JSON state machine of a stripper. Its zero value
// is ready for a new document.
type logprobsFilter struct {
	depth int // containers open

	root    bool // the container at depth 1 is an object
	choices bool // the container at depth 2 is root.choices, an array
	choice  bool // the container at depth 3 is an object in root.choices

	wantKey bool  // the next string at depth 1 (root) or 3 (choice) is a key
	hit     bool  // the key just read is the one wanted at its depth
	val     uint8 // what the value after the current ':' is

	str, esc bool // in a string; after its backslash

	// Matching a key against target, with its \u escapes decoded.
	inKey  bool
	kbad   bool // the key is not target
	kpos   int  // bytes of target matched
	target string
	uhex   int // hex digits of a \u escape still to read
	ucode  rune

	dropping  bool // skipping a logprobs value
	dropDepth int  // depth at which the skipped value ends
	null      int  // bytes of "null" still to write
}

const nullValue = "null"

// flushNull writes what is left of a pending "null" into out.
func (f *logprobsFilter) flushNull(out []byte) int {
	w := 0
	for f.null > 0 && w < len(out) {
		out[w] = nullValue[len(nullValue)-f.null]
		f.null--
		w++
	}
	return w
}

// keyDepth reports whether strings at the current depth can be keys that
// matter: root's ("choices") and a choice's ("logprobs").
func (f *logprobsFilter) keyDepth() bool {
	return (f.depth == 1 && f.root) || (f.depth == 3 && f.choice)
}

// filter filters in into out and returns the bytes consumed and written.
// It stops when out is full, except while dropping, which writes nothing.
func (f *logprobsFilter) filter(out, in []byte) (n, w int) {
	for n < len(in) {
		if f.null > 0 {
			w += f.flushNull(out[w:])
			if f.null > 0 {
				return n, w
			}
		}
		if w == len(out) && !f.dropping {
			return n, w
		}
		c := in[n]
		if f.str {
			switch {
			case f.inKey:
				f.keyByte(c)
			case f.esc:
				f.esc = false
			case c == '\\':
				f.esc = true
			case c == '"':
				f.str = false
			default:
				// The bulk of JSON text: copy up to the next quote or
				// backslash in one go.
				j := n + 1
				for j < len(in) && in[j] != '"' && in[j] != '\\' {
					j++
				}
				if f.dropping {
					n = j
				} else {
					k := copy(out[w:], in[n:j])
					n += k
					w += k
				}
				continue
			}
			n++
			if !f.dropping {
				out[w] = c
				w++
			}
			continue
		}
		n++
		if f.dropping {
			switch c {
			case '"':
				f.str = true
			case '{', '[':
				f.depth++
			case '}', ']':
				f.depth--
				f.dropping = f.depth > f.dropDepth
			}
			continue
		}
		if jsonscan.IsSpace(c) {
			out[w] = c
			w++
			continue
		}
		hit, val := f.hit, f.val
		f.hit, f.val = false, valNone
		switch c {
		case '"':
			f.str = true
			if f.wantKey && f.keyDepth() {
				f.inKey, f.kbad, f.kpos, f.uhex = true, false, 0, 0
				f.target = "logprobs"
				if f.depth == 1 {
					f.target = "choices"
				}
			}
		case ':':
			f.wantKey = false
			if hit {
				f.val = valChoices
				if f.depth == 3 {
					f.val = valLogprobs
				}
			}
		case ',':
			f.wantKey = f.keyDepth()
		case '{', '[':
			if val == valLogprobs {
				f.dropping, f.dropDepth, f.null = true, f.depth, len(nullValue)
				f.depth++
				continue
			}
			switch {
			case f.depth == 0 && c == '{':
				f.root, f.wantKey = true, true
			case f.depth == 1 && c == '[' && val == valChoices:
				f.choices = true
			case f.depth == 2 && c == '{' && f.choices:
				f.choice, f.wantKey = true, true
			}
			f.depth++
		case '}', ']':
			f.wantKey = false
			if f.depth > 0 {
				f.depth--
				switch f.depth {
				case 0:
					f.root = false
				case 1:
					f.choices = false
				case 2:
					f.choice = false
				}
			}
		}
		out[w] = c
		w++
	}
	return n, w
}

// keyByte advances the match of a key against f.target by one byte of the
// key's JSON text.
func (f *logprobsFilter) keyByte(c byte) {
	switch {
	case f.esc:
		f.esc = false
		if c == 'u' {
			f.uhex, f.ucode = 4, 0
		} else {
			f.kbad = true // \" \\ \/ \b \f \n \r \t: none is in a wanted key
		}
	case c == '\\':
		f.esc = true
	case c == '"':
		f.str, f.inKey = false, false
		f.hit = !f.kbad && f.uhex == 0 && f.kpos == len(f.target)
		f.wantKey = false
	case f.uhex > 0:
		d := unhex(c)
		if d < 0 {
			f.kbad, f.uhex = true, 0
			return
		}
		f.ucode = f.ucode<<4 | d
		if f.uhex--; f.uhex == 0 {
			f.matchKey(f.ucode)
		}
	default:
		f.matchKey(rune(c))
	}
}

func (f *logprobsFilter) matchKey(r rune) {
	if f.kbad {
		return
	}
	if f.kpos < len(f.target) && rune(f.target[f.kpos]) == r {
		f.kpos++
		return
	}
	f.kbad = true
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return rune(c-'A') + 10
	}
	return -1
}
