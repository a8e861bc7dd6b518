// Package usage is the token usage ledger: what each tenant used of each
// model on each backend, in minute and hour buckets shared with the other
// replicas, as GET /admin/usage shows it.
package usage

import (
	"cmp"
	"encoding"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/exchange"
)

// Report is the token usage of the last hour and of the last day, every
// replica's, as GET /admin/usage shows it.
type Report struct {
	Hour Window `json:"hour"`
	Day  Window `json:"day"`
}

// Window is the usage of the responses that ended in [Since, Until]:
// its totals and one row per tenant, model and backend, by total tokens
// (prompt plus completion) descending, then by tenant, model and backend.
// Since is the start of the oldest bucket counted, so a window covers a
// little more than its name says (up to a minute for the hour, an hour for
// the day), never less.
type Window struct {
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	Totals Counts    `json:"totals"`
	Rows   []Row     `json:"rows"`
}

// Counts counts responses that a backend answered (failures
// included) and their tokens. CountedRequests are those whose completion
// tokens the gateway counted from the stream (exchange.UsageCounted): their
// prompt tokens are unknown and not in PromptTokens.
type Counts struct {
	Requests         int64 `json:"requests"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	CountedRequests  int64 `json:"counted_requests"`
}

func (c Counts) plus(o Counts) Counts {
	return Counts{c.Requests + o.Requests, c.PromptTokens + o.PromptTokens,
		c.CompletionTokens + o.CompletionTokens, c.CountedRequests + o.CountedRequests}
}

// Row is the usage of one tenant of one model on one backend. Tenant
// is "" for requests without a tenant; "other" in any of the three labels
// stands for the values beyond the bounds (see Ledger).
type Row struct {
	Tenant  string `json:"tenant"`
	Model   string `json:"model"`
	Backend string `json:"backend"`
	Counts
}

// The usage ledger's bounds, which hold whatever the traffic.
const (
	// MaxKeys bounds the (tenant, model, backend) keys of one bucket;
	// the usage of the keys beyond is counted under "other" for all three.
	MaxKeys = 4096
	// MaxModels bounds the models named without being configured,
	// when some backend serves every model: the first ones seen.
	MaxModels = 64
	// MaxLabel bounds a label's length; longer ones are Other.
	MaxLabel = 256
	// Other is the label that stands for the values beyond the bounds.
	Other = "other"
)

// The usage series: minute buckets for the last hour, hour buckets for the
// last day, each with room for the bucket in progress and one more.
const (
	// MinuteSeries and HourSeries name the series in the store.
	MinuteSeries    = "usage/minute"
	HourSeries      = "usage/hour"
	usageMinuteSpan = 62
	usageHourSpan   = 26
	// ReadEvery: the other replicas' usage is read every this many
	// flushes (10 s at the default interval), not every flush: 88 buckets
	// a second would be most of the flush's reads, for a view that
	// nobody needs to the second.
	ReadEvery = 10
)

// Ledger is the usage ledger: what each (tenant, model, backend) used, in
// minute and hour buckets shared with the other replicas. Labels are
// bounded whatever the traffic: tenants by the gateway (64, then "other");
// models like the error-rate keys (configured ones by name, others
// "other", or the first 64 seen when some backend serves every model);
// and at most MaxKeys keys per bucket, beyond which usage is counted
// under "other" for all three labels (the keys kept are the same on every
// replica: see ledger). Responses the gateway answered itself are not
// counted. It is safe for concurrent use.
type Ledger struct {
	mu sync.Mutex
	// models are the configured models, always named; when open (some
	// backend serves every model), seen names the first MaxModels
	// others too.
	models map[string]bool
	open   bool
	seen   map[string]bool

	minute, hour *window.Shared[ledger, *ledger]
}

// New returns an empty ledger that names the configured models and, when
// some backend serves every model (or there is no backend), the first
// MaxModels others seen.
func New(models map[string]bool, backends []config.Backend) *Ledger {
	u := &Ledger{models: models, seen: map[string]bool{},
		minute: window.NewShared[ledger](time.Minute, usageMinuteSpan, nil),
		hour:   window.NewShared[ledger](time.Hour, usageHourSpan, nil)}
	u.open = len(backends) == 0
	for _, b := range backends {
		if len(b.Models) == 0 {
			u.open = true
		}
	}
	return u
}

// Add counts one response that ended at t; those the gateway answered
// itself (no backend) are not usage.
func (u *Ledger) Add(t time.Time, r *exchange.Request, resp *exchange.Response) {
	if r.Backend == "" {
		return
	}
	c := Counts{Requests: 1, PromptTokens: int64(max(resp.PromptTokens, 0)),
		CompletionTokens: int64(max(resp.CompletionTokens, 0))}
	if resp.UsageSource == exchange.UsageCounted {
		c.CountedRequests = 1
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	k := usageKey{label(r.Tenant), u.model(r.Model), label(r.Backend)}
	if b := u.minute.Bucket(t); b != nil {
		b.add(k, c)
	}
	if b := u.hour.Bucket(t); b != nil {
		b.add(k, c)
	}
}

// label bounds a label's length.
func label(s string) string {
	if len(s) > MaxLabel {
		return Other
	}
	return s
}

// model bounds the model names like the error-rate keys: a configured
// model keeps its name, another is "other", unless some backend serves
// every model: then the first MaxModels others seen keep theirs too.
// The first seen, not a hash rule, because only this replica names them;
// the ledger's key bound is what keeps the merged picture bounded.
// Callers hold u.mu.
func (u *Ledger) model(m string) string {
	switch {
	case len(m) > MaxLabel:
		return Other
	case u.models[m] || u.seen[m]:
		return m
	case u.open && len(u.seen) < MaxModels:
		m = strings.Clone(m) // it may share a large request body's memory
		u.seen[m] = true
		return m
	}
	return Other
}

// Shared hands the series to the replica flusher, under the lock.
func (u *Ledger) Shared(f func(name string, s window.Sharer)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(MinuteSeries, u.minute)
	f(HourSeries, u.hour)
}

// Sharing keeps a series' snapshots in the store as long as the series
// spans, and ten minutes more, so that a replica that went away still
// counts in the day's usage; the other replicas' snapshots are read every
// ReadEvery flushes.
func (u *Ledger) Sharing(name string) (ttl time.Duration, readEvery int) {
	if name == HourSeries {
		return usageHourSpan*time.Hour + 10*time.Minute, ReadEvery
	}
	return usageMinuteSpan*time.Minute + 10*time.Minute, ReadEvery
}

// Report returns the usage of the last hour and of the last day before
// now by tenant, model and backend, merged over every replica: this one's
// and what it last read of the others' (every ReadEvery flushes).
func (u *Ledger) Report(now time.Time) (Report, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	h, err := usageWindow(u.minute, now, time.Hour)
	if err != nil {
		return Report{}, err
	}
	d, err := usageWindow(u.hour, now, 24*time.Hour)
	if err != nil {
		return Report{}, err
	}
	return Report{Hour: h, Day: d}, nil
}

// usageWindow merges the buckets of s, local and imported, that overlap
// [now-span, now].
func usageWindow(s *window.Shared[ledger, *ledger], now time.Time, span time.Duration) (Window, error) {
	v, err := s.View()
	if err != nil {
		return Window{}, err
	}
	from := v.Start(now.Add(-span))
	l, err := v.Range(from, v.Start(now).Add(v.Width()))
	if err != nil {
		return Window{}, err
	}
	w := Window{Since: from, Until: now.UTC(), Rows: l.rows()}
	for _, r := range w.Rows {
		w.Totals = w.Totals.plus(r.Counts)
	}
	return w, nil
}

// usageKey is what the ledger counts by.
type usageKey struct{ tenant, model, backend string }

func (k usageKey) compare(o usageKey) int {
	return cmp.Or(strings.Compare(k.tenant, o.tenant), strings.Compare(k.model, o.model), strings.Compare(k.backend, o.backend))
}

// hash is 64-bit FNV-1a over the labels, each followed by 0xff (a byte
// that UTF-8 never holds), fixed so that every replica ranks keys alike.
func (k usageKey) hash() uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [3]string{k.tenant, k.model, k.backend} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
		h ^= 0xff
		h *= 1099511628211
	}
	return h
}

type ledgerEntry struct {
	hash uint64
	c    Counts
}

// ledger is one bucket of the usage: counts by key, a window summary.
//
// It keeps at most MaxKeys keys, by the rule of window.Counts: the
// keys with the smallest (hash, key); a new key with a smaller one evicts
// the kept key with the largest, whose counts move to other. The kept keys
// and every count are then a function of what was added, whatever the
// order of adds and merges, so that replicas merging the same snapshots
// in any order agree, and a merged bucket is bounded like a local one.
//
// The zero value is empty. A ledger is not safe for concurrent use.
type ledger struct {
	m     map[usageKey]ledgerEntry
	other Counts
	// worst is the kept key with the largest (hash, key), valid while m
	// is full.
	worst     usageKey
	worstHash uint64
}

var (
	_ encoding.BinaryMarshaler   = (*ledger)(nil)
	_ encoding.BinaryUnmarshaler = (*ledger)(nil)
	_                            = window.NewShared[ledger, *ledger]
)

func keyLess(ha uint64, a usageKey, hb uint64, b usageKey) bool {
	if ha != hb {
		return ha < hb
	}
	return a.compare(b) < 0
}

// add counts c under k. It allocates only for a key it starts keeping.
func (l *ledger) add(k usageKey, c Counts) {
	if e, ok := l.m[k]; ok {
		e.c = e.c.plus(c)
		l.m[k] = e
		return
	}
	if l.m == nil {
		l.m = map[usageKey]ledgerEntry{}
	}
	h := k.hash()
	if len(l.m) < MaxKeys {
		l.m[k.clone()] = ledgerEntry{h, c}
		if len(l.m) == MaxKeys {
			l.findWorst()
		}
		return
	}
	if !keyLess(h, k, l.worstHash, l.worst) {
		l.other = l.other.plus(c)
		return
	}
	l.other = l.other.plus(l.m[l.worst].c)
	delete(l.m, l.worst)
	l.m[k.clone()] = ledgerEntry{h, c}
	l.findWorst()
}

func (k usageKey) clone() usageKey {
	return usageKey{strings.Clone(k.tenant), strings.Clone(k.model), strings.Clone(k.backend)}
}

func (l *ledger) findWorst() {
	first := true
	for k, e := range l.m {
		if first || keyLess(l.worstHash, l.worst, e.hash, k) {
			l.worst, l.worstHash, first = k, e.hash, false
		}
	}
}

// Merge adds o's counts to l. It never fails.
func (l *ledger) Merge(o *ledger) error {
	if o == l {
		c := &ledger{m: make(map[usageKey]ledgerEntry, len(l.m)), other: l.other}
		for k, e := range l.m {
			c.m[k] = e
		}
		o = c
	}
	for k, e := range o.m {
		l.add(k, e.c)
	}
	l.other = l.other.plus(o.other)
	return nil
}

// Reset empties l, keeping its map storage.
func (l *ledger) Reset() {
	clear(l.m)
	l.other = Counts{}
	l.worst, l.worstHash = usageKey{}, 0
}

// rows returns l's keys and, when any usage went beyond the bound, an
// "other" row for it, by total tokens descending then by key.
func (l *ledger) rows() []Row {
	out := make([]Row, 0, len(l.m)+1)
	other := usageKey{Other, Other, Other}
	for k, e := range l.m {
		c := e.c
		if k == other {
			c = c.plus(l.other)
		}
		out = append(out, Row{k.tenant, k.model, k.backend, c})
	}
	if _, ok := l.m[other]; !ok && l.other.Requests > 0 {
		out = append(out, Row{Other, Other, Other, l.other})
	}
	slices.SortFunc(out, func(a, b Row) int {
		ta, tb := a.PromptTokens+a.CompletionTokens, b.PromptTokens+b.CompletionTokens
		return cmp.Or(cmp.Compare(tb, ta), usageKey{a.Tenant, a.Model, a.Backend}.compare(usageKey{b.Tenant, b.Model, b.Backend}))
	})
	return out
}

// tagLedger is the ledger encoding's version byte: type 0xa, outside the
// window package's types, version 1.
const tagLedger byte = 0xa1

// MarshalBinary encodes l: the version byte; the other counts; the number
// of keys; then each key in increasing (tenant, model, backend) order, as
// three uvarint-length-prefixed labels and its counts. Counts are four
// uvarints: requests, prompt, completion and counted requests.
func (l *ledger) MarshalBinary() ([]byte, error) {
	keys := make([]usageKey, 0, len(l.m))
	size := 1 + 5*binary.MaxVarintLen64
	for k := range l.m {
		keys = append(keys, k)
		size += len(k.tenant) + len(k.model) + len(k.backend) + 7*binary.MaxVarintLen64
	}
	slices.SortFunc(keys, usageKey.compare)
	b := make([]byte, 0, size)
	b = append(b, tagLedger)
	b = appendUsageCounts(b, l.other)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		for _, s := range [3]string{k.tenant, k.model, k.backend} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
		b = appendUsageCounts(b, l.m[k].c)
	}
	return b, nil
}

func appendUsageCounts(b []byte, c Counts) []byte {
	for _, v := range [4]int64{c.Requests, c.PromptTokens, c.CompletionTokens, c.CountedRequests} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return b
}

// UnmarshalBinary replaces l with the ledger encoded in data. It fails
// with an error wrapping window.ErrCorrupt (window.ErrVersion for a newer
// format) on input that MarshalBinary cannot have written, leaving l
// unchanged, and allocates in proportion to len(data) at most.
func (l *ledger) UnmarshalBinary(data []byte) error {
	d := ledgerDecoder{window.NewDecoder("usage ledger", tagLedger, data)}
	v := ledger{other: d.counts()}
	n := d.Uvarint()
	switch {
	case d.Err() != nil:
		return d.Err()
	case n > MaxKeys:
		return d.Fail("%d keys, at most %d", n, MaxKeys)
	case 7*n > uint64(d.Len()): // each key takes at least seven bytes
		return d.Fail("truncated")
	case v.other.Requests > 0 && n < MaxKeys:
		// Usage goes to other only once the keys are full, and they stay full.
		return d.Fail("other counted with %d < %d keys", n, MaxKeys)
	case v.other.Requests == 0 && v.other != Counts{}:
		return d.Fail("other counts without requests")
	case v.other.CountedRequests > v.other.Requests:
		return d.Fail("other: more counted requests than requests")
	}
	v.m = make(map[usageKey]ledgerEntry, n)
	total := v.other
	var prev usageKey
	for i := range int(n) {
		k := usageKey{d.label(), d.label(), d.label()}
		c := d.counts()
		switch {
		case d.Err() != nil:
			return d.Err()
		case i > 0 && k.compare(prev) <= 0:
			return d.Fail("key %q not after %q", k, prev)
		case c.Requests == 0:
			return d.Fail("key %q has no requests", k)
		case c.CountedRequests > c.Requests:
			return d.Fail("key %q: more counted requests than requests", k)
		}
		// Totals must fit too, for what merges them.
		if total.Requests > math.MaxInt64-c.Requests || total.PromptTokens > math.MaxInt64-c.PromptTokens ||
			total.CompletionTokens > math.MaxInt64-c.CompletionTokens {
			return d.Fail("counts overflow int64")
		}
		total = total.plus(c)
		v.m[k] = ledgerEntry{k.hash(), c}
		prev = k
	}
	if err := d.Finish(); err != nil {
		return err
	}
	if len(v.m) == MaxKeys {
		v.findWorst()
	}
	*l = v
	return nil
}

// ledgerDecoder reads a ledger with window's decoding rules.
type ledgerDecoder struct{ *window.Decoder }

func (d ledgerDecoder) counts() Counts {
	return Counts{d.Count(), d.Count(), d.Count(), d.Count()}
}

// label reads a length-prefixed label of at most MaxLabel bytes.
func (d ledgerDecoder) label() string {
	n := d.Uvarint()
	switch {
	case d.Err() != nil:
		return ""
	case n > MaxLabel:
		d.Fail("label of %d bytes, at most %d", n, MaxLabel)
		return ""
	}
	return string(d.Bytes(int(n)))
}
