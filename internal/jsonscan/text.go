package jsonscan

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Field tells which of names encoding/json would decode the member with the
// raw key into, for a struct whose fields are named names (ASCII): the
// index of the name key equals, or -1 for none, with sure true. sure is
// false when only encoding/json can tell: the key has an escape or a byte
// outside ASCII (which may fold to a name, as U+212A KELVIN SIGN folds to
// k), or it equals a name only under encoding/json's case folding. A
// caller that must agree with encoding/json falls back to it then.
func Field(key []byte, names []string) (idx int, sure bool) {
	for i, n := range names {
		if string(key) == n {
			return i, true
		}
	}
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return -1, false
		}
	}
	for _, n := range names {
		if EqualFoldASCII(key, n) {
			return -1, false
		}
	}
	return -1, true
}

// EqualFoldASCII reports whether a and b are equal under ASCII case
// folding.
func EqualFoldASCII(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
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

// Plain reports whether the raw contents of a string (as Str returns them)
// are their own decoded value: no escapes, and no bytes outside ASCII
// (encoding/json replaces invalid UTF-8).
func Plain(raw []byte) bool {
	for _, c := range raw {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Verbatim reports whether the raw contents of a string are their own
// decoded value as encoding/json decodes it: no escapes and valid UTF-8.
func Verbatim(raw []byte) bool {
	for i, c := range raw {
		if c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			return !hasByte(raw[i:], '\\') && utf8.Valid(raw[i:])
		}
	}
	return true
}

func hasByte(b []byte, c byte) bool {
	for _, x := range b {
		if x == c {
			return true
		}
	}
	return false
}

// AppendUnescaped appends the decoded value of raw, the contents of a
// string that Str read, to dst. Unpaired surrogates become U+FFFD, as in
// encoding/json; other bytes are copied as they are, so the result equals
// encoding/json's when raw is valid UTF-8 (encoding/json also replaces
// each byte of invalid UTF-8 by U+FFFD).
func AppendUnescaped(dst, raw []byte) []byte {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			dst = append(dst, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, n := hex4(raw[i+1:])
			i += n
			if utf16.IsSurrogate(r) {
				r2, n2 := rune(-1), 0
				if i+2 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					r2, n2 = hex4(raw[i+3:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 2 + n2
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, raw[i])
		}
	}
	return dst
}

// Unescape returns the decoded value of raw as AppendUnescaped does.
func Unescape(raw []byte) string {
	return string(AppendUnescaped(make([]byte, 0, len(raw)), raw))
}

// hex4 decodes the 4 hex digits at the start of b (Str checked them); it
// returns -1 and 0 if b is too short.
func hex4(b []byte) (rune, int) {
	if len(b) < 4 {
		return -1, 0
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1, 0
		}
		r = r<<4 | rune(c)
	}
	return r, 4
}

// pow10 holds the powers of ten that float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// ParseFloat converts the text of a JSON number (as Number returns it) as
// strconv.ParseFloat does, bit for bit, errors included. Numbers as Python
// writes them (repr: at most 17 significant digits, no exponent above
// 1e16) mostly take Clinger's fast path: a mantissa below 2^53 and a power
// of ten up to 10^22 are both exact in float64, so one multiplication or
// division rounds once, correctly. Everything else goes to strconv.
func ParseFloat(raw []byte) (float64, error) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	var m uint64
	nd, exp := 0, 0 // significant digits in m; decimal exponent
	for ; i < len(raw) && IsDigit(raw[i]); i++ {
		if nd >= 19 {
			return slowFloat(raw)
		}
		m = m*10 + uint64(raw[i]-'0')
		if m != 0 {
			nd++
		}
	}
	if i < len(raw) && raw[i] == '.' {
		for i++; i < len(raw) && IsDigit(raw[i]); i++ {
			if nd >= 19 {
				return slowFloat(raw)
			}
			m = m*10 + uint64(raw[i]-'0')
			if m != 0 {
				nd++
			}
			exp--
		}
	}
	if i < len(raw) || m >= 1<<53 { // an exponent part, or a wide mantissa
		return slowFloat(raw)
	}
	f := float64(m)
	switch {
	case m == 0 || exp == 0:
	case exp < 0 && exp >= -22:
		f /= pow10[-exp]
	default:
		return slowFloat(raw)
	}
	if neg {
		f = -f
	}
	return f, nil
}

func slowFloat(raw []byte) (float64, error) {
	// The conversion does not allocate: the string does not escape and a
	// number's text up to 32 bytes fits the compiler's stack buffer.
	return strconv.ParseFloat(string(raw), 64)
}
