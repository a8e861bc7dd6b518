package calibrate

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRememberLabel is one response remembered and labelled, in a store
// that is full (evicting) and whose label ring wraps.
func BenchmarkRememberLabel(b *testing.B) {
	s := NewStore(10000, time.Hour, 1000)
	ids := make([]string, 1<<16)
	for i := range ids {
		ids[i] = fmt.Sprint("chatcmpl-", i)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		id := ids[i&(len(ids)-1)]
		now := t0.Add(time.Duration(i) * time.Millisecond)
		s.Remember(id, 0.8, now)
		if err := s.Label(id, i%3 != 0, now); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkCompute10k(b *testing.B) {
	pairs := synthetic(10000, 2, 3)
	b.ReportAllocs()
	for b.Loop() {
		Compute(pairs, 15)
	}
}
