package analyzers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

func ledgerOf(keys ...usageKey) *ledger {
	l := new(ledger)
	for i, k := range keys {
		l.add(k, UsageCounts{Requests: 1, PromptTokens: int64(i), CompletionTokens: 2 * int64(i), CountedRequests: int64(i % 2)})
	}
	return l
}

// manyKeys returns n distinct keys.
func manyKeys(n int) []usageKey {
	ks := make([]usageKey, n)
	for i := range ks {
		ks[i] = usageKey{fmt.Sprintf("t%d", i%97), fmt.Sprintf("m%d", i/97), "b"}
	}
	return ks
}

func encodeLedger(t testing.TB, l *ledger) []byte {
	t.Helper()
	b, err := l.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLedgerRoundTrip: a ledger decodes to what was encoded, merging equals
// adding everything to one ledger, in any order, below and beyond the key
// bound, and the bound holds without losing a token.
func TestLedgerRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 3, maxUsageKeys - 1, maxUsageKeys, maxUsageKeys + 500} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ks := manyKeys(n)
			all := ledgerOf(ks...)
			if len(all.m) > maxUsageKeys {
				t.Fatalf("%d keys kept, bound %d", len(all.m), maxUsageKeys)
			}
			var want UsageCounts
			for i := range ks {
				want = want.plus(UsageCounts{1, int64(i), 2 * int64(i), int64(i % 2)})
			}
			var got UsageCounts
			for _, r := range all.rows() {
				got = got.plus(r.UsageCounts)
			}
			if got != want {
				t.Errorf("rows sum to %+v, want %+v", got, want)
			}
			enc := encodeLedger(t, all)
			dec := new(ledger)
			if err := dec.UnmarshalBinary(enc); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(all.rows(), dec.rows()); d != "" {
				t.Errorf("decoded (-want +got):\n%s", d)
			}
			// Two halves, counted separately, merged both ways; the same
			// key counted on both sides adds up.
			var a, b ledger
			for i, k := range ks {
				c := UsageCounts{1, int64(i), 2 * int64(i), int64(i % 2)}
				if i%3 == 0 {
					a.add(k, c)
				} else {
					b.add(k, c)
				}
			}
			ab, ba := new(ledger), new(ledger)
			for _, m := range []struct {
				dst  *ledger
				srcs []*ledger
			}{{ab, []*ledger{&a, &b}}, {ba, []*ledger{&b, &a}}} {
				for _, s := range m.srcs {
					if err := m.dst.Merge(s); err != nil {
						t.Fatal(err)
					}
				}
			}
			for name, m := range map[string]*ledger{"a+b": ab, "b+a": ba} {
				if e := encodeLedger(t, m); !bytes.Equal(e, enc) {
					t.Errorf("%s encodes differently from one ledger of everything", name)
				}
			}
			if n > 0 {
				self := ledgerOf(ks...)
				self.Merge(self)
				twice := ledgerOf(ks...)
				twice.Merge(ledgerOf(ks...))
				if !bytes.Equal(encodeLedger(t, self), encodeLedger(t, twice)) {
					t.Error("merging a ledger into itself is not merging a copy")
				}
			}
			all.Reset()
			if r := all.rows(); len(r) != 0 {
				t.Errorf("rows after Reset: %v", r)
			}
		})
	}
}

// TestLedgerRows: rows go by total tokens, then key; usage beyond the key
// bound is one other/other/other row, added to a real key of that name.
func TestLedgerRows(t *testing.T) {
	var l ledger
	l.add(usageKey{"b", "m", "x"}, UsageCounts{Requests: 1, PromptTokens: 5, CompletionTokens: 5})
	l.add(usageKey{"a", "m", "x"}, UsageCounts{Requests: 2, PromptTokens: 1, CompletionTokens: 9})
	l.add(usageKey{"", "m", "x"}, UsageCounts{Requests: 1, CompletionTokens: 20, CountedRequests: 1})
	want := []UsageRow{
		{"", "m", "x", UsageCounts{1, 0, 20, 1}},
		{"a", "m", "x", UsageCounts{2, 1, 9, 0}},
		{"b", "m", "x", UsageCounts{1, 5, 5, 0}},
	}
	if d := cmp.Diff(want, l.rows()); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}

	full := ledgerOf(manyKeys(maxUsageKeys + 10)...)
	other := usageKey{usageOther, usageOther, usageOther}
	rows := func() (n int, o UsageCounts) {
		for _, r := range full.rows() {
			if (usageKey{r.Tenant, r.Model, r.Backend}) == other {
				n, o = n+1, r.UsageCounts
			}
		}
		return n, o
	}
	n, o := rows()
	if n != 1 || o != full.other || o.Requests != 10 {
		t.Errorf("%d other rows, %+v; want one with the 10 requests beyond the bound (%+v)", n, o, full.other)
	}
	// A real other/other/other key (say the gateway's "other" tenant of an
	// unconfigured model on a backend named "other") gets the overflow
	// added: still one row.
	mixed := ledger{m: map[usageKey]ledgerEntry{other: {other.hash(), UsageCounts{Requests: 2}}}, other: UsageCounts{Requests: 3, PromptTokens: 1}}
	if d := cmp.Diff([]UsageRow{{usageOther, usageOther, usageOther, UsageCounts{Requests: 5, PromptTokens: 1}}}, mixed.rows()); d != "" {
		t.Errorf("other rows (-want +got):\n%s", d)
	}
}

// TestLedgerCorrupt: inputs MarshalBinary cannot have written fail with the
// window package's errors and leave the ledger as it was.
func TestLedgerCorrupt(t *testing.T) {
	good := encodeLedger(t, ledgerOf(usageKey{"a", "m", "x"}, usageKey{"b", "m", "x"}))
	key := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := map[string]struct {
		data []byte
		want error
	}{
		"empty":          {nil, window.ErrCorrupt},
		"other type":     {[]byte{0x41, 0, 0, 0}, window.ErrCorrupt},
		"newer version":  {[]byte{0xa2}, window.ErrVersion},
		"truncated":      {good[:len(good)-1], window.ErrCorrupt},
		"trailing":       {append(good[:len(good):len(good)], 0), window.ErrCorrupt},
		"too many keys":  {[]byte{tagLedger, 0, 0, 0, 0, 0x81, 0x40}, window.ErrCorrupt},
		"huge key count": {[]byte{tagLedger, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, window.ErrCorrupt},
		"other, few keys": {cat([]byte{tagLedger, 1, 0, 0, 0, 1},
			key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"other tokens, no requests": {[]byte{tagLedger, 0, 5, 0, 0, 0}, window.ErrCorrupt},
		"no requests":               {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"), []byte{0, 1, 0, 0}), window.ErrCorrupt},
		"counted > requests":        {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 2}), window.ErrCorrupt},
		"keys out of order": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("b"), key("m"), key("x"), []byte{1, 0, 0, 0}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"duplicate key": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}, key("a"), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"label too long": {cat([]byte{tagLedger, 0, 0, 0, 0, 1, 0x81, 0x10}, bytes.Repeat([]byte("a"), 0x801), key("m"), key("x"), []byte{1, 0, 0, 0}), window.ErrCorrupt},
		"count overflows": {cat([]byte{tagLedger, 0, 0, 0, 0, 1}, key("a"), key("m"), key("x"),
			[]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0}), window.ErrCorrupt},
		"total overflows": {cat([]byte{tagLedger, 0, 0, 0, 0, 2},
			key("a"), key("m"), key("x"), []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0},
			key("b"), key("m"), key("x"), []byte{1, 1, 0, 0}), window.ErrCorrupt},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			l := ledgerOf(usageKey{"keep", "me", "x"})
			before := encodeLedger(t, l)
			err := l.UnmarshalBinary(c.data)
			if !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
			if !bytes.Equal(encodeLedger(t, l), before) {
				t.Error("a failed decode changed the ledger")
			}
		})
	}
}

