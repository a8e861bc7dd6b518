package state_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

// stores runs f against the in-memory store and a Redis store on a real
// redis-server.
func stores(t *testing.T, f func(t *testing.T, s state.Store)) {
	t.Run("memory", func(t *testing.T) { f(t, state.NewMemory()) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c, err := state.OpenRedis(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		f(t, state.NewRedis(c, "test"))
	})
	t.Run("redis-cluster", func(t *testing.T) {
		c, err := state.OpenRedis(redistest.StartCluster(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		f(t, state.NewRedis(c, "test"))
	})
}

func TestBucketsAtMostOnce(t *testing.T) {
	stores(t, func(t *testing.T, s state.Store) {
		ctx := context.Background()
		put := func(replica string, seq uint64, start int64, v string) {
			t.Helper()
			if err := s.PutBuckets(ctx, "drift", replica, seq, []state.Bucket{{Start: start, Payload: []byte(v)}}, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
		put("a", 1, 10, "a1")
		put("b", 1, 10, "b1")
		put("a", 2, 10, "a2")
		put("a", 2, 10, "a2-retry") // same sequence: a retried flush, ignored
		put("a", 1, 10, "a1-late")  // older sequence delivered late: ignored
		put("a", 256, 11, "a256")   // sequences compare as numbers
		put("a", 255, 11, "a255")
		got, err := s.Buckets(ctx, "drift", 9, 11)
		if err != nil {
			t.Fatal(err)
		}
		var flat []string
		for _, b := range got {
			flat = append(flat, b.Replica+"@"+string(rune('0'+b.Start-10))+"="+string(b.Payload))
		}
		slices.Sort(flat)
		want := []string{"a@0=a2", "a@1=a256", "b@0=b1"}
		if !slices.Equal(flat, want) {
			t.Errorf("buckets %v, want %v", flat, want)
		}
		if other, _ := s.Buckets(ctx, "latency", 0, 100); len(other) != 0 {
			t.Errorf("signals leak into each other: %v", other)
		}
	})
}

func TestDocsAndLeases(t *testing.T) {
	stores(t, func(t *testing.T, s state.Store) {
		ctx := context.Background()
		if _, err := s.Get(ctx, "baseline"); !errors.Is(err, state.ErrNotFound) {
			t.Errorf("missing doc: %v", err)
		}
		if err := s.Set(ctx, "baseline", []byte("x"), 0); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Get(ctx, "baseline"); err != nil || string(v) != "x" {
			t.Errorf("doc = %q, %v", v, err)
		}
		ok1, err1 := s.Acquire(ctx, "alerts", "r1", 200*time.Millisecond)
		ok2, _ := s.Acquire(ctx, "alerts", "r2", 200*time.Millisecond)
		renew, _ := s.Acquire(ctx, "alerts", "r1", 200*time.Millisecond)
		if err1 != nil || !ok1 || ok2 || !renew {
			t.Errorf("lease: r1 %v (%v), r2 %v, renew %v", ok1, err1, ok2, renew)
		}
		time.Sleep(300 * time.Millisecond)
		if ok, _ := s.Acquire(ctx, "alerts", "r2", time.Second); !ok {
			t.Error("an expired lease was not taken over")
		}
	})
}
