package balance

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/gateway/balance/affinity"
	"github.com/vigil-gw/vigil/gateway/upstream"
	"github.com/vigil-gw/vigil/state"
)

func prefixBalancer(t testing.TB, p *upstream.Pool) *Balancer {
	t.Helper()
	o := defaults()
	o.Strategy = Prefix
	// The guard's tables below are written for these thresholds, not
	// for whatever the defaults become.
	o.Prefix.GuardAbs, o.Prefix.GuardRel = 4, 1.5
	return mustNew(t, p, o)
}

// pickFor is PickFor then, on success, Picked, as the gateway calls them:
// the chosen backend holds the prompt from then on.
func pickFor(b *Balancer, model string, kinds []string, k *affinity.Key, exclude ...*upstream.Backend) (*upstream.Backend, Decision, error) {
	be, d, err := b.PickFor(model, kinds, k, exclude...)
	if err == nil {
		b.Picked(be, k)
	}
	return be, d, err
}

// key makes a prompt key of n blocks: tenant sets the anchor and the
// first blocks, turn the later ones (blocks [shared, n) differ by turn).
func key(tenant, turn uint64, shared, n int) *affinity.Key {
	k := &affinity.Key{N: n, Chars: n * 256, Anchor: tenant*7919 + 1}
	for i := range n {
		k.Blocks[i] = tenant<<32 | uint64(i) + 1
		if i >= shared {
			k.Blocks[i] ^= turn << 48
		}
	}
	return k
}

func TestPrefixPicks(t *testing.T) {
	p := newPool(t, 3, nil)
	b := prefixBalancer(t, p)
	bs := p.Backends()

	first, d, err := pickFor(b, "m", nil, key(1, 1, 4, 8))
	if err != nil {
		t.Fatal(err)
	}
	if d.Strategy != Prefix || d.Reason != ReasonPlacement || d.Blocks != 8 || d.Matched != 0 || d.Preferred != first || d.GuardOverride {
		t.Errorf("first request: %+v, want placement on %s", d, first.Name)
	}
	// The next turn shares the first 4 blocks: same backend, by match.
	next, d, _ := pickFor(b, "m", nil, key(1, 2, 4, 10))
	if next != first || d.Reason != ReasonMatch || d.Matched != 4 {
		t.Errorf("next turn: %s %+v, want %s by a match of 4", next.Name, d, first.Name)
	}
	// The same request again: all 8 blocks.
	if _, d, _ = pickFor(b, "m", nil, key(1, 1, 4, 8)); d.Matched != 8 {
		t.Errorf("repeat: matched %d, want 8", d.Matched)
	}
	// The longest match wins over a shorter one elsewhere.
	b.Index().Record(key(1, 1, 4, 8).Chain()[:2], indexOf(bs, other(bs, first)))
	if got, d, _ := pickFor(b, "m", nil, key(1, 1, 4, 8)); got != first || d.Matched != 8 {
		t.Errorf("longest match: %s %+v", got.Name, d)
	}
	// Excluded (a retry): never the tried backend.
	if got, _, _ := pickFor(b, "m", nil, key(1, 1, 4, 8), first); got == first {
		t.Error("picked an excluded backend")
	}
	// Short prompts and no key go by load.
	short := key(2, 1, 1, 1)
	short.Chars = 100
	if _, d, _ := pickFor(b, "m", nil, short); d.Reason != ReasonShort || d.Preferred != nil {
		t.Errorf("short prompt: %+v", d)
	}
	if _, d, _ := pickFor(b, "m", nil, nil); d.Reason != ReasonShort {
		t.Errorf("no key: %+v", d)
	}
	if _, d, _ := pickFor(b, "m", nil, &affinity.Key{}); d.Reason != ReasonShort {
		t.Errorf("no blocks: %+v", d)
	}
	// Other strategies say so and ignore the key.
	o := defaults()
	o.Strategy = Dynamic
	if _, d, _ := mustNew(t, p, o).PickFor("m", nil, key(1, 1, 4, 8)); d.Strategy != Dynamic || d.Reason != ReasonNone {
		t.Errorf("dynamic: %+v", d)
	}
}

func indexOf(bs []*upstream.Backend, be *upstream.Backend) int {
	for i, x := range bs {
		if x == be {
			return i
		}
	}
	return -1
}

func other(bs []*upstream.Backend, be *upstream.Backend) *upstream.Backend {
	return bs[(indexOf(bs, be)+1)%len(bs)]
}

// TestPrefixTies: backends that hold the same prefix are told apart by
// rendezvous, whatever their load within the guard; past it, the request
// spills to another holder first.
func TestPrefixTies(t *testing.T) {
	p := newPool(t, 3, nil)
	b := prefixBalancer(t, p)
	bs := p.Backends()
	k := key(5, 1, 8, 8)
	b.Index().Record(k.Chain(), 0)
	b.Index().Record(k.Chain(), 2)
	// Equal cost: the rendezvous order of the two, every time.
	want := bs[0]
	if affinity.Score(k.Anchor, b.picker.(*prefixPicker).names[2], 100) > affinity.Score(k.Anchor, b.picker.(*prefixPicker).names[0], 100) {
		want = bs[2]
	}
	for range 20 {
		if got, d, _ := pickFor(b, "m", nil, k); got != want || d.Reason != ReasonMatch {
			t.Fatalf("equal cost: %s %+v, want %s", got.Name, d, want.Name)
		}
	}
	// Busier, within the guard: still the rendezvous choice. Ties do not
	// go by load, or a tenant the guard once spilled to a second holder
	// would alternate between the two for good.
	var releases []func()
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for range 4 {
		releases = append(releases, want.Acquire())
	}
	if got, d, _ := pickFor(b, "m", nil, k); got != want || d.GuardOverride {
		t.Errorf("busier tie within the guard: %s %+v, want %s", got.Name, d, want.Name)
	}
	// Beyond it (5 over 0): the other holder, not the backend that holds
	// nothing, though both are idle.
	releases = append(releases, want.Acquire())
	holder := bs[0]
	if want == bs[0] {
		holder = bs[2]
	}
	if got, d, _ := pickFor(b, "m", nil, k); got != holder || !d.GuardOverride || d.Reason != ReasonLoad {
		t.Errorf("spill: %s %+v, want the other holder %s", got.Name, d, holder.Name)
	}
}

// TestPrefixGuard: the preferred backend is passed over only when it
// exceeds the least loaded by more than guard_abs and more than guard_rel
// times.
func TestPrefixGuard(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name     string
		inflight [3]int
		waiting  [3]float64 // NaN: unknown
		override bool
	}{
		{"idle", [3]int{0, 0, 0}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, false},
		{"abs not exceeded: 4 over 0", [3]int{4, 0, 0}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, false},
		{"both exceeded: 5 over 0", [3]int{5, 0, 0}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, true},
		{"rel not exceeded: 15 vs 10", [3]int{15, 10, 10}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, false},
		{"rel exceeded: 16 vs 10", [3]int{16, 10, 12}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, true},
		{"abs not exceeded though rel is: 6 vs 2", [3]int{6, 2, 3}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, false},
		{"the server's queue counts", [3]int{1, 0, 0}, [3]float64{6, 0, 0}, true},
		{"queues even it out", [3]int{6, 0, 0}, [3]float64{0, 6, 6}, false},
		{"the least loaded decides, not the mean", [3]int{6, 0, 20}, [3]float64{math.NaN(), math.NaN(), math.NaN()}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, 3, nil)
			b := prefixBalancer(t, p)
			bs := p.Backends()
			for i, be := range bs {
				for range tt.inflight[i] {
					defer be.Acquire()()
				}
				if !math.IsNaN(tt.waiting[i]) {
					be.StoreServerLoad(&upstream.ServerLoad{Waiting: tt.waiting[i], Running: 0, KVCache: math.NaN(), AsOf: now})
				}
			}
			if err := b.Update(context.Background(), now); err != nil {
				t.Fatal(err)
			}
			k := key(9, 1, 8, 8)
			b.Index().Record(k.Chain(), 0)
			got, d, err := pickFor(b, "m", nil, k)
			if err != nil {
				t.Fatal(err)
			}
			if d.Preferred != bs[0] || d.Matched != 8 {
				t.Fatalf("preferred %v matched %d, want b0 and 8", d.Preferred, d.Matched)
			}
			if d.GuardOverride != tt.override || (got != bs[0]) != tt.override {
				t.Errorf("picked %s, override %v; want override %v", got.Name, d.GuardOverride, tt.override)
			}
			if tt.override && d.Reason != ReasonLoad {
				t.Errorf("reason %v, want load", d.Reason)
			}
			// The chosen backend now holds the chain, whichever it is.
			held := make([]int, 1)
			b.Index().Match(k.Chain(), []int32{int32(indexOf(bs, got))}, held)
			if held[0] != 8 {
				t.Errorf("chosen backend holds %d blocks after the pick, want 8", held[0])
			}
		})
	}
}

// TestPrefixHot: an anchor that sends more than one backend's even share
// of the requests is shared by load among the backends that hold its
// prompt, and the guard spills it at hot_guard_abs rather than guard_abs;
// an anchor with a small share keeps to its home.
func TestPrefixHot(t *testing.T) {
	tests := []struct {
		name     string
		others   int  // requests of other anchors after the first placement
		copy     bool // a second backend holds the prompt too
		wantHome bool
		override bool
	}{
		{"hot: the other holder, less loaded, takes it", 0, true, false, false},
		{"hot: spilled at hot_guard_abs", 0, false, false, true},
		{"not hot (9 of 39): its home, though busier", 30, true, true, false},
		{"not hot: no spill below guard_abs", 30, false, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPool(t, 3, nil)
			o := defaults()
			o.Strategy = Prefix
			o.Prefix.GuardAbs, o.Prefix.GuardRel, o.Prefix.HotGuardAbs = 8, 1.5, 1
			b := mustNew(t, p, o)
			bs := p.Backends()
			if err := b.Update(context.Background(), time.Now()); err != nil {
				t.Fatal(err)
			}
			k := key(1, 1, 8, 8)
			home, d, err := pickFor(b, "m", nil, k)
			if err != nil || d.Reason != ReasonPlacement || d.Hot {
				t.Fatalf("first pick: %v, reason %v, hot %v; want a placement, not hot", err, d.Reason, d.Hot)
			}
			for range 8 { // enough requests for a share
				if _, _, err := pickFor(b, "m", nil, k); err != nil {
					t.Fatal(err)
				}
			}
			for i := range tt.others {
				if _, _, err := pickFor(b, "m", nil, key(uint64(100+i), 1, 8, 8)); err != nil {
					t.Fatal(err)
				}
			}
			second := other(bs, home)
			if tt.copy {
				b.Index().Record(k.Chain(), indexOf(bs, second))
			}
			for range 2 {
				defer home.Acquire()()
			}
			got, d, err := pickFor(b, "m", nil, k)
			if err != nil {
				t.Fatal(err)
			}
			if d.Hot != (tt.others == 0) {
				t.Errorf("hot %v, want %v", d.Hot, tt.others == 0)
			}
			if (got == home) != tt.wantHome || d.GuardOverride != tt.override {
				t.Errorf("picked %s (home %s), override %v; want home %v, override %v", got.Name, home.Name, d.GuardOverride, tt.wantHome, tt.override)
			}
			if tt.copy && !tt.wantHome && (got != second || d.Reason != ReasonMatch) {
				t.Errorf("picked %s for %v, want the other holder %s for match", got.Name, d.Reason, second.Name)
			}
		})
	}
}

// tenantKey renders tenant i's chat request (a long system prompt, then
// turns user messages) into a key.
func tenantKey(t testing.TB, h *affinity.Hasher, i, turns int) *affinity.Key {
	t.Helper()
	msgs := fmt.Sprintf(`{"role":"system","content":"tenant %d: %s"},{"role":"user","content":"hello"}`, i, longText)
	for j := 1; j < turns; j++ {
		msgs += fmt.Sprintf(`,{"role":"assistant","content":"answer %d"},{"role":"user","content":"more %d"}`, j, j)
	}
	var k affinity.Key
	if !h.Compute(&k, exchange.OpChat, []byte(`{"messages":[`+msgs+`]}`), "") {
		t.Fatal("Compute failed")
	}
	return &k
}

// TestReplicaAgreement: two balancers that share nothing but the pool's
// configuration, seeing the same anchors in the same order, place them on
// the same backends, spread evenly; and each learns the same placements,
// so that follow-ups agree.
func TestReplicaAgreement(t *testing.T) {
	a := prefixBalancer(t, newPool(t, 3, nil))
	b := prefixBalancer(t, newPool(t, 3, nil))
	h := a.Hasher()
	counts := map[string]int{}
	const n = 1000
	for i := range n {
		k := tenantKey(t, h, i, 1)
		ga, da, _ := pickFor(a, "m", nil, k)
		gb, db, _ := pickFor(b, "m", nil, k)
		if ga.Name != gb.Name || da.Reason != ReasonPlacement || db.Reason != ReasonPlacement {
			t.Fatalf("anchor %d: %s (%v) and %s (%v)", i, ga.Name, da.Reason, gb.Name, db.Reason)
		}
		counts[ga.Name]++
		// A later turn, on either replica, by match.
		if gb2, d, _ := pickFor(b, "m", nil, tenantKey(t, h, i, 2)); gb2 != gb || d.Reason != ReasonMatch {
			t.Fatalf("tenant %d's next turn went to %s (%v), not %s", i, gb2.Name, d.Reason, gb.Name)
		}
	}
	// Bounded placement, slack 0: as even as can be.
	for name, c := range counts {
		if c < n/3 || c > n/3+1 {
			t.Errorf("%s got %d of %d anchors: %v", name, c, n, counts)
		}
	}
}

// TestBoundedPlacement: twelve tenants over three backends, each backend
// the home of four, whichever way rendezvous hashing alone would have
// split them; a tenant's later turns stay home.
func TestBoundedPlacement(t *testing.T) {
	for seed := range 20 {
		b := prefixBalancer(t, newPool(t, 3, nil))
		h := b.Hasher()
		homes := map[int]*upstream.Backend{}
		counts := map[string]int{}
		for i := range 12 {
			tenant := seed*100 + i
			got, d, _ := pickFor(b, "m", nil, tenantKey(t, h, tenant, 1))
			if d.Reason != ReasonPlacement {
				t.Fatalf("tenant %d: %v, want placement", tenant, d.Reason)
			}
			homes[tenant], counts[got.Name] = got, counts[got.Name]+1
		}
		for name, c := range counts {
			if c != 4 {
				t.Fatalf("seed %d: %s is home to %d tenants: %v", seed, name, c, counts)
			}
		}
		for tenant, home := range homes {
			if got, _, _ := pickFor(b, "m", nil, tenantKey(t, h, tenant, 3)); got != home {
				t.Fatalf("tenant %d's later turn went to %s, its home is %s", tenant, got.Name, home.Name)
			}
		}
	}
}

// TestReplicasShareHomes: two replicas over one shared store see the same
// tenants in opposite orders, so their local placements disagree; after
// each has published (Update), the first claim of each anchor wins and
// both send every tenant's prompts, first turn and later ones, to the
// same backend, though the losing replica's index had recorded its own
// choice. A third replica that starts cold agrees after one Update.
func TestReplicasShareHomes(t *testing.T) {
	ctx := context.Background()
	store := state.NewMemory()
	replica := func(name string) *Balancer {
		o := defaults()
		o.Strategy = Prefix
		o.Store = &state.Weights{Store: store, Replica: name, MaxAge: time.Minute}
		return mustNew(t, newPool(t, 3, nil), o)
	}
	a, b := replica("a"), replica("b")
	h := a.Hasher()
	const n = 30
	placedA, placedB := map[int]string{}, map[int]string{}
	for i := range n {
		ga, _, _ := pickFor(a, "m", nil, tenantKey(t, h, i, 1))
		gb, _, _ := pickFor(b, "m", nil, tenantKey(t, h, n-1-i, 1))
		placedA[i], placedB[n-1-i] = ga.Name, gb.Name
	}
	disagree := 0
	for i := range n {
		if placedA[i] != placedB[i] {
			disagree++
		}
	}
	if disagree == 0 {
		t.Fatal("the replicas agreed before sharing; the test shows nothing")
	}
	now := time.Now()
	if err := a.Update(ctx, now); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, now); err != nil {
		t.Fatal(err)
	}
	c := replica("c")
	if err := c.Update(ctx, now); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for turns := 1; turns <= 3; turns++ {
			k := tenantKey(t, h, i, turns)
			ga, _, _ := pickFor(a, "m", nil, k)
			gb, _, _ := pickFor(b, "m", nil, k)
			if ga.Name != placedA[i] || gb.Name != placedA[i] {
				t.Fatalf("tenant %d, %d turns: a → %s, b → %s; a claimed it first for %s", i, turns, ga.Name, gb.Name, placedA[i])
			}
		}
	}
	// c has seen none of them: its first request places locally and
	// claims; the store answers with a's home at c's next Update.
	for i := range n {
		pickFor(c, "m", nil, tenantKey(t, h, i, 1))
	}
	if err := c.Update(ctx, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if gc, _, _ := pickFor(c, "m", nil, tenantKey(t, h, i, 2)); gc.Name != placedA[i] {
			t.Fatalf("cold replica: tenant %d → %s, want %s", i, gc.Name, placedA[i])
		}
	}
}

