package analyzers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-gw/vigil/analyzers/alert"
	"github.com/vigil-gw/vigil/analyzers/share"
	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
	"github.com/vigil-gw/vigil/sim"
	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

// TestSharing: two pipelines over one store see each other's responses
// exactly once, however often they flush, and a baseline pinned on one is
// pinned on the other.
func TestSharing(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	cfg := config.Default().Analyzers
	cfg.MinRequests, cfg.Window = 1000, time.Hour
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: cfg, Now: func() time.Time { return now },
			Sharing: &share.Config{Store: store, Replica: replica}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	feed := func(p *Pipeline, n int) {
		for i := range n {
			body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"q%d"}]}`, i)
			r := &exchange.Request{Operation: "chat", Model: "m", Backend: "a", Start: now, Body: body}
			p.OnPrompt(r.Start, r.Operation, r.Body)
			p.OnRequest(r)
			p.OnResponse(r, &exchange.Response{Status: 200, Latency: 300 * time.Millisecond, CompletionTokens: 10})
			now = now.Add(100 * time.Millisecond)
		}
	}
	responses := func(p *Pipeline) int64 { return p.Evaluate().Latency.Responses }
	ctx := context.Background()
	feed(a, 30)
	feed(b, 20)
	for range 3 { // repeated flushes must not count twice
		a.Flush(ctx)
		b.Flush(ctx)
	}
	if ra, rb := responses(a), responses(b); ra != 50 || rb != 50 {
		t.Errorf("merged responses: a %d, b %d, want 50 each", ra, rb)
	}
	feed(a, 5)
	a.Flush(ctx)
	b.Flush(ctx)
	if rb := responses(b); rb != 55 {
		t.Errorf("b sees %d responses after a served 5 more, want 55", rb)
	}
	// A replica without traffic of its own (new, or one the load balancer
	// skips) sees the others' windows too.
	c := mk("c")
	c.Flush(ctx)
	if rc := responses(c); rc != 55 {
		t.Errorf("idle replica c sees %d responses, want 55", rc)
	}

	a.PinBaseline(ctx) // drift refuses (fewer than min_requests prompts); the others pin
	b.Flush(ctx)
	if ref := b.Evaluate().Latency.Reference; ref != "pinned" {
		t.Errorf("b's latency reference %q after a pinned, want pinned", ref)
	}
}

// TestSharedCalibration: feedback about a response served by replica a
// reaches replica b; both count the label.
func TestSharedCalibration(t *testing.T) {
	f := newFeeder(t, config.Default().Analyzers, 5) // for its simulator
	store := state.NewMemory()
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: config.Default().Analyzers, Sharing: &share.Config{Store: store, Replica: replica}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	f.p = a
	var r struct{ ID string }
	if err := json.Unmarshal(f.send(), &r); err != nil || r.ID == "" {
		t.Fatalf("response id: %v", err)
	}
	ctx := context.Background()
	a.Flush(ctx)
	if err := b.Feedback(ctx, r.ID, true); err != nil {
		t.Fatalf("feedback on the other replica: %v", err)
	}
	if err := b.Feedback(ctx, "chatcmpl-nope", true); !errors.Is(err, ErrUnknownResponse) {
		t.Errorf("unknown id: %v", err)
	}
	labels := func(p *Pipeline) int { return p.Evaluate().Confidence.Calibration.Labels }
	for range 12 { // labels are read every tenth flush
		b.Flush(ctx)
		a.Flush(ctx)
	}
	if la, lb := labels(a), labels(b); la != 1 || lb != 1 {
		t.Errorf("labels: a %d, b %d, want 1 each", la, lb)
	}
}

// TestSharedErrorRate: the error rate a replica alerts on counts every
// replica's requests.
func TestSharedErrorRate(t *testing.T) {
	store := state.NewMemory()
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	cfg := config.Default()
	cfg.Alerts.Fixed = map[string]float64{alert.RuleErrorRate: 0.1}
	cfg.Alerts.Consecutive = 1
	mk := func(replica string) *Pipeline {
		p, err := New(Options{Config: cfg.Analyzers, Alerts: cfg.Alerts, Now: func() time.Time { return now },
			Sharing: &share.Config{Store: store, Replica: replica}, Backends: []config.Backend{{Name: "x"}}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := mk("a"), mk("b")
	feed := func(p *Pipeline, n, failed int) {
		for i := range n {
			r := &exchange.Request{Operation: "embeddings", Model: "m", Backend: "x", Start: now}
			resp := &exchange.Response{Status: 200, Latency: 50 * time.Millisecond}
			if i < failed {
				resp.Status, resp.ErrorClass = 503, "upstream_5xx"
			}
			p.OnRequest(r)
			p.OnResponse(r, resp)
		}
	}
	feed(a, 40, 0)
	feed(b, 40, 16) // b alone: 40%; both: 20%
	now = now.Add(time.Minute)
	ctx := context.Background()
	b.Flush(ctx)
	a.Flush(ctx)
	a.ObserveAlerts(ctx)
	var got []alert.Alert
	for _, al := range a.alerts.Alerts() {
		if al.Rule == alert.RuleErrorRate {
			got = append(got, al)
		}
	}
	// The backend's series, and its model's, both merged over the replicas.
	slices.SortFunc(got, func(x, y alert.Alert) int { return strings.Compare(x.Labels["backend"], y.Labels["backend"]) })
	if len(got) != 2 || float64(got[0].Value) != 0.2 || got[0].Labels["model"] != "m" ||
		float64(got[1].Value) != 0.2 || got[1].Labels["backend"] != "x" {
		t.Errorf("a's error-rate alerts: %+v, want two at 0.2 (16 failures in 80 requests): model m and backend x", got)
	}
}

// incrementalReadMax is the most buckets of a series a flush reads between
// two whole reads, at the default 1 s interval and buckets of 10 s or
// more: back from the newest bucket of the last read, two intervals
// rounded up to a bucket and one bucket for clock skew, up to the newest
// bucket now (one more when the clock crossed into a new one).
const incrementalReadMax = 4

// fullReadFlushes is the number of flushes between whole reads at the
// default 1 s interval.
const fullReadFlushes = int(share.FullReadAfter / time.Second)

// TestSharedReadsAreIncremental: in steady state replica a's flush reads
// a few of the newest buckets of each series (counted through a store
// wrapping a real redis-server), the whole span every fullReadFlushes
// flushes; the replicas still see each other's responses, once.
func TestSharedReadsAreIncremental(t *testing.T) {
	r := newRedisShareRig(t)
	ctx := t.Context()
	dflt := config.Default().Analyzers
	r.fill(ctx, dflt.Window+dflt.Reference, 30*time.Second)
	spans := r.spans(0)
	var full []int // the flushes, counted from 0, that read whole spans
	var incremental []int64
	for i := range 3 * fullReadFlushes {
		r.stores[0].reset()
		r.tick(ctx)
		widest := r.stores[0].widestReads()
		if len(widest) == 0 {
			t.Fatalf("flush %d read nothing", i)
		}
		if widest["latency"] == spans["latency"] {
			full = append(full, i)
			for name, n := range widest {
				if _, shared := spans[name]; shared && n != spans[name] { // not the calibration's labels
					t.Errorf("flush %d reads the whole span of latency, of %s %d buckets, want all %d", i, name, n, spans[name])
				}
			}
			continue
		}
		for name, n := range widest {
			if n > incrementalReadMax {
				t.Errorf("flush %d reads %d buckets of %s (span %d), want at most %d", i, n, name, spans[name], incrementalReadMax)
			}
		}
		incremental = append(incremental, r.stores[0].total())
	}
	if n, err := r.failures(); n > 0 {
		t.Fatalf("%d store operations failed, the last: %v", n, err)
	}
	if len(full) != 3 || full[1]-full[0] != fullReadFlushes || full[2]-full[1] != fullReadFlushes {
		t.Errorf("whole reads at flushes %v of %d, want one every %d", full, 3*fullReadFlushes, fullReadFlushes)
	}
	var sum int64
	for _, n := range incremental {
		sum += n
	}
	var whole int64
	for _, n := range spans {
		whole += n
	}
	t.Logf("buckets read per flush: %d between whole reads (mean), %d in a whole read", sum/int64(max(len(incremental), 1)), whole)

	r.p[0].Flush(ctx)
	r.p[1].Flush(ctx)
	if ra, rb := r.responses(0), r.responses(1); ra != rb || ra == 0 {
		t.Errorf("merged responses: a %d, b %d, want equal", ra, rb)
	}
}

// TestSharedLateWriteIsRead: replica b cannot reach the store for a
// minute while both serve; when it can again, it writes every bucket it
// kept, the oldest six buckets back, beyond what a reads between whole
// reads. a sees them all by its next whole read, at most
// fullReadFlushes flushes later, each response once.
func TestSharedLateWriteIsRead(t *testing.T) {
	r := newRedisShareRig(t)
	ctx := t.Context()
	dflt := config.Default().Analyzers
	r.fill(ctx, dflt.Window, 30*time.Second)
	r.stores[1].setDown(true)
	for range 60 {
		r.tick(ctx)
	}
	// b comes back right after a whole read of a's: the worst case.
	for {
		r.stores[0].reset()
		r.tick(ctx)
		if w := r.stores[0].widestReads(); w["latency"] == r.spans(0)["latency"] {
			break
		}
	}
	r.stores[1].setDown(false)
	r.p[1].Flush(ctx) // writes everything b kept
	// A replica that starts now reads every span whole: what a should see.
	c, err := New(Options{Config: dflt, Now: func() time.Time { return r.now },
		Sharing: &share.Config{Store: r.stores[0].Store, Replica: "c"}})
	if err != nil {
		t.Fatal(err)
	}
	c.Flush(ctx)
	want := c.Evaluate().Latency.Responses
	seen := 0 // a's flush, counted from 1, after which it sees every response
	for i := 1; i <= 2*fullReadFlushes && seen == 0; i++ {
		r.p[0].Flush(ctx) // the clock stands still: want stays the truth
		got := r.responses(0)
		switch {
		case got == want:
			seen = i
		case got > want:
			t.Fatalf("a counts %d responses after %d flushes, want %d: some twice", got, i, want)
		}
	}
	if n, err := r.failures(); n > 0 {
		t.Fatalf("%d store operations failed, the last: %v", n, err)
	}
	if seen == 0 || seen > fullReadFlushes {
		t.Errorf("a sees b's late buckets after %d flushes (0: never), want at most %d", seen, fullReadFlushes)
	}
	// Were they seen at once, b's return would not have tested anything:
	// its oldest buckets must lie beyond a's reads between whole ones.
	if seen == 1 {
		t.Errorf("a sees b's late buckets at its first flush: the test misses its case")
	}
	t.Logf("a sees all %d responses %d flushes after b's late write", want, seen)
}

// countingStore wraps a real store: it counts what a replica reads of each
// series and the errors the store returns; while down, its replica cannot
// reach the store (those errors are not counted).
type countingStore struct {
	state.Store
	mu      sync.Mutex
	buckets map[string]int64 // bucket numbers asked for per series
	widest  map[string]int64 // most buckets asked for in one call per series
	errs    int
	lastErr error
	down    bool
}

var errStoreDown = errors.New("store down (test)")

func (s *countingStore) isDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

func (s *countingStore) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func newCountingStore(s state.Store) *countingStore {
	return &countingStore{Store: s, buckets: map[string]int64{}, widest: map[string]int64{}}
}

func (s *countingStore) PutBuckets(ctx context.Context, signal, replica string, seq uint64, bs []state.Bucket, ttl time.Duration) error {
	if s.isDown() {
		return errStoreDown
	}
	err := s.Store.PutBuckets(ctx, signal, replica, seq, bs, ttl)
	s.noteErr(err)
	return err
}

// Exchange goes through PutBuckets and Buckets, to count them.
func (s *countingStore) Exchange(ctx context.Context, replica string, seq uint64, puts []state.SeriesBuckets, reads []state.SeriesSpan) ([][]state.ReplicaBucket, error) {
	return state.ExchangeEach(ctx, s, replica, seq, puts, reads)
}

func (s *countingStore) Buckets(ctx context.Context, signal string, from, to int64) ([]state.ReplicaBucket, error) {
	if s.isDown() {
		return nil, errStoreDown
	}
	n := max(to-from+1, 0)
	s.mu.Lock()
	s.buckets[signal] += n
	s.widest[signal] = max(s.widest[signal], n)
	s.mu.Unlock()
	rb, err := s.Store.Buckets(ctx, signal, from, to)
	s.noteErr(err)
	return rb, err
}

func (s *countingStore) Get(ctx context.Context, key string) ([]byte, error) {
	if s.isDown() {
		return nil, errStoreDown
	}
	return s.Store.Get(ctx, key)
}

func (s *countingStore) noteErr(err error) {
	if err != nil {
		s.mu.Lock()
		s.errs++
		s.lastErr = err
		s.mu.Unlock()
	}
}

// widestReads returns the most buckets asked for in one read of each
// series since the last reset.
func (s *countingStore) widestReads() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.widest)
}

// reset forgets the counts so far.
func (s *countingStore) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.buckets)
	clear(s.widest)
}

// total returns the bucket numbers asked for, all series together.
func (s *countingStore) total() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, b := range s.buckets {
		n += b
	}
	return n
}

// quiet drops the warnings of a store the test takes down.
var quiet = slog.New(slog.DiscardHandler)

// shareRig is two replicas with the default analyzers (every signal on)
// sharing their windows through one store, on a simulated clock.
type shareRig struct {
	now    time.Time
	stores [2]*countingStore
	p      [2]*Pipeline
	body   []byte // a simulator's answer with logprobs, for the confidence windows
	n      int
}

func newShareRig(tb testing.TB, backing state.Store) *shareRig {
	tb.Helper()
	r := &shareRig{now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}
	k := sim.DefaultKnobs()
	k.TTFT, k.ITL = 0, 0
	rec := httptest.NewRecorder()
	sim.New(sim.Options{Model: "m", Seed: 5, Knobs: k}).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":24,"logprobs":true,"top_logprobs":5,"messages":[{"role":"user","content":"hi"}]}`)))
	r.body, _ = io.ReadAll(rec.Result().Body)
	for i, name := range []string{"a", "b"} {
		r.stores[i] = newCountingStore(backing)
		p, err := New(Options{Config: config.Default().Analyzers, Now: func() time.Time { return r.now },
			Sharing: &share.Config{Store: r.stores[i], Replica: name}, Log: quiet})
		if err != nil {
			tb.Fatal(err)
		}
		r.p[i] = p
	}
	return r
}

