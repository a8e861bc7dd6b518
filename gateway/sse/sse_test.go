package sse

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const fixture = "data: {\"a\":1}\n\n: comment\nevent: x\ndata:{\"b\":2}\r\n\r\ndata: [DONE]\n\n"

func TestSplitterAnyChunking(t *testing.T) {
	want := []string{`{"a":1}`, `{"b":2}`, `[DONE]`}
	for _, size := range []int{1, 2, 3, 7, len(fixture)} {
		var s Splitter
		var got []string
		for i := 0; i < len(fixture); i += size {
			end := min(i+size, len(fixture))
			s.Write([]byte(fixture[i:end]), func(p []byte) { got = append(got, string(p)) })
		}
		s.Flush(func(p []byte) { got = append(got, string(p)) })
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("chunks of %d (-want +got):\n%s", size, diff)
		}
	}
}

func TestSplitterFinalLineWithoutNewline(t *testing.T) {
	var s Splitter
	var got []string
	s.Write([]byte("data: x\ndata: tail"), func(p []byte) { got = append(got, string(p)) })
	s.Flush(func(p []byte) { got = append(got, string(p)) })
	if diff := cmp.Diff([]string{"x", "tail"}, got); diff != "" {
		t.Error(diff)
	}
}

func TestSplitterOverflowSkipsLine(t *testing.T) {
	s := Splitter{MaxLine: 16}
	var got []string
	in := "data: " + strings.Repeat("z", 40) + "\ndata: ok\n"
	for i := range len(in) {
		s.Write([]byte{in[i]}, func(p []byte) { got = append(got, string(p)) })
	}
	if diff := cmp.Diff([]string{"ok"}, got); diff != "" || s.Overflows != 1 {
		t.Errorf("overflows %d, events (-want +got):\n%s", s.Overflows, diff)
	}
}

func BenchmarkSplitter(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" the"},"logprobs":null}]}` + "\n\n")
	var s Splitter
	n := 0
	fn := func(p []byte) { n += len(p) }
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		s.Write(chunk, fn)
	}
}
