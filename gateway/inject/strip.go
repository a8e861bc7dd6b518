package inject

import (
	"bytes"
	"io"
	"sync"

	"github.com/vigil-gw/vigil/gateway/request"
	"github.com/vigil-gw/vigil/internal/jsonscan"
)

// stripper passes a response body through with the value of each
// root.choices[i].logprobs that is an object or an array replaced by null:
// it takes injected logprobs (inject.go) back out of what the client
// receives. vLLM (and the simulator) answer a request without logprobs with
// "logprobs":null in every choice, so the client gets the bytes it would
// have got without injection. Scalars (null included) pass unchanged.
// A Responses stripper (NewResponsesStripper) does the same for the
// Responses API's paths (responsesPaths).
//
// In SSE mode each "data:" line is one JSON document, as vLLM and OpenAI
// send them; other lines ("event:", comments, blank lines) and [DONE] pass.
// Otherwise the whole body is one JSON document.
//
// It never holds more than one input buffer: a byte-level JSON state
// machine tracks strings, escapes and nesting, knows only whether it is on
// a path to a replaced value, and writes "null" in place of the value while
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
	return &stripper{src: src, sse: sse, f: logprobsFilter{paths: chatPaths}}
}

// NewResponsesStripper is NewStripper for a Responses API body whose
// request had fields f: the logprobs of its text delta and done events, of
// its output_text content parts, and the echoed top_logprobs go back to
// what the backend sends for the client's request (responsesPaths).
func NewResponsesStripper(src io.ReadCloser, sse bool, f *request.Fields) io.ReadCloser {
	paths := responsesPaths[0]
	if f.TopLogprobs == 'n' {
		paths = responsesPaths[1]
	}
	return &stripper{src: src, sse: sse, f: logprobsFilter{paths: paths}}
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
					s.pfx, s.line, s.f = 0, lineData, logprobsFilter{paths: s.f.paths}
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
				if s.f.pending() {
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

// pathNode is a node of the tree of paths whose values a filter replaces:
// an object's members that matter (keys, with next[i] the node of
// keys[i]'s value), an array's elements (elem), or a value to replace by
// repl. Objects and arrays are replaced; numbers and literals (null
// included) too when scalar is set; strings never.
type pathNode struct {
	keys   []string
	next   []*pathNode
	elem   *pathNode
	repl   string
	scalar bool
}

// chatPaths: root.choices[*].logprobs becomes null.
var chatPaths = &pathNode{keys: []string{"choices"}, next: []*pathNode{
	{elem: &pathNode{keys: []string{"logprobs"}, next: []*pathNode{{repl: nullValue}}}},
}}

// newResponsesPaths returns the paths of the Responses API's logprobs,
// each replaced by what the backend sends when they were not included
// (vLLM, and the simulator after it): "logprobs":[] on the text delta and
// done events (root), null in output_text content parts (part,
// item.content[*], response.output[*].content[*] in events,
// output[*].content[*] in a plain body), and top for the echoed request's
// top_logprobs (response in events, root in a plain body).
func newResponsesPaths(top string) *pathNode {
	part := &pathNode{keys: []string{"logprobs"}, next: []*pathNode{{repl: nullValue}}}
	content := &pathNode{elem: part}
	item := &pathNode{keys: []string{"content"}, next: []*pathNode{content}}
	output := &pathNode{elem: item}
	echo := &pathNode{repl: top, scalar: true}
	return &pathNode{
		keys: []string{"logprobs", "part", "item", "response", "output", "top_logprobs"},
		next: []*pathNode{
			{repl: "[]"}, part, item,
			{keys: []string{"output", "top_logprobs"}, next: []*pathNode{output, echo}},
			output, echo,
		},
	}
}

// responsesPaths are newResponsesPaths for a request without
// top_logprobs, which vLLM echoes as its default 0, and for one with
// "top_logprobs": null, echoed as null.
var responsesPaths = [2]*pathNode{newResponsesPaths("0"), newResponsesPaths(nullValue)}

// maxPathDepth bounds the containers a logprobsFilter follows: deeper
// than any path it replaces.
const maxPathDepth = 8

// logprobsFilter is the JSON state machine of a stripper. Its zero value
// but for paths is ready for a new document.
type logprobsFilter struct {
	paths *pathNode // what is replaced
	depth int       // containers open
	// open[d] is the path node of the container at depth d+1, nil when
	// it is on no path (or is not the container the node wants).
	open [maxPathDepth]*pathNode

	wantKey bool      // the next string is a key of a tracked object
	hit     *pathNode // the node of the key just read
	val     *pathNode // the node of the value after the current ':'

	str, esc bool // in a string; after its backslash

	// Matching a key against the keys of node, with its \u escapes
	// decoded: cand has a bit for each key still possible.
	inKey bool
	node  *pathNode
	cand  uint32
	kpos  int // bytes matched
	uhex  int // hex digits of a \u escape still to read
	ucode rune

	dropping  bool   // skipping a value being replaced
	scalar    bool   // the skipped value is a number or literal
	dropDepth int    // depth at which the skipped value ends
	repl      string // the replacement being written
	rleft     int    // bytes of repl still to write
}

const nullValue = "null"

// dropStop marks the bytes that end a run of skipped bytes while dropping
// a container.
var dropStop = [256]bool{'"': true, '{': true, '[': true, '}': true, ']': true}

// flushNull writes what is left of a pending replacement into out.
func (f *logprobsFilter) flushNull(out []byte) int {
	if f.rleft == 0 {
		return 0
	}
	w := copy(out, f.repl[len(f.repl)-f.rleft:])
	f.rleft -= w
	return w
}

// pending reports whether part of a replacement is still to be written.
func (f *logprobsFilter) pending() bool { return f.rleft > 0 }

// current returns the path node of the innermost open container.
func (f *logprobsFilter) current() *pathNode {
	if f.depth == 0 || f.depth > maxPathDepth {
		return nil
	}
	return f.open[f.depth-1]
}

// keyDepth reports whether strings at the current depth can be keys that
// matter.
func (f *logprobsFilter) keyDepth() bool {
	n := f.current()
	return n != nil && len(n.keys) > 0
}

// filter filters in into out and returns the bytes consumed and written.
// It stops when out is full, except while dropping, which writes nothing.
func (f *logprobsFilter) filter(out, in []byte) (n, w int) {
	for n < len(in) {
		if f.pending() {
			w += f.flushNull(out[w:])
			if f.pending() {
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
		if f.dropping {
			if f.scalar {
				switch c {
				case ',', '}', ']', ':', '"', '{', '[', ' ', '\t', '\n', '\r':
					// The scalar ended: c is the filter's again.
					f.dropping, f.scalar = false, false
					continue
				}
				n++
				continue
			}
			n++
			switch c {
			case '"':
				f.str = true
			case '{', '[':
				f.depth++
			case '}', ']':
				f.depth--
				f.dropping = f.depth > f.dropDepth
			default:
				// Numbers, commas, colons, literals: skip up to the
				// next byte that matters in one go.
				for n < len(in) && !dropStop[in[n]] {
					n++
				}
			}
			continue
		}
		n++
		if jsonscan.IsSpace(c) {
			out[w] = c
			w++
			continue
		}
		hit, val := f.hit, f.val
		f.hit, f.val = nil, nil
		switch c {
		case '"':
			f.str = true
			if f.wantKey && f.keyDepth() {
				f.inKey, f.node, f.kpos, f.uhex = true, f.current(), 0, 0
				f.cand = 1<<len(f.node.keys) - 1
			}
		case ':':
			f.wantKey = false
			f.val = hit
		case ',':
			f.wantKey = f.keyDepth()
		case '{', '[':
			switch {
			case f.depth == 0:
				val = f.paths
			case val == nil:
				if cur := f.current(); cur != nil && cur.elem != nil {
					val = cur.elem
				}
			}
			if val != nil && val.repl != "" {
				f.dropping, f.dropDepth, f.repl, f.rleft = true, f.depth, val.repl, len(val.repl)
				f.depth++
				continue
			}
			if val != nil && (c == '{' && len(val.keys) == 0 || c == '[' && val.elem == nil) {
				val = nil
			}
			if f.depth < maxPathDepth {
				f.open[f.depth] = val
			}
			f.depth++
			f.wantKey = c == '{' && val != nil
		case '}', ']':
			f.wantKey = false
			if f.depth > 0 {
				f.depth--
				if f.depth < maxPathDepth {
					f.open[f.depth] = nil
				}
			}
		default:
			if val != nil && val.repl != "" && val.scalar {
				// A number or literal: dropped up to its end.
				f.dropping, f.scalar, f.repl, f.rleft = true, true, val.repl, len(val.repl)
				continue
			}
		}
		out[w] = c
		w++
	}
	return n, w
}

// keyByte advances the match of a key against the keys of f.node by one
// byte of the key's JSON text.
func (f *logprobsFilter) keyByte(c byte) {
	switch {
	case f.esc:
		f.esc = false
		if c == 'u' {
			f.uhex, f.ucode = 4, 0
		} else {
			f.cand = 0 // \" \\ \/ \b \f \n \r \t: none is in a wanted key
		}
	case c == '\\':
		f.esc = true
	case c == '"':
		f.str, f.inKey = false, false
		f.wantKey = false
		if f.uhex > 0 {
			return
		}
		for i, k := range f.node.keys {
			if f.cand&(1<<i) != 0 && len(k) == f.kpos {
				f.hit = f.node.next[i]
				return
			}
		}
	case f.uhex > 0:
		d := unhex(c)
		if d < 0 {
			f.cand, f.uhex = 0, 0
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

// matchKey drops the candidate keys whose next byte is not r.
func (f *logprobsFilter) matchKey(r rune) {
	for i, k := range f.node.keys {
		if f.cand&(1<<i) != 0 && (f.kpos >= len(k) || rune(k[f.kpos]) != r) {
			f.cand &^= 1 << i
		}
	}
	f.kpos++
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