// serve has replica i answer one request that ends now.
func (r *shareRig) serve(i int) {
	r.n++
	body := fmt.Appendf(nil, `{"model":"m","logprobs":true,"top_logprobs":5,"messages":[{"role":"user","content":"question %d about the system"}]}`, r.n)
	req := &exchange.Request{Operation: "chat", Model: "m", Backend: "x", Start: r.now.Add(-800 * time.Millisecond), Body: body}
	r.p[i].OnPrompt(req.Start, req.Operation, req.Body)
	r.p[i].OnRequest(req)
	r.p[i].OnResponse(req, &exchange.Response{Status: 200, Latency: 800 * time.Millisecond, Body: r.body, CompletionTokens: 24})
}

// fill has both replicas serve a request every step over span back from
// now, then flush each twice: their windows hold a bucket everywhere, in
// the store and imported.
func (r *shareRig) fill(ctx context.Context, span, step time.Duration) {
	end := r.now
	for r.now = end.Add(-span); r.now.Before(end); r.now = r.now.Add(step) {
		r.serve(0)
		r.serve(1)
	}
	r.now = end
	for range 2 {
		r.p[0].Flush(ctx)
		r.p[1].Flush(ctx)
	}
}

// newRedisShareRig is a shareRig over a redis-server of its own.
func newRedisShareRig(tb testing.TB) *shareRig {
	tb.Helper()
	srv := redistest.Start(tb)
	c, err := state.OpenRedis(srv.URL())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return newShareRig(tb, state.NewRedis(c, "test"))
}

