package jsonscan

import (
	"strings"
	"testing"
)

func TestIndexKey(t *testing.T) {
	docs := []string{``, `"`, `usage"`, `"usage"`, `x"usage"`, `usage""usage"`, `"usag"usage":{}`, `{"a":"usage","usage":null}`, `""""usage"`, `usage"usage"`}
	for _, doc := range docs {
		for _, key := range []string{`"usage"`, `"details"`, `"finish_reason":`, `"`, `u`, `""`} {
			if got, want := IndexKey([]byte(doc), key), strings.Index(doc, key); got != want {
				t.Errorf("IndexKey(%q, %q) = %d, want %d", doc, key, got, want)
			}
		}
	}
}

func FuzzIndexKey(f *testing.F) {
	f.Add([]byte(`{"usage":{}}`), `"usage"`)
	f.Fuzz(func(t *testing.T, doc []byte, key string) {
		if key == "" {
			return
		}
		if got, want := IndexKey(doc, key), strings.Index(string(doc), key); got != want {
			t.Fatalf("IndexKey(%q, %q) = %d, want %d", doc, key, got, want)
		}
	})
}
