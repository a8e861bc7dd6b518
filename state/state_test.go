package state_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/vigil-gw/vigil/internal/testutil"
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

// TestExchange: Exchange writes several series, then reads several spans
// (its own writes included), results in the order asked, with the
// sequence rule of PutBuckets.
func TestExchange(t *testing.T) {
	stores(t, func(t *testing.T, s state.Store) {
		ctx := context.Background()
		b := func(start int64, v string) state.Bucket { return state.Bucket{Start: start, Payload: []byte(v)} }
		if err := s.PutBuckets(ctx, "latency", "b", 1, []state.Bucket{b(5, "b-lat")}, time.Minute); err != nil {
			t.Fatal(err)
		}
		puts := []state.SeriesBuckets{
			{Signal: "drift", Buckets: []state.Bucket{b(5, "a-d5"), b(6, "a-d6")}, TTL: time.Minute},
			{Signal: "latency", Buckets: []state.Bucket{b(5, "a-lat")}, TTL: time.Minute},
			{Signal: "empty"},
		}
		reads := []state.SeriesSpan{{Signal: "latency", From: 0, To: 9}, {Signal: "drift", From: 6, To: 6}, {Signal: "none", From: 1, To: 0}}
		got, err := s.Exchange(ctx, "a", 7, puts, reads)
		if err != nil {
			t.Fatal(err)
		}
		flat := func(rb []state.ReplicaBucket) []string {
			var out []string
			for _, r := range rb {
				out = append(out, fmt.Sprintf("%s@%d=%s", r.Replica, r.Start, r.Payload))
			}
			slices.Sort(out)
			return out
		}
		want := [][]string{{"a@5=a-lat", "b@5=b-lat"}, {"a@6=a-d6"}, nil}
		if len(got) != len(want) {
			t.Fatalf("%d results for %d reads", len(got), len(reads))
		}
		for i := range want {
			if g := flat(got[i]); !slices.Equal(g, want[i]) {
				t.Errorf("read %d (%+v): %v, want %v", i, reads[i], g, want[i])
			}
		}
		// An older sequence is ignored, as by PutBuckets.
		if _, err := s.Exchange(ctx, "a", 6, []state.SeriesBuckets{{Signal: "drift", Buckets: []state.Bucket{b(6, "late")}, TTL: time.Minute}}, nil); err != nil {
			t.Fatal(err)
		}
		if g, _ := s.Buckets(ctx, "drift", 6, 6); !slices.Equal(flat(g), []string{"a@6=a-d6"}) {
			t.Errorf("after an older sequence: %v", flat(g))
		}
	})
}

// TestRedisExchangeOneRoundTrip: Redis's Exchange sends its writes and
// reads of many series as one pipeline.
func TestRedisExchangeOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c, err := state.OpenRedis(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := &countHook{}
	c.AddHook(h)
	s := state.NewRedis(c, "test")
	var puts []state.SeriesBuckets
	var reads []state.SeriesSpan
	for i := range 20 {
		name := fmt.Sprintf("series-%d", i)
		puts = append(puts, state.SeriesBuckets{Signal: name, Buckets: []state.Bucket{{Start: 1, Payload: []byte("x")}, {Start: 2, Payload: []byte("y")}}, TTL: time.Minute})
		reads = append(reads, state.SeriesSpan{Signal: name, From: 0, To: 3})
	}
	got, err := s.Exchange(context.Background(), "a", 1, puts, reads)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 20 || len(got[19]) != 2 {
		t.Fatalf("read back %d series, the last with %d buckets", len(got), len(got[19]))
	}
	if h.pipelines.Load() != 1 || h.commands.Load() != 0 {
		t.Errorf("%d pipelines and %d lone commands for 20 series, want one pipeline", h.pipelines.Load(), h.commands.Load())
	}
}

// countHook counts what a go-redis client sends, apart from a new
// connection's set-up (HELLO, CLIENT SETINFO): pipelines and lone commands.
type countHook struct{ pipelines, commands atomic.Int64 }