var longText = fmt.Sprintf("%0600d", 0)

// TestPickedRecords: PickFor records nothing in the index, so that a pick
// that only asks leaves no trace; Picked records the chain for the backend
// the request went to, whichever it is, and only for a prompt the strategy
// reads (min_chars).
func TestPickedRecords(t *testing.T) {
	p := newPool(t, 3, nil)
	b := prefixBalancer(t, p)
	bs := p.Backends()
	held := func(k *affinity.Key) []int {
		h := make([]int, len(bs))
		b.Index().Match(k.Chain(), []int32{0, 1, 2}, h)
		return h
	}
	k := key(3, 1, 8, 8)
	got, d, err := b.PickFor("m", nil, k)
	if err != nil || d.Reason != ReasonPlacement {
		t.Fatalf("PickFor: %v %+v, want a placement", err, d)
	}
	if diff := cmp.Diff([]int{0, 0, 0}, held(k)); diff != "" {
		t.Errorf("after PickFor alone, held (-want +got):\n%s", diff)
	}
	// The gateway sent it elsewhere (a test's choice): that one holds it.
	to := other(bs, got)
	b.Picked(to, k)
	want := []int{0, 0, 0}
	want[indexOf(bs, to)] = 8
	if diff := cmp.Diff(want, held(k)); diff != "" {
		t.Errorf("after Picked, held (-want +got):\n%s", diff)
	}
	short := key(4, 1, 2, 2)
	short.Chars = 100
	b.Picked(bs[0], short)
	b.Picked(bs[0], nil)
	if diff := cmp.Diff([]int{0, 0, 0}, held(short)); diff != "" {
		t.Errorf("a prompt under min_chars was recorded (-want +got):\n%s", diff)
	}
	// A backend not in the pool is ignored, and other strategies have no
	// hooks.
	b.Picked(newPool(t, 1, nil).Backends()[0], k)
	o := defaults()
	o.Strategy = Dynamic
	mustNew(t, p, o).Picked(bs[0], k)
}

func TestPickForDoesNotAllocate(t *testing.T) {
	skipUnderRace(t)
	p := newPool(t, 16, nil)
	b := prefixBalancer(t, p)
	kinds := []string{"openai"}
	k := key(1, 1, 32, 64)
	if n := testing.AllocsPerRun(1000, func() { pickFor(b, "m", kinds, k) }); n != 0 {
		t.Errorf("%v allocations per pick", n)
	}
}

// BenchmarkPickFor: a pick among 16 backends, the prefix strategy given a
// 64-block key (a 16 KiB prompt, half of it shared by its tenant) against
// dynamic, with Picked after it as the gateway calls them: go test
// ./gateway/balance -bench PickFor -benchmem.
func BenchmarkPickFor(b *testing.B) {
	p := newPool(b, 16, nil)
	for _, strategy := range []string{Dynamic, Prefix} {
		b.Run(strategy, func(b *testing.B) {
			o := defaults()
			o.Strategy = strategy
			bal := mustNew(b, p, o)
			kinds := []string{"openai"}
			keys := make([]*affinity.Key, 64)
			for i := range keys {
				keys[i] = key(uint64(i%8), uint64(i), 32, 64)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, _, err := pickFor(bal, "m", kinds, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