// spans returns the span, in buckets, of each series replica i shares.
func (r *shareRig) spans(i int) map[string]int64 {
	out := map[string]int64{}
	for _, m := range r.p[i].share.Monitors() {
		m.Shared(func(name string, sh window.Sharer) {
			from, to := sh.Numbers()
			out[name] = to - from + 1
		})
	}
	return out
}

// responses returns the responses in replica i's latency window.
func (r *shareRig) responses(i int) int64 { return r.p[i].Evaluate().Latency.Responses }

// tick moves the clock on a second, in which each replica serves a
// request and flushes, b first.
func (r *shareRig) tick(ctx context.Context) {
	r.now = r.now.Add(time.Second)
	r.serve(0)
	r.serve(1)
	r.p[1].Flush(ctx)
	r.p[0].Flush(ctx)
}

// failures returns how many store operations failed, and the last error.
func (r *shareRig) failures() (int, error) {
	n, err := 0, error(nil)
	for _, s := range r.stores {
		s.mu.Lock()
		n += s.errs
		if s.lastErr != nil {
			err = s.lastErr
		}
		s.mu.Unlock()
	}
	return n, err
}

// BenchmarkShareFlush measures one replica's flush in steady state, every
// signal on with the default settings (10 s buckets; spans of up to 452
// buckets, 1235 in all), against a real redis-server: two replicas serve a
// request each per simulated second, and each op is one second of
// replica a's life, its flush (writes, reads, imports) timed. Flushes
// every tenth second read the whole span, the others only the newest
// buckets; the op averages both. buckets/op: bucket numbers asked of the
// store per flush, all series together.
func BenchmarkShareFlush(b *testing.B) {
	ctx := context.Background()
	r := newRedisShareRig(b)
	dflt := config.Default().Analyzers
	r.fill(ctx, dflt.Window+dflt.Reference, 5*time.Second)
	r.stores[0].reset()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		r.now = r.now.Add(time.Second)
		r.serve(0)
		r.serve(1)
		r.p[1].Flush(ctx)
		b.StartTimer()
		r.p[0].Flush(ctx)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.stores[0].total())/float64(b.N), "buckets/op")
	if n, err := r.failures(); n > 0 {
		b.Fatalf("%d store operations failed, the last: %v", n, err)
	}
}

