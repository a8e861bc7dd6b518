package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/vigil-gw/vigil/internal/testutil"
)

// writes records every Write it receives.
type writes struct {
	mu  sync.Mutex
	got []string
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, string(p))
	return len(p), nil
}

func (w *writes) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.got...)
}

// TestBufferedLog: lines are held until a tick or the end, every write of
// the buffer holds whole lines, and nothing is lost.
func TestBufferedLog(t *testing.T) {
	out := &writes{}
	b := newBufferedLog(out)
	line := strings.Repeat("x", 399) + "\n"
	n := 2*logBufferSize/len(line) + 10 // more than two buffers
	for range 3 {
		b.Write([]byte(line))
	}
	if got := out.all(); len(got) != 0 {
		t.Fatalf("3 short lines were written at once (%d writes), want them buffered", len(got))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.run(ctx)
	}()
	testutil.WaitFor(t, "a tick's write", func() bool { return len(out.all()) != 0 })
	if got := out.all(); len(got) != 1 || got[0] != strings.Repeat(line, 3) {
		t.Fatalf("after a tick: %d writes, want the 3 lines in one", len(got))
	}
	for range n - 3 {
		b.Write([]byte(line))
	}
	big := strings.Repeat("y", 2*logBufferSize) + "\n" // larger than the buffer
	b.Write([]byte(big))
	b.Write([]byte(line))
	cancel()
	<-done
	var all bytes.Buffer
	for i, w := range out.all() {
		if !strings.HasSuffix(w, "\n") {
			t.Fatalf("write %d ends mid-line (%d bytes)", i, len(w))
		}
		all.WriteString(w)
	}
	if want := strings.Repeat(line, n) + big + line; all.String() != want {
		t.Fatalf("wrote %d bytes, want %d: lines lost or reordered", all.Len(), len(want))
	}
}
