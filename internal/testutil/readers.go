package testutil

import (
	"io"
	"math/rand/v2"
	"testing"
)

// ChunkReader returns a reader that hands out src in chunks of random
// sizes from 1 to max, drawn from r, and now and then none (0, nil): a
// body as a network delivers it, for code that must not depend on where
// reads cut it.
func ChunkReader(src []byte, r *rand.Rand, max int) io.Reader {
	return &chunkReader{src: src, r: r, max: max}
}

type chunkReader struct {
	src []byte
	r   *rand.Rand
	max int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.src) == 0 {
		return 0, io.EOF
	}
	if c.r.IntN(8) == 0 {
		return 0, nil
	}
	n := min(1+c.r.IntN(c.max), len(p), len(c.src))
	copy(p, c.src[:n])
	c.src = c.src[n:]
	return n, nil
}

// ReadInPieces reads rc to EOF with reads of random sizes from 64 bytes
// down to one, drawn from r, closes it and returns what it read: a client
// that reads a body its own way. A read error, or a reader that never
// reaches EOF, fails the test.
func ReadInPieces(t testing.TB, rc io.ReadCloser, r *rand.Rand) []byte {
	t.Helper()
	defer rc.Close()
	var out []byte
	buf := make([]byte, 64)
	for range 1 << 22 {
		n, err := rc.Read(buf[:1+r.IntN(len(buf))])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	t.Fatal("the reader never reached EOF")
	return nil
}
