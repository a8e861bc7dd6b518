package main

import (
	"bufio"
	"context"
	"io"
	"sync"
	"time"
)

// The access log is buffered: one write(2) per request was a sixth of the
// gateway's system calls. Lines reach the output at most
// logFlushInterval late, always whole, and all of them before vigil serve
// returns.

// logFlushInterval bounds how late an access log line is written.
const logFlushInterval = 200 * time.Millisecond

// logBufferSize is the buffer of the access log: at 10,000 requests a
// second of ~400-byte lines it fills in about 15 ms, when it is written
// out at once.
const logBufferSize = 64 << 10

// bufferedLog is an io.Writer that buffers whole writes (lines) and writes
// them out when the buffer is full, on every tick of run, and on Flush. It
// is safe for concurrent use.
type bufferedLog struct {
	mu sync.Mutex
	bw *bufio.Writer
}

func newBufferedLog(w io.Writer) *bufferedLog {
	return &bufferedLog{bw: bufio.NewWriterSize(w, logBufferSize)}
}

// Write buffers p. A line that does not fit in what is left of the buffer
// is written after what is buffered, never split between two writes of
// the buffer.
func (b *bufferedLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(p) > b.bw.Available() && b.bw.Buffered() > 0 {
		if err := b.bw.Flush(); err != nil {
			return 0, err
		}
	}
	return b.bw.Write(p)
}

// Flush writes out what is buffered.
func (b *bufferedLog) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bw.Flush()
}

// run flushes every logFlushInterval until ctx is done, then once more.
func (b *bufferedLog) run(ctx context.Context) {
	t := time.NewTicker(logFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.Flush()
			return
		case <-t.C:
			b.Flush()
		}
	}
}
