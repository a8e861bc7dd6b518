package window

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"testing"
)

// codec is a Summary with its binary encoding, which the tests use to clone.
type codec[T any] interface {
	Summary[T]
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

func encode[T any, P codec[T]](t testing.TB, x *T) []byte {
	t.Helper()
	b, err := P(x).MarshalBinary()
	if err != nil {
		t.Fatalf("MarshalBinary: %v", err)
	}
	return b
}

// cloneOf deep-copies x through its encoding.
func cloneOf[T any, P codec[T]](t testing.TB, x *T) *T {
	t.Helper()
	y := new(T)
	if err := P(y).UnmarshalBinary(encode[T, P](t, x)); err != nil {
		t.Fatalf("UnmarshalBinary: %v", err)
	}
	return y
}

// merged returns a fresh x+y, leaving both alone.
func merged[T any, P codec[T]](t testing.TB, x, y *T) *T {
	t.Helper()
	z := cloneOf[T, P](t, x)
	if err := P(z).Merge(y); err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return z
}

// checkLaws checks that Merge is commutative and associative on a, b, c and
// that empty is its identity, comparing results with same (which reports a
// difference, or "" when its arguments count as equal).
func checkLaws[T any, P codec[T]](t *testing.T, empty, a, b, c *T, same func(want, got *T) string) {
	t.Helper()
	checks := []struct {
		law       string
		want, got *T
	}{
		{"a+b == b+a", merged[T, P](t, a, b), merged[T, P](t, b, a)},
		{"b+c == c+b", merged[T, P](t, b, c), merged[T, P](t, c, b)},
		{"(a+b)+c == a+(b+c)", merged[T, P](t, merged[T, P](t, a, b), c), merged[T, P](t, a, merged[T, P](t, b, c))},
		{"(a+c)+b == (c+b)+a", merged[T, P](t, merged[T, P](t, a, c), b), merged[T, P](t, merged[T, P](t, c, b), a)},
		{"a+empty == a", a, merged[T, P](t, a, empty)},
		{"empty+a == a", a, merged[T, P](t, empty, a)},
		{"empty+empty == empty", empty, merged[T, P](t, empty, empty)},
	}
	for _, c := range checks {
		if d := same(c.want, c.got); d != "" {
			t.Errorf("%s: (-want +got):\n%s", c.law, d)
		}
	}
}

// sameEncoding is the exact equality of the summaries with canonical
// encodings; view renders the difference readably.
func sameEncoding[T any, P codec[T]](t testing.TB, view func(*T) any, diff func(x, y any) string) func(want, got *T) string {
	return func(want, got *T) string {
		if d := diff(view(want), view(got)); d != "" {
			return d
		}
		if !bytes.Equal(encode[T, P](t, want), encode[T, P](t, got)) {
			return "views equal but encodings differ"
		}
		return ""
	}
}

func appendVarintForTest(b []byte, v int64) []byte { return binary.AppendVarint(b, v) }

func appendUvarintForTest(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }
