package analyzers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/analyzers/usage"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

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

func newUsagePipeline(t *testing.T, clock *usageClock, backends []config.Backend, sh *share.Config) *Pipeline {
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
	want := usage.Report{
		Hour: usage.Window{
			Since: time.Date(2026, 11, 29, 9, 30, 0, 0, time.UTC), Until: now,
			Totals: usage.Counts{Requests: 4, PromptTokens: 340, CompletionTokens: 860, CountedRequests: 1},
			Rows: []usage.Row{
				{Tenant: "team-a", Model: "llama", Backend: "a", Counts: usage.Counts{Requests: 2, PromptTokens: 300, CompletionTokens: 800, CountedRequests: 0}},
				{Tenant: "", Model: "llama", Backend: "b", Counts: usage.Counts{Requests: 1, PromptTokens: 0, CompletionTokens: 50, CountedRequests: 1}}, // 50 tokens each: by key
				{Tenant: "team-b", Model: "other", Backend: "b", Counts: usage.Counts{Requests: 1, PromptTokens: 40, CompletionTokens: 10, CountedRequests: 0}},
			},
		},
		Day: usage.Window{
			Since: time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC), Until: now,
			Totals: usage.Counts{Requests: 5, PromptTokens: 1340, CompletionTokens: 1860, CountedRequests: 1},
			Rows: []usage.Row{
				{Tenant: "team-a", Model: "llama", Backend: "a", Counts: usage.Counts{Requests: 3, PromptTokens: 1300, CompletionTokens: 1800, CountedRequests: 0}},
				{Tenant: "", Model: "llama", Backend: "b", Counts: usage.Counts{Requests: 1, PromptTokens: 0, CompletionTokens: 50, CountedRequests: 1}},
				{Tenant: "team-b", Model: "other", Backend: "b", Counts: usage.Counts{Requests: 1, PromptTokens: 40, CompletionTokens: 10, CountedRequests: 0}},
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
	if u.Hour.Totals != (usage.Counts{}) || len(u.Hour.Rows) != 0 {
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
// however many keys, a bucket keeps at most usage.MaxKeys.
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
	long := strings.Repeat("x", usage.MaxLabel+1)

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
	for i := range usage.MaxModels + 10 {
		m := fmt.Sprintf("m%d", i)
		respond(open, now, "", m, "any", 1, 1, exchange.UsageReported)
		if i < usage.MaxModels {
			want[m] = 1
		}
	}
	if d := cmp.Diff(want, models(open)); d != "" {
		t.Errorf("open models (-want +got):\n%s", d)
	}

	tenants := newUsagePipeline(t, &usageClock{t: now}, []config.Backend{{Name: "a", Models: []string{"llama"}}}, nil)
	const n = usage.MaxKeys + 1000
	for i := range n {
		respond(tenants, now, fmt.Sprint(i), "llama", "a", 1, 2, exchange.UsageReported)
	}
	u, _ := tenants.Usage(context.Background())
	for name, w := range map[string]usage.Window{"hour": u.Hour, "day": u.Day} {
		if len(w.Rows) != usage.MaxKeys+1 || w.Totals != (usage.Counts{Requests: n, PromptTokens: n, CompletionTokens: 2 * n, CountedRequests: 0}) {
			t.Errorf("%s: %d rows, totals %+v; want %d rows and every request", name, len(w.Rows), w.Totals, usage.MaxKeys+1)
		}
		if r := w.Rows[0]; r.Tenant != usage.Other || r.Requests != 1000 {
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
// usage.ReadEvery flushes; the other series keep the sharer's ttl and are
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
		return newUsagePipeline(t, clock, backends, &share.Config{Store: store, Replica: replica})
	}
	a, b := mk("a"), mk("b")
	respond(a, now.Add(-2*time.Hour), "team-a", "llama", "x", 1000, 1000, exchange.UsageReported)
	respond(a, now, "team-a", "llama", "x", 10, 20, exchange.UsageReported)
	respond(b, now, "team-a", "llama", "x", 1, 2, exchange.UsageReported)
	respond(b, now, "team-b", "llama", "x", 5, 5, exchange.UsageCounted)

	ctx := context.Background()
	usageOf := func(p *Pipeline) usage.Report {
		t.Helper()
		u, err := p.Usage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	hour := []usage.Row{
		{Tenant: "team-a", Model: "llama", Backend: "x", Counts: usage.Counts{Requests: 2, PromptTokens: 11, CompletionTokens: 22, CountedRequests: 0}},
		{Tenant: "team-b", Model: "llama", Backend: "x", Counts: usage.Counts{Requests: 1, PromptTokens: 5, CompletionTokens: 5, CountedRequests: 1}},
	}
	day := []usage.Row{
		{Tenant: "team-a", Model: "llama", Backend: "x", Counts: usage.Counts{Requests: 3, PromptTokens: 1011, CompletionTokens: 1022, CountedRequests: 0}},
		{Tenant: "team-b", Model: "llama", Backend: "x", Counts: usage.Counts{Requests: 1, PromptTokens: 5, CompletionTokens: 5, CountedRequests: 1}},
	}
	check := func(name string, p *Pipeline) {
		t.Helper()
		u := usageOf(p)
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
	if got := usageOf(a).Hour.Totals.Requests; got != 1 {
		t.Errorf("a saw b's usage before its next read: %d requests in the hour", got)
	}
	for range usage.ReadEvery { // a's next read is its usage.ReadEvery+1st flush
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
		usage.MinuteSeries: dflt.Window + dflt.Reference + 10*time.Minute,
		usage.HourSeries:   26*time.Hour + 10*time.Minute,
		"errors/total":     dflt.Window + dflt.Reference + 10*time.Minute,
	}
	for name, want := range wantTTL {
		if got := store.ttl[name]; got != want {
			t.Errorf("%s written with ttl %v, want %v", name, got, want)
		}
	}
	// 23 flushes: a 11, b 11, c 1; the usage series are read at the first
	// of each replica and the 11th of a and b.
	if r, e := store.reads[usage.HourSeries], store.reads["errors/total"]; r != 5 || e != 23 {
		t.Errorf("reads: %s %d, want 5; errors/total %d, want 23", usage.HourSeries, r, e)
	}
}

// TestUsageConcurrent: responses, flushes and reads of the usage at once
// (for the race detector).
func TestUsageConcurrent(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	clock := &usageClock{t: now}
	store := state.NewMemory()
	a := newUsagePipeline(t, clock, nil, &share.Config{Store: store, Replica: "a"})
	b := newUsagePipeline(t, clock, nil, &share.Config{Store: store, Replica: "b"})
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
