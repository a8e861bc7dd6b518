package gateway

import (
	"io"
	"math/rand/v2"
	"testing"

	"github.com/vigil-gw/vigil/gateway/rewrite"
)

// The stripper helpers FuzzTap reads with; package rewrite's tests have
// their own.

// chunkReader hands out src in chunks of random sizes, now and then none.
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

// readStripped reads a stripper over src with reads of random sizes,
// down to one byte.
func readStripped(t testing.TB, src io.Reader, sse bool, r *rand.Rand) []byte {
	s := rewrite.NewStripper(io.NopCloser(src), sse)
	defer s.Close()
	var out []byte
	buf := make([]byte, 64)
	for range 1 << 20 {
		n, err := s.Read(buf[:1+r.IntN(len(buf))])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	t.Fatal("stripper never reached EOF")
	return nil
}
