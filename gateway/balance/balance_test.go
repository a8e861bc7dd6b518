package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

func newPool(t testing.TB, n int, mutate func(i int, b *config.Backend)) *upstream.Pool {
	t.Helper()
	var cfgs []config.Backend
	for i := range n {
		b := config.Backend{Name: fmt.Sprintf("b%d", i), URL: fmt.Sprintf("http://10.0.0.%d:8000", i+1), Kind: "openai", Weight: 100}
		if mutate != nil {
			mutate(i, &b)
		}
		cfgs = append(cfgs, b)
	}
	p, err := upstream.NewPool(cfgs, config.Default().Health)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func defaults() Options {
	b := config.Default().Balancer
	return Options{Strategy: b.Strategy, Weights: b.LoadWeights, QueueSaturation: b.QueueSaturation, StaleAfter: b.StaleAfter}
}

// TestWeights checks the blend: weighted mean of the fresh scores, stale and
// unknown signals dropping out, the floor, and the scores themselves.
func TestWeights(t *testing.T) {
	now := time.Unix(1764400000, 0)
	nan := math.NaN()
	tests := []struct {
		name    string
		agent   *upstream.AgentLoad
		server  *upstream.ServerLoad
		weights config.LoadWeights
		want    float64 // weight, base 100
	}{
		{"no signals: base", nil, nil, config.Default().Balancer.LoadWeights, 100},
		{"agent only", &upstream.AgentLoad{CPU: 0.5, Mem: 0.5, GPU: nan, GPUMem: nan, AsOf: now},
			nil, config.LoadWeights{CPU: 1, Mem: 1, GPU: 5}, 50},
		{"agent and server, default weights",
			&upstream.AgentLoad{CPU: 0.2, Mem: 0.4, GPU: 0.6, GPUMem: 0.9, AsOf: now},
			&upstream.ServerLoad{Waiting: 8, Running: 3, KVCache: 0.3, AsOf: now},
			config.Default().Balancer.LoadWeights,
			// (1·0.2 + 0.5·0.4 + 1·0.6 + 0·0.9 + 2·0.5 + 1·0.3) / 5.5
			100 * (1 - 2.3/5.5)},
		{"stale agent drops out", &upstream.AgentLoad{CPU: 1, Mem: 1, GPU: 1, GPUMem: 1, AsOf: now.Add(-11 * time.Second)},
			&upstream.ServerLoad{Waiting: 0, KVCache: 0.2, AsOf: now}, config.Default().Balancer.LoadWeights,
			100 * (1 - 0.2/3)},
		{"floor", &upstream.AgentLoad{CPU: 1, Mem: 1, GPU: 1, GPUMem: 1, AsOf: now},
			&upstream.ServerLoad{Waiting: math.Inf(1), KVCache: 1, AsOf: now}, config.LoadWeights{CPU: 1, KVCache: 1}, 1},
		{"zero weights: static", &upstream.AgentLoad{CPU: 1, Mem: 1, GPU: 1, GPUMem: 1, AsOf: now},
			nil, config.LoadWeights{}, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, 1, nil)
			o := defaults()
			o.Weights = tt.weights
			b := New(p, o)
			be := p.Backends()[0]
			if tt.agent != nil {
				be.StoreAgentLoad(tt.agent)
			}
			if tt.server != nil {
				be.StoreServerLoad(tt.server)
			}
			if err := b.Update(context.Background(), now); err != nil {
				t.Fatal(err)
			}
			if got := b.Weight(0); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("weight %v, want %v (state %+v)", got, tt.want, b.Snapshot().Backends[0])
			}
		})
	}
}

// TestObservedScores: latency is scored against the fastest backend, errors
// as their rate; both drop out when stale.
func TestObservedScores(t *testing.T) {
	p := newPool(t, 3, nil)
	o := defaults()
	o.Weights = config.LoadWeights{Latency: 1, Errors: 1}
	b := New(p, o)
	now := time.Now()
	bs := p.Backends()
	bs[0].ObserveLatency(100*time.Millisecond, now)
	bs[1].ObserveLatency(400*time.Millisecond, now)
	bs[2].ObserveLatency(time.Second, now.Add(-time.Minute)) // stale
	for range 3 {
		bs[1].RecordFailure(now)
	}
	bs[0].RecordSuccess(now)
	b.Update(context.Background(), now)
	s := b.Snapshot().Backends
	// b1: latency 1 − 0.1/0.4 = 0.75; errors 1 (three failures, no success).
	if got := [3]float64{s[0].Scores[Latency], s[1].Scores[Latency], s[1].Scores[Errors]}; got != [3]float64{0, 0.75, 1} {
		t.Errorf("scores %v, want [0 0.75 1]", got)
	}
	if !math.IsNaN(s[2].Scores[Latency]) || !math.IsNaN(s[2].Scores[Errors]) {
		t.Errorf("stale or unknown scores of b2: %v", s[2].Scores)
	}
	if math.Abs(s[1].Weight-100*(1-0.875)) > 1e-9 || s[0].Weight != 100 || s[2].Weight != 100 {
		t.Errorf("weights %v %v %v", s[0].Weight, s[1].Weight, s[2].Weight)
	}
}

