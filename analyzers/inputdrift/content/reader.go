package content

import (
	"unicode"
	"unicode/utf8"
)

const (
	// K is the most terms of a prompt kept: the K distinct words with the
	// smallest hashes, a random subset of its vocabulary that is the same
	// for every prompt (a word kept in one prompt is kept in every prompt
	// whose other words do not crowd it out).
	K = 32
	// MaxWords is the most words of one prompt that are read.
	MaxWords = 4096
	// MaxWordBytes is the most bytes of a word that are hashed (and kept
	// as its text); a longer word is told apart by its first bytes only.
	MaxWordBytes = 32
)

// A Doc is one prompt's content: its words read and the K distinct
// terms of smallest hash. Its arrays are fixed, so a Doc reused for every
// prompt costs no allocation.
type Doc struct {
	// Words is the number of words read (at most MaxWords).
	Words int
	// heap is a max-heap on hash of the kept terms.
	heap [K]Term
	n    int
	text [K][MaxWordBytes]byte
}

// Term is one distinct term of a prompt: its hash and, when kept, its
// text in the Doc.
type Term struct {
	Hash uint32
	slot uint8 // its text's row in Doc.text
	len  uint8
}

// Terms returns the prompt's kept terms, in no order.
func (d *Doc) Terms() []Term { return d.heap[:d.n] }

// Text returns the text of t, a term of d; empty when the Reader kept no
// text.
func (d *Doc) Text(t Term) []byte { return d.text[t.slot][:t.len] }

// A Reader turns the characters of a prompt into its Doc. Reset starts a
// prompt; Rune adds a character; Break ends a text (a message, a part),
// so that no word or pair spans two; Finish completes the Doc. A Reader is
// used by one goroutine and does not allocate.
type Reader struct {
	d        *Doc
	keepText bool

	word   [MaxWordBytes]byte
	wn     int    // bytes of word
	wlen   int    // runes of the word, counted past MaxWordBytes too
	digits bool   // the word so far is digits only
	h      uint64 // FNV-1a of word[:wn]

	// capture is how many characters of a prompt are kept in text (see
	// Capture); captured counts them.
	capture, captured int
	text              []byte
}

// Reset starts reading a prompt into d. With keepText the Doc keeps its
// terms' text, for an explanation that names them; without, only hashes.
func (r *Reader) Reset(d *Doc, keepText bool) {
	*d = Doc{}
	*r = Reader{d: d, keepText: keepText, h: fnvOffset, digits: true, capture: r.capture, text: r.text[:0]}
}

// Capture makes the Reader keep the first chars characters of each
// prompt from the next Reset on, texts separated by a newline, for Text;
// 0 keeps none. The Reader reuses its buffer from prompt to prompt.
func (r *Reader) Capture(chars int) { r.capture = max(chars, 0) }

// Text returns the prompt's text kept under Capture, valid until the next
// Reset.
func (r *Reader) Text() []byte { return r.text }

// Active says whether the Reader has a Doc to read into.
func (r *Reader) Active() bool { return r != nil && r.d != nil }

const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// Rune adds one character of the prompt.
func (r *Reader) Rune(c rune) {
	if r.captured < r.capture {
		r.text = utf8.AppendRune(r.text, c)
		r.captured++
	}
	if r.d.Words >= MaxWords {
		return
	}
	switch {
	case c < utf8.RuneSelf:
		b := byte(c)
		switch {
		case b >= 'a' && b <= 'z':
			r.letter(b, false)
		case b >= 'A' && b <= 'Z':
			r.letter(b+'a'-'A', false)
		case b >= '0' && b <= '9':
			r.letter(b, true)
		default:
			r.endWord()
		}
	case isIdeograph(c):
		// A word of its own: the scripts that put no space between
		// words.
		r.endWord()
		r.rune(c)
		r.endWord()
	case unicode.IsLetter(c) || unicode.IsDigit(c) || unicode.Is(unicode.Mn, c):
		r.rune(unicode.ToLower(c))
	default:
		r.endWord()
	}
}

