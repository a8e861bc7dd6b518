// Package sse splits a Server-Sent Events byte stream into the payloads of its
// data lines, incrementally, without copying complete lines.
package sse

import "bytes"

// DefaultMaxLine bounds the partial line a Splitter keeps between writes.
const DefaultMaxLine = 1 << 20

// A Splitter finds "data:" lines in a byte stream fed to it in arbitrary
// pieces. Payloads that lie wholly inside one Write are handed out as
// sub-slices of the caller's buffer; only a line split across writes is
// copied, into a buffer capped at MaxLine bytes (longer lines are skipped and
// counted in Overflows). A Splitter is used by one goroutine; the zero value
// is ready to use.
type Splitter struct {
	// MaxLine caps the partial line kept between writes. Zero means DefaultMaxLine.
	MaxLine int
	// Overflows counts lines dropped for exceeding MaxLine.
	Overflows int

	partial  []byte
	skipping bool // inside a line that overflowed; drop until '\n'
}

var dataPrefix = []byte("data:")

// Write feeds p to the splitter and calls fn with the payload of every data
// line completed by p (the text after "data:" with one leading space
// removed, without the line ending). The payload is valid only during the
// call. Write keeps no reference to p.
func (s *Splitter) Write(p []byte, fn func(payload []byte)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.keep(p)
			return
		}
		line := p[:i]
		p = p[i+1:]
		switch {
		case s.skipping:
			s.skipping = false
			continue
		case len(s.partial) > 0:
			if !s.keep(line) {
				s.skipping = false
				continue
			}
			line = s.partial
			s.partial = s.partial[:0]
		}
		emit(line, fn)
	}
}

// Flush emits a final line that lacked a line ending, as at end of stream.
func (s *Splitter) Flush(fn func(payload []byte)) {
	if len(s.partial) > 0 && !s.skipping {
		emit(s.partial, fn)
	}
	s.partial = s.partial[:0]
	s.skipping = false
}

// keep appends b to the partial line, reporting false (and entering skip
// mode) when that would exceed the cap.
func (s *Splitter) keep(b []byte) bool {
	if s.skipping {
		return false
	}
	max := s.MaxLine
	if max <= 0 {
		max = DefaultMaxLine
	}
	if len(s.partial)+len(b) > max {
		s.partial = s.partial[:0]
		s.skipping = true
		s.Overflows++
		return false
	}
	s.partial = append(s.partial, b...)
	return true
}

func emit(line []byte, fn func([]byte)) {
	line = bytes.TrimSuffix(line, []byte{'\r'})
	if !bytes.HasPrefix(line, dataPrefix) {
		return
	}
	line = line[len(dataPrefix):]
	if len(line) > 0 && line[0] == ' ' {
		line = line[1:]
	}
	fn(line)
}