// FuzzLedgerUnmarshal: decoding never panics, fails only with the window
// package's errors, and what it accepts re-encodes canonically and can be
// used.
func FuzzLedgerUnmarshal(f *testing.F) {
	seeds := [][]byte{nil, {tagLedger}}
	// No full ledger: its 100 kB would slow the fuzzer to a crawl
	// (TestLedgerRoundTrip decodes those).
	for _, l := range []*ledger{new(ledger), ledgerOf(usageKey{"", "m", "a"}, usageKey{"t", "other", "b"}), ledgerOf(manyKeys(5)...)} {
		seeds = append(seeds, encodeLedger(f, l))
	}
	for _, s := range seeds {
		f.Add(s)
		if len(s) > 1 {
			f.Add(s[:len(s)/2])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		l := new(ledger)
		if err := l.UnmarshalBinary(data); err != nil {
			if !errors.Is(err, window.ErrCorrupt) && !errors.Is(err, window.ErrVersion) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrVersion", err)
			}
			return
		}
		b1 := encodeLedger(t, l)
		w := new(ledger)
		if err := w.UnmarshalBinary(b1); err != nil {
			t.Fatalf("re-encoding of accepted input rejected: %v", err)
		}
		if b2 := encodeLedger(t, w); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not canonical:\n%x\n%x", b1, b2)
		}
		if len(l.m) > maxUsageKeys {
			t.Fatalf("%d keys decoded", len(l.m))
		}
		l.Merge(w)
		l.add(usageKey{"fuzz", "", ""}, UsageCounts{Requests: 1})
		_ = l.rows()
	})
}

// usageClock is a settable clock for pipelines under test.
type usageClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *usageClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *usageClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// respond hands p one finished response that ended at end.
func respond(p *Pipeline, end time.Time, tenant, model, backend string, prompt, completion int, src exchange.UsageSource) {
	r := &exchange.Request{Operation: exchange.OpEmbeddings, Model: model, Backend: backend, Tenant: tenant, Start: end.Add(-time.Second)}
	p.OnRequest(r)
	p.OnResponse(r, &exchange.Response{Status: 200, Latency: time.Second, PromptTokens: prompt, CompletionTokens: completion, UsageSource: src})
}

func newUsagePipeline(t *testing.T, clock *usageClock, backends []config.Backend, sh *Sharing) *Pipeline {
	t.Helper()
	p, err := New(Options{Config: config.Default().Analyzers, Now: clock.now, Backends: backends, Sharing: sh})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestUsageWindows: the hour counts minute buckets back an hour, the day
// hour buckets back a day; a response two hours old is in the day only.
// Responses the gateway answered itself are not usage.
func TestUsageWindows(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 15, 0, time.UTC)
	clock := &usageClock{t: now}
	p := newUsagePipeline(t, clock, []config.Backend{{Name: "a", Models: []string{"llama"}}, {Name: "b", Models: []string{"llama"}}}, nil)
	respond(p, now.Add(-2*time.Hour), "team-a", "llama", "a", 1000, 1000, exchange.UsageReported)
	respond(p, now.Add(-25*time.Hour-time.Minute), "team-a", "llama", "a", 7, 7, exchange.UsageReported) // beyond the day
	respond(p, now.Add(-30*time.Minute), "team-a", "llama", "a", 100, 200, exchange.UsageReported)
	respond(p, now.Add(-time.Minute), "team-a", "llama", "a", 200, 600, exchange.UsageReported)
	respond(p, now, "", "llama", "b", 0, 50, exchange.UsageCounted)
	respond(p, now, "team-b", "unconfigured", "b", 40, 10, exchange.UsageReported)
	respond(p, now, "team-b", "llama", "", 40, 10, exchange.UsageNone) // the gateway answered

	u, err := p.Usage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Usage{
		Hour: UsageWindow{
			Since: time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC), Until: now,
			Totals: UsageCounts{4, 340, 860, 1},
			Rows: []UsageRow{
				{"team-a", "llama", "a", UsageCounts{2, 300, 800, 0}},
				{"", "llama", "b", UsageCounts{1, 0, 50, 1}}, // 50 tokens each: by key
				{"team-b", "other", "b", UsageCounts{1, 40, 10, 0}},
			},
		},
		Day: UsageWindow{
			Since: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC), Until: now,
			Totals: UsageCounts{5, 1340, 1860, 1},
			Rows: []UsageRow{
				{"team-a", "llama", "a", UsageCounts{3, 1300, 1800, 0}},
				{"", "llama", "b", UsageCounts{1, 0, 50, 1}},
				{"team-b", "other", "b", UsageCounts{1, 40, 10, 0}},
			},
		},
	}
	if d := cmp.Diff(want, u); d != "" {
		t.Errorf("usage (-want +got):\n%s", d)
	}

	// An hour and a half later the recent responses left the hour, not
	// the day; the one of 10:28 stays in the day until 11:00 the next day.
	clock.set(now.Add(90 * time.Minute))
	u, _ = p.Usage(context.Background())
	if u.Hour.Totals != (UsageCounts{}) || len(u.Hour.Rows) != 0 {
		t.Errorf("hour after 90 min: %+v", u.Hour)
	}
	if u.Day.Totals.Requests != 5 {
		t.Errorf("day after 90 min: %+v", u.Day.Totals)
	}
	clock.set(time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC))
	if u, _ = p.Usage(context.Background()); u.Day.Totals.Requests != 0 {
		t.Errorf("day a day later: %+v", u.Day.Totals)
	}
}

// TestUsageJSON: the document's shape, with empty windows as [] rows.
func TestUsageJSON(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	p := newUsagePipeline(t, &usageClock{t: now}, []config.Backend{{Name: "a", Models: []string{"llama"}}}, nil)
	b, err := p.UsageJSON(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	empty := `{"since":"%s","until":"2026-11-29T10:30:00Z","totals":{"requests":0,"prompt_tokens":0,"completion_tokens":0,"counted_requests":0},"rows":[]}`
	want := `{"hour":` + fmt.Sprintf(empty, "2026-11-29T09:30:00Z") + `,"day":` + fmt.Sprintf(empty, "2026-11-28T10:00:00Z") + `}`
	if string(b) != want {
		t.Errorf("empty usage:\n%s\nwant\n%s", b, want)
	}
	respond(p, now, "team-a", "llama", "a", 300, 800, exchange.UsageReported)
	b, _ = p.UsageJSON(context.Background())
	var doc struct {
		Hour struct {
			Rows []map[string]any `json:"rows"`
		} `json:"hour"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	wantRow := map[string]any{"tenant": "team-a", "model": "llama", "backend": "a",
		"requests": 1.0, "prompt_tokens": 300.0, "completion_tokens": 800.0, "counted_requests": 0.0}
	if len(doc.Hour.Rows) != 1 || cmp.Diff(wantRow, doc.Hour.Rows[0]) != "" {
		t.Errorf("rows: %s", b)
	}
}

// TestUsageBounds: models are named when configured, or (when a backend
// serves every model) the first 64 seen; labels are bounded in length;
// however many keys, a bucket keeps at most maxUsageKeys.
func TestUsageBounds(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	models := func(p *Pipeline) map[string]int64 {
		u, err := p.Usage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int64{}
		for _, r := range u.Hour.Rows {
			out[r.Model] += r.Requests
		}
		return out
	}
	long := strings.Repeat("x", maxUsageLabel+1)

	closed := newUsagePipeline(t, &usageClock{t: now}, []config.Backend{{Name: "a", Models: []string{"llama"}}}, nil)
	for _, m := range []string{"llama", "gpt", "llama", "", long} {
		respond(closed, now, "", m, "a", 1, 1, exchange.UsageReported)
	}
	if d := cmp.Diff(map[string]int64{"llama": 2, "other": 3}, models(closed)); d != "" {
		t.Errorf("configured models (-want +got):\n%s", d)
	}

	open := newUsagePipeline(t, &usageClock{t: now}, []config.Backend{{Name: "a", Models: []string{"llama"}}, {Name: "any"}}, nil)
	want := map[string]int64{"llama": 1, "other": 11}
	respond(open, now, "", "llama", "any", 1, 1, exchange.UsageReported)
	respond(open, now, "", long, "any", 1, 1, exchange.UsageReported)
	for i := range maxUsageModels + 10 {
		m := fmt.Sprintf("m%d", i)
		respond(open, now, "", m, "any", 1, 1, exchange.UsageReported)
		if i < maxUsageModels {
			want[m] = 1
		}
	}
	if d := cmp.Diff(want, models(open)); d != "" {
		t.Errorf("open models (-want +got):\n%s", d)
	}

	tenants := newUsagePipeline(t, &usageClock{t: now}, []config.Backend{{Name: "a", Models: []string{"llama"}}}, nil)
	const n = maxUsageKeys + 1000
	for i := range n {
		respond(tenants, now, fmt.Sprint(i), "llama", "a", 1, 2, exchange.UsageReported)
	}
	u, _ := tenants.Usage(context.Background())
	for name, w := range map[string]UsageWindow{"hour": u.Hour, "day": u.Day} {
		if len(w.Rows) != maxUsageKeys+1 || w.Totals != (UsageCounts{n, n, 2 * n, 0}) {
			t.Errorf("%s: %d rows, totals %+v; want %d rows and every request", name, len(w.Rows), w.Totals, maxUsageKeys+1)
		}
		if r := w.Rows[0]; r.Tenant != usageOther || r.Requests != 1000 {
			t.Errorf("%s: first row %+v, want the 1000 requests beyond the bound", name, r)
		}
	}
}

// recordingStore is a store that notes the ttl each series is written with
// and how often each is read.
type recordingStore struct {
	state.Store
	mu    sync.Mutex
	ttl   map[string]time.Duration
	reads map[string]int
}

func newRecordingStore(s state.Store) *recordingStore {
	return &recordingStore{Store: s, ttl: map[string]time.Duration{}, reads: map[string]int{}}
}

func (s *recordingStore) PutBuckets(ctx context.Context, signal, replica string, seq uint64, bs []state.Bucket, ttl time.Duration) error {
	s.mu.Lock()
	s.ttl[signal] = ttl
	s.mu.Unlock()
	return s.Store.PutBuckets(ctx, signal, replica, seq, bs, ttl)
}

// Exchange goes through PutBuckets and Buckets, to record them.
func (s *recordingStore) Exchange(ctx context.Context, replica string, seq uint64, puts []state.SeriesBuckets, reads []state.SeriesSpan) ([][]state.ReplicaBucket, error) {
	return state.ExchangeEach(ctx, s, replica, seq, puts, reads)
}

func (s *recordingStore) Buckets(ctx context.Context, signal string, from, to int64) ([]state.ReplicaBucket, error) {
	s.mu.Lock()
	s.reads[signal]++
	s.mu.Unlock()
	return s.Store.Buckets(ctx, signal, from, to)
}

// TestSharedUsage: replicas over one store see each other's usage, over
// the hour and the day, once each however often they flush. The usage
// series live in the store as long as they span and are read every
// usageReadEvery flushes; the other series keep the sharer's ttl and are
// read every flush.
func TestSharedUsage(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testSharedUsage(t, state.NewMemory()) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		c, err := state.OpenRedis(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		testSharedUsage(t, state.NewRedis(c, "test"))
	})
}

func testSharedUsage(t *testing.T, backing state.Store) {
	store := newRecordingStore(backing)
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	clock := &usageClock{t: now}
	backends := []config.Backend{{Name: "x", Models: []string{"llama"}}}
	mk := func(replica string) *Pipeline {
		return newUsagePipeline(t, clock, backends, &Sharing{Store: store, Replica: replica})
	}
	a, b := mk("a"), mk("b")
	respond(a, now.Add(-2*time.Hour), "team-a", "llama", "x", 1000, 1000, exchange.UsageReported)
	respond(a, now, "team-a", "llama", "x", 10, 20, exchange.UsageReported)
	respond(b, now, "team-a", "llama", "x", 1, 2, exchange.UsageReported)
	respond(b, now, "team-b", "llama", "x", 5, 5, exchange.UsageCounted)

	ctx := context.Background()
	usage := func(p *Pipeline) Usage {
		t.Helper()
		u, err := p.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	hour := []UsageRow{
		{"team-a", "llama", "x", UsageCounts{2, 11, 22, 0}},
		{"team-b", "llama", "x", UsageCounts{1, 5, 5, 1}},
	}
	day := []UsageRow{
		{"team-a", "llama", "x", UsageCounts{3, 1011, 1022, 0}},
		{"team-b", "llama", "x", UsageCounts{1, 5, 5, 1}},
	}
	check := func(name string, p *Pipeline) {
		t.Helper()
		u := usage(p)
		if d := cmp.Diff(hour, u.Hour.Rows); d != "" {
			t.Errorf("%s's hour (-want +got):\n%s", name, d)
		}
		if d := cmp.Diff(day, u.Day.Rows); d != "" {
			t.Errorf("%s's day (-want +got):\n%s", name, d)
		}
	}
	a.Flush(ctx) // a's first flush: reads, but b wrote nothing yet
	b.Flush(ctx) // b's first: reads a's
	check("b", b)
	if got := usage(a).Hour.Totals.Requests; got != 1 {
		t.Errorf("a saw b's usage before its next read: %d requests in the hour", got)
	}
	for range usageReadEvery { // a's next read is its usageReadEvery+1st flush
		a.Flush(ctx)
		b.Flush(ctx)
	}
	check("a", a)
	check("b", b)

	// A new replica sees everything at its first flush.
	c := mk("c")
	c.Flush(ctx)
	check("c", c)

	store.mu.Lock()
	defer store.mu.Unlock()
	dflt := config.Default().Analyzers
	wantTTL := map[string]time.Duration{
		// Never less than the sharer's ttl.
		usageMinuteSeries: dflt.Window + dflt.Reference + 10*time.Minute,
		usageHourSeries:   26*time.Hour + 10*time.Minute,
		"errors/total":    dflt.Window + dflt.Reference + 10*time.Minute,
	}
	for name, want := range wantTTL {
		if got := store.ttl[name]; got != want {
			t.Errorf("%s written with ttl %v, want %v", name, got, want)
		}
	}
	// 23 flushes: a 11, b 11, c 1; the usage series are read at the first
	// of each replica and the 11th of a and b.
	if r, e := store.reads[usageHourSeries], store.reads["errors/total"]; r != 5 || e != 23 {
		t.Errorf("reads: %s %d, want 5; errors/total %d, want 23", usageHourSeries, r, e)
	}
}

// TestUsageConcurrent: responses, flushes and reads of the usage at once
// (for the race detector).
func TestUsageConcurrent(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	clock := &usageClock{t: now}
	store := state.NewMemory()
	a := newUsagePipeline(t, clock, nil, &Sharing{Store: store, Replica: "a"})
	b := newUsagePipeline(t, clock, nil, &Sharing{Store: store, Replica: "b"})
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 500 {
			respond(a, now.Add(time.Duration(i)*time.Second), fmt.Sprint(i%5), "m", "x", 1, 1, exchange.UsageReported)
		}
	})
	wg.Go(func() {
		for range 50 {
			a.Flush(ctx)
			b.Flush(ctx)
			if _, err := b.UsageJSON(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for range 50 {
			if _, err := a.UsageJSON(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	a.Flush(ctx)
	if u, _ := a.Usage(ctx); u.Day.Totals.Requests != 500 {
		t.Errorf("a counted %d of 500 requests", u.Day.Totals.Requests)
	}
}