func TestPickFilters(t *testing.T) {
	p := newPool(t, 4, func(i int, b *config.Backend) {
		switch i {
		case 0:
			b.Models = []string{"m1"}
		case 1:
			b.Models = []string{"m1", "m2"}
		case 2:
			b.Kind = "tgi"
		case 3:
			b.Models = []string{"m3"}
		}
	})
	bs := p.Backends()
	for _, strategy := range []string{Dynamic, RoundRobin, LeastRequest} {
		t.Run(strategy, func(t *testing.T) {
			o := defaults()
			o.Strategy = strategy
			b := New(p, o)
			seen := func(model string, kinds []string, exclude ...*upstream.Backend) map[string]bool {
				m := map[string]bool{}
				for range 200 {
					be, err := b.Pick(model, kinds, exclude...)
					if err != nil {
						t.Fatalf("Pick(%q, %v): %v", model, kinds, err)
					}
					m[be.Name] = true
				}
				return m
			}
			if diff := cmp.Diff(map[string]bool{"b0": true, "b1": true, "b2": true}, seen("m1", nil)); diff != "" {
				t.Errorf("m1 (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]bool{"b2": true}, seen("m1", []string{"tgi"})); diff != "" {
				t.Errorf("tgi (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(map[string]bool{"b1": true, "b2": true}, seen("m1", nil, bs[0])); diff != "" {
				t.Errorf("excluding b0 (-want +got):\n%s", diff)
			}
			if _, err := b.Pick("m3", []string{"openai"}, bs[3]); !errors.Is(err, upstream.ErrNoHealthy) {
				t.Errorf("every candidate excluded: %v, want ErrNoHealthy", err)
			}
			if _, err := b.Pick("m9", []string{"openai"}); !errors.Is(err, upstream.ErrUnknownModel) {
				t.Errorf("unknown model: %v, want ErrUnknownModel", err)
			}
			bs[3].SetHealthy(false)
			if _, err := b.Pick("m3", []string{"openai"}); !errors.Is(err, upstream.ErrNoHealthy) {
				t.Errorf("unhealthy: %v, want ErrNoHealthy", err)
			}
			bs[3].SetHealthy(true)
		})
	}
}

// TestLeastRequestPicks: the fewest in flight wins; ties rotate.
func TestLeastRequestPicks(t *testing.T) {
	p := newPool(t, 3, nil)
	o := defaults()
	o.Strategy = LeastRequest
	b := New(p, o)
	bs := p.Backends()
	defer bs[0].Acquire()()
	defer bs[1].Acquire()()
	for range 10 {
		if got, _ := b.Pick("", nil); got != bs[2] {
			t.Fatalf("picked %s, want b2 (0 in flight)", got.Name)
		}
	}
	release := bs[2].Acquire()
	seen := map[string]int{}
	for range 300 {
		got, _ := b.Pick("", nil)
		seen[got.Name]++
	}
	release()
	if len(seen) != 3 {
		t.Errorf("ties did not rotate: %v", seen)
	}
}

type fakeStore struct {
	got  map[string]float64
	give map[string]float64
	err  error
}

func (f *fakeStore) ShareWeights(_ context.Context, local map[string]float64) (map[string]float64, error) {
	f.got = local
	return f.give, f.err
}

// TestStoreSeam: weights go to the Store and its answer is used, clamped to
// [floor, base]; an error keeps the local weights.
func TestStoreSeam(t *testing.T) {
	p := newPool(t, 2, nil)
	st := &fakeStore{give: map[string]float64{"b0": 40, "b1": 5000}}
	o := defaults()
	o.Store = st
	b := New(p, o)
	p.Backends()[0].StoreServerLoad(&upstream.ServerLoad{Waiting: 8, Running: 0, KVCache: 0.5, AsOf: time.Now()})
	if err := b.Update(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]float64{"b0": 50, "b1": 100}, st.got); diff != "" {
		t.Errorf("published (-want +got):\n%s", diff)
	}
	if w0, w1 := b.Weight(0), b.Weight(1); w0 != 40 || w1 != 100 {
		t.Errorf("shared weights %v %v, want 40 100", w0, w1)
	}
	st.err = errors.New("redis down")
	if err := b.Update(context.Background(), time.Now()); err == nil || b.Weight(0) != 50 {
		t.Errorf("on error: %v, weight %v, want the error and the local 50", err, b.Weight(0))
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	p := newPool(t, 16, nil)
	for _, strategy := range []string{Dynamic, RoundRobin, LeastRequest} {
		o := defaults()
		o.Strategy = strategy
		b := New(p, o)
		kinds := []string{"openai"}
		if n := testing.AllocsPerRun(1000, func() { b.Pick("m", kinds) }); n != 0 {
			t.Errorf("%s: %v allocations per pick", strategy, n)
		}
	}
}

// BenchmarkPick measures a pick among 16 healthy backends with live
// weights: go test ./gateway/balance -bench Pick -benchmem.
func BenchmarkPick(b *testing.B) {
	p := newPool(b, 16, func(i int, c *config.Backend) { c.Weight = float64(10 + i) })
	now := time.Now()
	for i, be := range p.Backends() {
		be.StoreAgentLoad(&upstream.AgentLoad{CPU: float64(i) / 16, Mem: 0.5, GPU: float64(i) / 20, GPUMem: 0.9, AsOf: now})
		be.StoreServerLoad(&upstream.ServerLoad{Waiting: float64(i), Running: 4, KVCache: float64(i) / 16, AsOf: now})
	}
	for _, strategy := range []string{Dynamic, RoundRobin, LeastRequest} {
		b.Run(strategy, func(b *testing.B) {
			o := defaults()
			o.Strategy = strategy
			bal := New(p, o)
			bal.Update(context.Background(), now)
			kinds := []string{"openai"}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := bal.Pick("m", kinds); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}
