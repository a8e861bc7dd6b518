package state

import (
	"context"
	"sync"
	"time"
)

// Memory is the in-process Store. Its zero value is not usable; use
// NewMemory.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[string]map[int64]map[string]memBucket // signal → start → replica
	docs    map[string]memDoc
	leases  map[string]memDoc // value: owner
	quotas  map[string]*memScope
	live    map[string]time.Time // replicas, until when
}

type memBucket struct {
	seq     uint64
	payload []byte
	expires time.Time
}

type memDoc struct {
	value   []byte
	expires time.Time // zero: never
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{now: time.Now, buckets: map[string]map[int64]map[string]memBucket{},
		docs: map[string]memDoc{}, leases: map[string]memDoc{}, quotas: map[string]*memScope{}}
}

var _ Store = (*Memory)(nil)

// PutBuckets implements Store.
func (m *Memory) PutBuckets(_ context.Context, signal, replica string, seq uint64, bs []Bucket, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	sig := m.buckets[signal]
	if sig == nil {
		sig = map[int64]map[string]memBucket{}
		m.buckets[signal] = sig
	}
	for _, b := range bs {
		reps := sig[b.Start]
		if reps == nil {
			reps = map[string]memBucket{}
			sig[b.Start] = reps
		}
		if old, ok := reps[replica]; ok && old.seq >= seq && now.Before(old.expires) {
			continue
		}
		reps[replica] = memBucket{seq: seq, payload: append([]byte(nil), b.Payload...), expires: now.Add(ttl)}
	}
	// Expired buckets go here, so that memory stays bounded by the ttl.
	for start, reps := range sig {
		for r, b := range reps {
			if !now.Before(b.expires) {
				delete(reps, r)
			}
		}
		if len(reps) == 0 {
			delete(sig, start)
		}
	}
	return nil
}

// Buckets implements Store.
func (m *Memory) Buckets(_ context.Context, signal string, from, to int64) ([]ReplicaBucket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var out []ReplicaBucket
	for start, reps := range m.buckets[signal] {
		if start < from || start > to {
			continue
		}
		for r, b := range reps {
			if now.Before(b.expires) {
				out = append(out, ReplicaBucket{Replica: r, Bucket: Bucket{Start: start, Payload: b.payload}})
			}
		}
	}
	return out, nil
}

// Exchange implements Store.
func (m *Memory) Exchange(ctx context.Context, replica string, seq uint64, puts []SeriesBuckets, reads []SeriesSpan) ([][]ReplicaBucket, error) {
	return ExchangeEach(ctx, m, replica, seq, puts, reads)
}

// Get implements Store.
func (m *Memory) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[key]
	if !ok || (!d.expires.IsZero() && !m.now().Before(d.expires)) {
		return nil, ErrNotFound
	}
	return d.value, nil
}

// Set implements Store.
func (m *Memory) Set(_ context.Context, key string, value []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := memDoc{value: append([]byte(nil), value...)}
	if ttl > 0 {
		d.expires = m.now().Add(ttl)
	}
	m.docs[key] = d
	return nil
}

// Acquire implements Store.
func (m *Memory) Acquire(_ context.Context, key, owner string, ttl time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if l, ok := m.leases[key]; ok && now.Before(l.expires) && string(l.value) != owner {
		return false, nil
	}
	m.leases[key] = memDoc{value: []byte(owner), expires: now.Add(ttl)}
	return true, nil
}

// Claim implements Store.
func (m *Memory) Claim(_ context.Context, docs map[string][]byte, ttl time.Duration) (map[string][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make(map[string][]byte, len(docs))
	for k, v := range docs {
		d, ok := m.docs[k]
		if !ok || (!d.expires.IsZero() && !now.Before(d.expires)) {
			d = memDoc{value: append([]byte(nil), v...)}
		}
		if ttl > 0 {
			d.expires = now.Add(ttl)
		}
		m.docs[k] = d
		out[k] = d.value
	}
	return out, nil
}

// SetMany implements Store.
func (m *Memory) SetMany(ctx context.Context, docs map[string][]byte, ttl time.Duration) error {
	for k, v := range docs {
		m.Set(ctx, k, v, ttl)
	}
	return nil
}
