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
	"github.com/vigil-gw/vigil/internal/testutil"
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
	p, err := upstream.NewPool(cfgs, config.Default().Health, config.Default().Balancer.LatencyDecay)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func defaults() Options {
	b := config.Default().Balancer
	return Options{Strategy: b.Strategy, Prefix: b.Prefix, Weights: b.LoadWeights, QueueSaturation: b.QueueSaturation, StaleAfter: b.StaleAfter, Floor: b.Floor}
}

// mustNew is New for options a test knows to be valid.
func mustNew(tb testing.TB, p *upstream.Pool, o Options) *Balancer {
	tb.Helper()
	b, err := New(p, o)
	if err != nil {
		tb.Fatal(err)
	}
	return b
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
			// Node signals only: (1·0.2 + 0.5·0.4 + 1·0.6 + 0·0.9 + 1·0.3) / 3.5;
			// the queue enters the cost, not the weight.
			100 * (1 - 1.3/3.5)},
		{"stale agent drops out", &upstream.AgentLoad{CPU: 1, Mem: 1, GPU: 1, GPUMem: 1, AsOf: now.Add(-11 * time.Second)},
			&upstream.ServerLoad{Waiting: 0, KVCache: 0.2, AsOf: now}, config.Default().Balancer.LoadWeights,
			100 * (1 - 0.2)},
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
			b := mustNew(t, p, o)
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

// TestFloorFromConfig: the least weight is balancer.floor as configured,
// not a value of the balancer's own, and New refuses what config would
// refuse instead of putting a default in its place.
func TestFloorFromConfig(t *testing.T) {
	now := time.Unix(1764400000, 0)
	loaded := &upstream.AgentLoad{CPU: 1, Mem: 1, GPU: 1, GPUMem: 1, AsOf: now}
	for _, floor := range []float64{config.Default().Balancer.Floor, 0.25} {
		p := newPool(t, 1, nil)
		o := defaults()
		o.Floor = floor
		b := mustNew(t, p, o)
		p.Backends()[0].StoreAgentLoad(loaded)
		if err := b.Update(context.Background(), now); err != nil {
			t.Fatal(err)
		}
		if got, want := b.Weight(0), 100*floor; math.Abs(got-want) > 1e-9 {
			t.Errorf("floor %v: weight of a fully loaded backend %v, want %v", floor, got, want)
		}
	}
	for _, bad := range []func(*Options){
		func(o *Options) { o.Floor = 0 },
		func(o *Options) { o.Floor = 1.5 },
		func(o *Options) { o.Strategy = "" },
	} {
		o := defaults()
		bad(&o)
		if _, err := New(newPool(t, 1, nil), o); err == nil {
			t.Errorf("New(%+v) = nil error, want one", o)
		}
	}
}

// TestObservedScores: latency is scored against the fastest backend, errors
// as their rate, for display; neither changes the weight (the node factor),
// the error rate sets the cost's error factor.
func TestObservedScores(t *testing.T) {
	p := newPool(t, 3, nil)
	b := mustNew(t, p, defaults())
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
	if s[0].Weight != 100 || s[1].Weight != 100 || s[2].Weight != 100 {
		t.Errorf("weights %v %v %v, want 100 each", s[0].Weight, s[1].Weight, s[2].Weight)
	}
	// Error rate 1, capped at 0.99: (1 / 0.01)^1; b0 had a success only.
	if s[0].ErrorFactor != 1 || math.Abs(s[1].ErrorFactor-100) > 1e-9 {
		t.Errorf("error factors %v %v, want 1 100", s[0].ErrorFactor, s[1].ErrorFactor)
	}
}

// shares picks n times and returns each backend's share.
func shares(b *Balancer, n int) map[string]float64 {
	out := map[string]float64{}
	for range n {
		be, err := b.Pick("", nil)
		if err != nil {
			panic(err)
		}
		out[be.Name] += 1 / float64(n)
	}
	return out
}

