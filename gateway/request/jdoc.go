package request

import (
	"strconv"
)

// jdoc is a strict forward JSON scanner for the fast paths that read a few
// members of a request or response body without encoding/json's
// reflection (issue 15). It validates what it passes over as
// encoding/json's scanner does, but it does not decode: a fast path that
// meets anything it does not handle exactly as encoding/json would (a
// syntax error, a type error, an escaped or non-ASCII key, a key that
// matches a field only case-insensitively, deep nesting) sets giveUp, and
// its caller decodes the document with encoding/json instead, so the
// result, errors included, stays encoding/json's. A jdoc is used by one
// goroutine.
type jdoc struct {
	b      []byte
	i      int
	k      []byte // the key of the member being scanned
	giveUp bool
	// noStrings: string scans (d.string) check their value but do not
	// keep it.
	noStrings bool
}

// maxScanDepth is the nesting the fast paths follow; deeper documents go
// to encoding/json (whose own limit is 10000).
const maxScanDepth = 64

func (d *jdoc) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (d *jdoc) peek() byte {
	d.ws()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// end reports whether only white space is left.
func (d *jdoc) end() bool {
	d.ws()
	return !d.giveUp && d.i == len(d.b)
}

// strClass marks the bytes that end a run of plain string content.
var strClass = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// str scans the string at d.i (at its quote) and returns its raw content
// between the quotes and whether that is plain: no escapes and no bytes
// outside ASCII, so that it is its own decoded value.
func (d *jdoc) str() (raw []byte, plain bool) {
	b := d.b
	start := d.i + 1
	plain = true
	for i := start; i < len(b); i++ {
		c := b[i]
		if !strClass[c] {
			if c >= 0x80 {
				plain = false
			}
			continue
		}
		switch {
		case c == '"':
			d.i = i + 1
			return b[start:i], plain
		case c == '\\':
			plain = false
			if i+1 >= len(b) {
				d.giveUp = true
				return nil, false
			}
			i++
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					d.giveUp = true
					return nil, false
				}
				i += 4
			default:
				d.giveUp = true
				return nil, false
			}
		default: // a control character
			d.giveUp = true
			return nil, false
		}
	}
	d.giveUp = true
	return nil, false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num scans the number at d.i and returns its bytes.
func (d *jdoc) num() []byte {
	b, i := d.b, d.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		d.giveUp = true
		return nil
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			d.giveUp = true
			return nil
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			d.giveUp = true
			return nil
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	d.i = i
	return b[start:i]
}

// lit scans the literal word at d.i.
func (d *jdoc) lit(word string) {
	if len(d.b)-d.i >= len(word) && string(d.b[d.i:d.i+len(word)]) == word {
		d.i += len(word)
		return
	}
	d.giveUp = true
}

// skip scans one value of any kind and returns its first byte.
func (d *jdoc) skip(depth int) byte {
	c := d.peek()
	switch c {
	case '"':
		d.str()
	case '{':
		if depth >= maxScanDepth {
			d.giveUp = true
			return c
		}
		d.i++
		for n := 0; d.member(n); n++ {
			d.skip(depth + 1)
		}
	case '[':
		if depth >= maxScanDepth {
			d.giveUp = true
			return c
		}
		d.i++
		for n := 0; d.element(n); n++ {
			d.skip(depth + 1)
		}
	case 't':
		d.lit("true")
	case 'f':
		d.lit("false")
	case 'n':
		d.lit("null")
	default:
		d.num()
	}
	return c
}

// The containers: open one with d.open, then loop
//
//	for n := 0; d.member(n); n++ { ... d.k is the key; scan the value ... }
//
// (or d.element for an array) until it reports false, at the container's
// end or on an error (giveUp).

// open consumes c, '{' or '['.
func (d *jdoc) open(c byte) bool {
	if d.peek() != c {
		d.giveUp = true
		return false
	}
	d.i++
	return true
}