func setUp(cmd redis.Cmder) bool { return cmd.Name() == "hello" || cmd.Name() == "client" }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !setUp(cmd) {
			h.commands.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, setUp) {
			h.pipelines.Add(1)
		}
		return next(ctx, cmds)
	}
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
		// A lease held: long enough that a slow machine does not see it
		// expire between these calls.
		ok1, err1 := s.Acquire(ctx, "alerts", "r1", time.Minute)
		ok2, _ := s.Acquire(ctx, "alerts", "r2", time.Minute)
		renew, _ := s.Acquire(ctx, "alerts", "r1", time.Minute)
		if err1 != nil || !ok1 || ok2 || !renew {
			t.Errorf("lease: r1 %v (%v), r2 %v, renew %v", ok1, err1, ok2, renew)
		}
		// A lease that expires is taken over, however long that takes to
		// show.
		if ok, err := s.Acquire(ctx, "expiring", "r1", 200*time.Millisecond); err != nil || !ok {
			t.Fatalf("lease: r1 %v (%v)", ok, err)
		}
		testutil.WaitFor(t, "an expired lease to be taken over", func() bool {
			ok, _ := s.Acquire(ctx, "expiring", "r2", time.Minute)
			return ok
		})
	})
}

// TestClaim: the first claim of a key wins and every later claimer gets
// it back; claims of free keys in the same call are each their own; a
// claimed key outlives its ttl only while claimed again.
func TestClaim(t *testing.T) {
	stores(t, func(t *testing.T, s state.Store) {
		ctx := context.Background()
		got, err := s.Claim(ctx, map[string][]byte{"home:a": []byte("b0"), "home:b": []byte("b1")}, time.Minute)
		if err != nil || string(got["home:a"]) != "b0" || string(got["home:b"]) != "b1" {
			t.Fatalf("first claims: %q, %v", got, err)
		}
		got, err = s.Claim(ctx, map[string][]byte{"home:a": []byte("b2"), "home:c": []byte("b2")}, time.Minute)
		if err != nil || string(got["home:a"]) != "b0" || string(got["home:c"]) != "b2" || len(got) != 2 {
			t.Fatalf("second claims: %q, %v; want a kept at b0, c taken", got, err)
		}
		if got, err := s.Claim(ctx, map[string][]byte{}, time.Minute); err != nil || len(got) != 0 {
			t.Errorf("no claims: %q, %v", got, err)
		}
		// A short ttl, not claimed again: the key expires and a new claim
		// takes it. (Each claim renews the ttl, the loser's too.)
		if _, err := s.Claim(ctx, map[string][]byte{"home:x": []byte("b0")}, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "a claim to expire", func() bool {
			_, err := s.Get(ctx, "home:x")
			return errors.Is(err, state.ErrNotFound)
		})
		if got, err := s.Claim(ctx, map[string][]byte{"home:x": []byte("b1")}, time.Minute); err != nil || string(got["home:x"]) != "b1" {
			t.Errorf("claim after expiry: %q, %v", got, err)
		}
	})
}

// TestClaimHomes: Weights shares prefix homes by anchor through Claim.
func TestClaimHomes(t *testing.T) {
	ctx := context.Background()
	s := state.NewMemory()
	a := &state.Weights{Store: s, Replica: "a", MaxAge: time.Minute}
	b := &state.Weights{Store: s, Replica: "b", MaxAge: time.Minute}
	if got, err := a.ClaimHomes(ctx, map[uint64]string{1: "x", 0xffffffffffffffff: "y"}, time.Minute); err != nil || got[1] != "x" || got[0xffffffffffffffff] != "y" {
		t.Fatalf("a: %v, %v", got, err)
	}
	if got, err := b.ClaimHomes(ctx, map[uint64]string{1: "z", 2: "z"}, time.Minute); err != nil || got[1] != "x" || got[2] != "z" || len(got) != 2 {
		t.Fatalf("b: %v, %v; want 1 at a's x, 2 at z", got, err)
	}
}