// TestTwoChoices: the dynamic strategy sends each request to the cheaper of
// two random candidates, cost = (inflight + waiting + 1) × ttfb × error
// factor / weight.
func TestTwoChoices(t *testing.T) {
	const n = 30000
	setup := func(t *testing.T, mutate func(i int, c *config.Backend)) (*Balancer, []*upstream.Backend) {
		p := newPool(t, 3, mutate)
		o := defaults()
		o.Strategy = Dynamic
		b := mustNew(t, p, o)
		return b, p.Backends()
	}
	observeAll := func(bs []*upstream.Backend, d ...time.Duration) {
		now := time.Now()
		for i, be := range bs {
			be.ObserveLatency(d[i], now)
		}
	}
	t.Run("equal: even split", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond)
		for name, s := range shares(b, n) {
			if math.Abs(s-1.0/3) > 0.02 {
				t.Errorf("%s: share %.3f, want 1/3 ± 0.02", name, s)
			}
		}
	})
	t.Run("slow backend: never the cheaper", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 20*time.Millisecond, 30*time.Millisecond, 200*time.Millisecond)
		if s := shares(b, n); s["b2"] != 0 || math.Abs(s["b0"]-2.0/3) > 0.02 {
			t.Errorf("shares %v: want b2 0, b0 2/3 (it wins every pair it is in)", s)
		}
	})
	t.Run("within the tie band: random", func(t *testing.T) {
		for _, lat := range [][]time.Duration{
			{20 * time.Millisecond, 21 * time.Millisecond, 21500 * time.Microsecond}, // within 10 %
			{900 * time.Microsecond, 200 * time.Microsecond, 10 * time.Microsecond},  // below 1 ms: noise
		} {
			b, bs := setup(t, nil)
			observeAll(bs, lat...)
			for name, s := range shares(b, n) {
				if math.Abs(s-1.0/3) > 0.02 {
					t.Errorf("latencies %v: %s share %.3f, want 1/3 ± 0.02 (a tie)", lat, name, s)
				}
			}
		}
	})
	t.Run("in flight", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond)
		defer bs[1].Acquire()()
		if s := shares(b, n); s["b1"] != 0 {
			t.Errorf("shares %v: want b1 (one in flight) 0", s)
		}
	})
	t.Run("server queue", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond)
		now := time.Now()
		bs[0].StoreServerLoad(&upstream.ServerLoad{Waiting: 3, Running: 1, KVCache: math.NaN(), AsOf: now})
		release := bs[1].Acquire()
		defer release()
		defer bs[1].Acquire()()
		b.Update(context.Background(), now)
		// b0: 3 waiting + 1 = 4; b1: 2 in flight + 1 = 3; b2: 1.
		if s := shares(b, n); s["b0"] != 0 || math.Abs(s["b1"]-1.0/3) > 0.02 {
			t.Errorf("shares %v: want b0 0, b1 1/3 (it beats b0 only)", s)
		}
	})
	t.Run("node weight", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond)
		now := time.Now()
		for i, gpu := range []float64{0.2, 0.2, 0.95} {
			bs[i].StoreAgentLoad(&upstream.AgentLoad{CPU: 0.3, Mem: 0.3, GPU: gpu, GPUMem: 0.5, AsOf: now})
		}
		b.Update(context.Background(), now)
		st := b.Snapshot().Backends
		// (0.3 + 0.5·0.3 + gpu) / 2.5
		for i, gpu := range []float64{0.2, 0.2, 0.95} {
			if want := 100 * (1 - (0.45+gpu)/2.5); math.Abs(st[i].Weight-want) > 1e-9 {
				t.Errorf("b%d weight %v, want %v", i, st[i].Weight, want)
			}
		}
		if s := shares(b, n); s["b2"] != 0 {
			t.Errorf("shares %v: want b2 (GPU 0.95) 0 while the others are idle", s)
		}
		// Busy enough, the loaded node serves again: (0+1)/38 < (2+1)/68.
		release := bs[0].Acquire()
		defer release()
		defer bs[0].Acquire()()
		defer bs[1].Acquire()()
		defer bs[1].Acquire()()
		if s := shares(b, n); math.Abs(s["b2"]-2.0/3) > 0.02 {
			t.Errorf("shares %v: want b2 2/3 once the others have 2 in flight", s)
		}
	})
	t.Run("never measured takes its rival's latency", func(t *testing.T) {
		b, bs := setup(t, nil)
		now := time.Now()
		bs[0].ObserveLatency(10*time.Millisecond, now)
		bs[1].ObserveLatency(500*time.Millisecond, now)
		s := shares(b, n)
		// b2 ties with whichever it is drawn with: b0 ½ (beats b1, ties
		// b2), b1 ⅙ (ties b2), b2 ⅓.
		if math.Abs(s["b0"]-1.0/2) > 0.02 || math.Abs(s["b1"]-1.0/6) > 0.02 || math.Abs(s["b2"]-1.0/3) > 0.02 {
			t.Errorf("shares %v: want b0 ½, b1 ⅙, b2 ⅓", s)
		}
	})
	t.Run("cost as the admin API shows it", func(t *testing.T) {
		b, bs := setup(t, nil)
		now := time.Now()
		bs[0].ObserveLatency(10*time.Millisecond, now)
		bs[1].ObserveLatency(30*time.Millisecond, now)
		defer bs[1].Acquire()()
		// b1: (1 in flight + 1) × 30 ms / weight 100; b2, never measured,
		// the mean 20 ms.
		if c := b.Cost(1, now); math.Abs(c-2*0.030/100) > 1e-12 {
			t.Errorf("b1 cost %v, want %v", c, 2*0.030/100)
		}
		if c := b.Cost(2, now); math.Abs(c-0.020/100) > 1e-12 {
			t.Errorf("b2 (never measured) cost %v, want %v", c, 0.020/100)
		}
	})
	t.Run("an idle slow backend decays and is tried again", func(t *testing.T) {
		b, bs := setup(t, nil)
		now := time.Now()
		bs[0].ObserveLatency(100*time.Millisecond, now)
		bs[1].ObserveLatency(100*time.Millisecond, now)
		// One second, three decay times ago: 1 s × e⁻³ ≈ 50 ms now.
		bs[2].ObserveLatency(time.Second, now.Add(-3*config.Default().Balancer.LatencyDecay))
		if s := shares(b, n); math.Abs(s["b2"]-2.0/3) > 0.02 {
			t.Errorf("shares %v: want b2 2/3", s)
		}
	})
	t.Run("errors", func(t *testing.T) {
		b, bs := setup(t, nil)
		observeAll(bs, 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond)
		now := time.Now()
		bs[0].RecordFailure(now)
		bs[0].RecordSuccess(now) // error rate 0.9·1 + 0.1·0 → factor 10
		b.Update(context.Background(), now)
		if s := shares(b, n); s["b0"] != 0 {
			t.Errorf("shares %v: want b0 (90 %% errors) 0", s)
		}
	})
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
			b := mustNew(t, p, o)
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
	b := mustNew(t, p, o)
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
	b := mustNew(t, p, o)
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

// skipUnderRace skips an allocation test under the race detector, which
// makes sync.Pool drop a quarter of what it is given, so that the pooled
// Request is made anew one pick in four.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if testutil.Race {
		t.Skip("the race detector makes sync.Pool drop Requests at random")
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	skipUnderRace(t)
	p := newPool(t, 16, nil)
	for _, strategy := range []string{Dynamic, RoundRobin, LeastRequest, Prefix} {
		o := defaults()
		o.Strategy = strategy
		b := mustNew(t, p, o)
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
			bal := mustNew(b, p, o)
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