// isIdeograph says whether c is Han, Hiragana or Katakana.
func isIdeograph(c rune) bool {
	switch {
	case c >= 0x3040 && c <= 0x30ff, // Hiragana, Katakana
		c >= 0x3400 && c <= 0x4dbf, // Han extension A
		c >= 0x4e00 && c <= 0x9fff, // Han
		c >= 0xf900 && c <= 0xfaff: // Han compatibility
		return true
	case c < 0x20000:
		return false
	}
	return unicode.Is(unicode.Han, c)
}

// letter adds one ASCII byte of a word.
func (r *Reader) letter(b byte, digit bool) {
	r.wlen++
	r.digits = r.digits && digit
	if r.wn < MaxWordBytes {
		r.word[r.wn] = b
		r.wn++
		r.h = (r.h ^ uint64(b)) * fnvPrime
	}
}

// rune adds one character of a word, encoded as UTF-8.
func (r *Reader) rune(c rune) {
	r.wlen++
	r.digits = false
	if r.wn+utf8.RuneLen(c) > MaxWordBytes {
		r.wn = MaxWordBytes // no more bytes: the word is told by its start
		return
	}
	n := utf8.EncodeRune(r.word[r.wn:], c)
	for _, b := range r.word[r.wn : r.wn+n] {
		r.h = (r.h ^ uint64(b)) * fnvPrime
	}
	r.wn += n
}

// Break ends a text (a message, a part): words on either side make no
// pair.
func (r *Reader) Break() {
	r.endWord()
	if r.captured < r.capture && len(r.text) > 0 && r.text[len(r.text)-1] != '\n' {
		r.text = append(r.text, '\n')
		r.captured++
	}
}

// endWord counts the word in progress and keeps it among the prompt's
// terms when its hash is among the K smallest: not a number (ids, counts
// and dates say little of a subject), and not one Latin letter.
func (r *Reader) endWord() {
	if r.wlen == 0 {
		return
	}
	d := r.d
	d.Words++
	if !r.digits && (r.wlen > 1 || r.wn > 1) {
		r.term(uint32(mix(r.h)>>32) | 1)
	}
	r.wn, r.wlen, r.digits, r.h = 0, 0, true, fnvOffset
}

// term keeps h among the K smallest distinct hashes.
func (r *Reader) term(h uint32) {
	d := r.d
	if d.n == K && h >= d.heap[0].Hash {
		return
	}
	for _, t := range d.heap[:d.n] {
		if t.Hash == h {
			return
		}
	}
	var slot uint8
	if d.n < K {
		slot = uint8(d.n)
		d.n++
	} else {
		slot = d.heap[0].slot
		d.heap[0] = d.heap[d.n-1]
		d.n--
		d.down(0)
		d.n++
	}
	t := Term{Hash: h, slot: slot}
	if r.keepText {
		t.len = uint8(copy(d.text[slot][:], r.word[:r.wn]))
	}
	i := d.n - 1
	d.heap[i] = t
	for i > 0 {
		p := (i - 1) / 2
		if d.heap[p].Hash >= d.heap[i].Hash {
			break
		}
		d.heap[p], d.heap[i] = d.heap[i], d.heap[p]
		i = p
	}
}

func (d *Doc) down(i int) {
	for {
		l, big := 2*i+1, i
		if l < d.n && d.heap[l].Hash > d.heap[big].Hash {
			big = l
		}
		if r := l + 1; r < d.n && d.heap[r].Hash > d.heap[big].Hash {
			big = r
		}
		if big == i {
			return
		}
		d.heap[i], d.heap[big] = d.heap[big], d.heap[i]
		i = big
	}
}

// Finish ends the prompt.
func (r *Reader) Finish() { r.endWord() }

// mix is a 64-bit finalizer (splitmix64's): bucket and sign from
// independent-looking bits of the FNV hash.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
