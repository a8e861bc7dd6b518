package app

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/internal/testutil"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state/redistest"
)

// TestReplicasShareWindows: two gateway replicas share their windows
// through a real redis-server. Redis is killed and restarted while both take
// traffic (four clients, each sending its next request on the answer to the
// last): no client request fails, and afterwards each replica's merged
// window counts exactly the responses both served.
func TestReplicasShareWindows(t *testing.T) {
	redis := redistest.Start(t)
	cfg := testConfig(simBackend(t, func(k *sim.Knobs) { k.OutputTokens = 4 }))
	cfg.State.Redis.URL = redis.URL()
	// One window holding everything, so that its count is the total.
	cfg.Analyzers.MinRequests, cfg.Analyzers.Window = 1_000_000, time.Hour
	var replicas []*App
	var urls []string
	for range 2 {
		a, url := startApp(t, cfg)
		replicas, urls = append(replicas, a), append(urls, url)
	}

	var sent, failed atomic.Int64
	// Latencies by phase: 0 Redis up, 1 Redis down, 2 Redis back.
	var phase atomic.Int32
	var latMu sync.Mutex
	lat := [3][]time.Duration{}
	load := func(stop <-chan struct{}) {
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"w%d q%d"}]}`, w, i)
					start, ph := time.Now(), phase.Load()
					resp, err := http.Post(urls[(w+i)%2]+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failed.Add(1)
					}
					sent.Add(1)
					latMu.Lock()
					lat[ph] = append(lat[ph], time.Since(start))
					latMu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	flush := func() {
		for _, a := range replicas {
			a.pipeline.Flush(t.Context())
		}
	}
	// Each phase lasts until the clients have had perPhase more answers,
	// however fast or slow the machine serves them.
	const perPhase = 300
	answered := func(what string) {
		t.Helper()
		want := sent.Load() + perPhase
		testutil.WaitFor(t, fmt.Sprintf("%d more answers %s", perPhase, what), func() bool { return sent.Load() >= want })
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); load(stop) }()
	answered("with Redis up")
	flush()
	phase.Store(1)
	redis.Stop() // Redis dies under load...
	answered("with Redis down")
	flush() // ...flushes fail and keep their buckets...
	redis.Restart(t)
	phase.Store(2)
	answered("with Redis back")
	close(stop)
	<-done

	if n := failed.Load(); n != 0 {
		t.Errorf("%d client requests failed while Redis was down", n)
	}
	total := sent.Load()
	counts := func() []int64 {
		flush()
		flush() // the second flush imports what the other replica wrote in the first
		var out []int64
		for _, a := range replicas {
			out = append(out, a.pipeline.Evaluate().Latency.Responses)
		}
		return out
	}
	var got []int64
	testutil.WaitFor(t, "merged windows", func() bool {
		got = counts()
		return got[0] == total && got[1] == total
	})
	t.Logf("%d requests over two replicas, Redis restarted in between: merged counts %v", total, got)
	for i, name := range []string{"Redis up", "Redis down", "Redis back"} {
		d := lat[i]
		slices.Sort(d)
		if len(d) > 0 {
			t.Logf("%s: %d requests, p50 %v, p99 %v", name, len(d), d[len(d)/2], d[len(d)*99/100])
		}
	}
}