// next moves to item n of the container being scanned (closed by end).
func (d *jdoc) next(n int, end byte) bool {
	if d.giveUp {
		return false
	}
	c := d.peek()
	if c == end {
		d.i++
		return false
	}
	if n > 0 {
		if c != ',' {
			d.giveUp = true
			return false
		}
		d.i++ // what follows must be an item: checked by its scan
	}
	return true
}

// member moves to member n of an object: its key is in d.k, the value
// is next. The key must be plain (no escapes, ASCII only): any other may
// match a field under encoding/json's case folding, and ends the fast path.
func (d *jdoc) member(n int) bool {
	if !d.next(n, '}') {
		return false
	}
	if d.peek() != '"' {
		d.giveUp = true
		return false
	}
	raw, plain := d.str()
	if d.giveUp || !plain || d.peek() != ':' {
		d.giveUp = true
		return false
	}
	d.i++
	d.k = raw
	return true
}

// element moves to element n of an array.
func (d *jdoc) element(n int) bool { return d.next(n, ']') }

// objectOrNull scans the start of an object, or null: it reports whether
// an object starts. Anything else is a type error and ends the fast path.
func (d *jdoc) objectOrNull() bool {
	switch d.peek() {
	case 'n':
		d.lit("null")
	case '{':
		d.i++
		return true
	default:
		d.giveUp = true
	}
	return false
}

// known moves to the next member of the object being scanned whose key
// is one of keys, skipping the others; *n counts the members passed. A
// key that matches one of keys only case-insensitively ends the fast
// path.
func (d *jdoc) known(n *int, keys []string) bool {
	for d.member(*n) {
		*n++
		for _, k := range keys {
			if string(d.k) == k {
				return true
			}
		}
		if foldsTo(d.k, keys...) {
			d.giveUp = true
			return false
		}
		d.skip(2)
	}
	return false
}

// float scans a number or null for an optional float64 member.
func (d *jdoc) float(n *Num) {
	switch d.peek() {
	case 'n':
		d.lit("null")
		*n = Num{}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		raw := d.num()
		if d.giveUp {
			return
		}
		v, err := strconv.ParseFloat(string(raw), 64)
		if err != nil {
			d.giveUp = true // out of range: encoding/json's type error
			return
		}
		*n = Num{v, true}
	default:
		d.giveUp = true // a type error
	}
}

// int scans a number or null for an int member: null leaves *v alone,
// as encoding/json does.
func (d *jdoc) int(v *int) {
	switch d.peek() {
	case 'n':
		d.lit("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		raw := d.num()
		if d.giveUp {
			return
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			d.giveUp = true // fractional, exponent or out of range: a type error
			return
		}
		*v = int(n)
	default:
		d.giveUp = true
	}
}

// string scans a string or null for a string member: null leaves *v
// alone. A string with escapes or non-ASCII bytes ends the fast path
// (encoding/json decodes escapes and replaces invalid UTF-8).
func (d *jdoc) string(v *string) {
	switch d.peek() {
	case 'n':
		d.lit("null")
	case '"':
		raw, plain := d.str()
		if d.giveUp {
			return
		}
		if !plain {
			d.giveUp = true
			return
		}
		if !d.noStrings {
			*v = string(raw)
		}
	default:
		d.giveUp = true
	}
}

// foldsTo reports whether key, ASCII, equals one of names when compared
// without case but is none of them exactly: encoding/json would decode it
// into that field.
func foldsTo(key []byte, names ...string) bool {
	hasUpper := false
	for _, c := range key {
		if 'A' <= c && c <= 'Z' {
			hasUpper = true
			break
		}
	}
	if !hasUpper {
		return false
	}
	for _, n := range names {
		if len(n) == len(key) && equalFoldASCII(key, n) {
			return true
		}
	}
	return false
}

func equalFoldASCII(a []byte, b string) bool {
	for i := range a {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