// TestSharedContentWindows: two replicas serving alternate prompts
// through a real Redis see one content test: the same held-out prompts,
// the same AUC and p-value and the same risen terms, exactly, and the
// change of subject that neither saw alone in full.
func TestSharedContentWindows(t *testing.T) {
	srv := redistest.Start(t)
	c, err := state.OpenRedis(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	store := state.NewRedis(c, "test")
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	cfg := config.Default().Analyzers
	cfg.Window, cfg.Reference, cfg.MinRequests = 2*time.Minute, 10*time.Minute, 100
	cfg.Drift.Reservoir = 200
	cfg.Drift.Text.Explain = true
	var p [2]*Pipeline
	for i, name := range []string{"a", "b"} {
		if p[i], err = New(Options{Config: cfg, Now: func() time.Time { return now },
			Sharing: &share.Config{Store: store, Replica: name}, Log: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	words := map[bool][]string{
		false: strings.Fields("river mountain forest valley meadow canyon glacier island desert prairie"),
		true:  strings.Fields("invoice payment refund ledger account balance receipt transfer budget audit"),
	}
	n := 0
	serve := func(shift bool, d time.Duration) {
		for end := now.Add(d); now.Before(end); now = now.Add(250 * time.Millisecond) {
			n++
			w := words[shift]
			body := fmt.Appendf(nil, `{"model":"m","messages":[{"role":"user","content":"Tell me about the %s and the %s, please."}]}`,
				w[n%len(w)], w[(n/len(w))%len(w)])
			req := &exchange.Request{Operation: "chat", Model: "m", Backend: "x", Start: now, Body: body}
			p[n%2].OnPrompt(req.Start, req.Operation, req.Body)
			if n%40 == 0 {
				p[0].Flush(ctx)
				p[1].Flush(ctx)
			}
		}
	}
	serve(false, 12*time.Minute)
	serve(true, 2*time.Minute)
	for range 2 {
		p[0].Flush(ctx)
		p[1].Flush(ctx)
	}
	a, b := p[0].Evaluate().Drift, p[1].Evaluate().Drift
	if a == nil || b == nil || a.Content == nil || b.Content == nil {
		t.Fatalf("no content test: a %+v, b %+v", a, b)
	}
	if d := cmp.Diff(a.Content, b.Content); d != "" {
		t.Errorf("the replicas' content tests differ (-a +b):\n%s", d)
	}
	if c := a.Content; c.CurPrompts != 100 || c.RefPrompts != 100 || !c.Drift || len(c.Rose) == 0 ||
		!slices.Contains(words[true], c.Rose[0].Term) {
		t.Errorf("content %+v: want 100 held-out prompts a side (a sample of 200 of both replicas' prompts) and a drift toward the new words", c)
	}
}
