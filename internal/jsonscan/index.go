package jsonscan

import "bytes"

// IndexKey is bytes.Index(b, []byte(key)), for a key that starts with a
// quote (`"usage"`, `"finish_reason":`): the cheap byte search that spares
// a scan of the many documents that do not hold the key. It searches from
// the byte after the quote: JSON is full of quotes, and bytes.Index checks
// each occurrence of its pattern's first byte before it turns to a vector
// search (the usage stripper's test of a content chunk went from 560 to
// 191 ns).
func IndexKey(b []byte, key string) int {
	if len(key) < 2 {
		return bytes.Index(b, []byte(key))
	}
	rest := key[1:]
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(rest))
		if i < 0 {
			return -1
		}
		if at := off + i - 1; at >= 0 && b[at] == key[0] {
			return at
		}
		off += i + 1
	}
}
