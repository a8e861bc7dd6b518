// Package state holds what gateway replicas share: per-replica snapshots of
// the analyzers' time buckets (merged by readers), small documents such as
// a pinned baseline, and short leases. Two implementations: Memory (one
// process, the default) and Redis (several replicas; single node, Sentinel
// or Cluster through go-redis's UniversalClient).
//
// Buckets are written as cumulative per-replica snapshots tagged with a
// sequence number: a write whose sequence is not newer than the stored one
// is ignored, so a flush retried after a timeout, or delivered late, is
// applied at most once, and readers merge each replica's latest snapshot
// exactly once.
package state

import (
	"context"
	"errors"
	"time"
)

// Bucket is one replica's cumulative snapshot of one time bucket of a
// signal: Payload is the summary's binary encoding.
type Bucket struct {
	Start   int64 // bucket number: unix nanoseconds / bucket width
	Payload []byte
}

// ReplicaBucket is a stored snapshot and the replica that wrote it.
type ReplicaBucket struct {
	Replica string
	Bucket
}

// A Store is safe for concurrent use.
type Store interface {
	// PutBuckets stores replica's snapshots of some buckets of signal,
	// unless the stored ones carry a sequence >= seq. Snapshots expire
	// after ttl.
	PutBuckets(ctx context.Context, signal, replica string, seq uint64, buckets []Bucket, ttl time.Duration) error
	// Buckets returns every replica's latest snapshot of the buckets of
	// signal numbered from..to (inclusive).
	Buckets(ctx context.Context, signal string, from, to int64) ([]ReplicaBucket, error)
	// Exchange does PutBuckets for each of puts (replica, seq), then
	// Buckets for each of reads, whose results it returns in order, in
	// one round trip where the store can (Redis: one pipeline). After an
	// error some of the puts may have been stored.
	Exchange(ctx context.Context, replica string, seq uint64, puts []SeriesBuckets, reads []SeriesSpan) ([][]ReplicaBucket, error)
	// Get returns the document at key, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Set stores a document; ttl 0 keeps it until overwritten.
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// SetMany stores several documents with one ttl, in one round trip.
	SetMany(ctx context.Context, docs map[string][]byte, ttl time.Duration) error
	// Claim stores each of docs unless its key holds a document already,
	// keeps every key for ttl from now either way, and returns each key's
	// stored document: the first claim wins, in one round trip where the
	// store can.
	Claim(ctx context.Context, docs map[string][]byte, ttl time.Duration) (map[string][]byte, error)
	// Acquire takes or renews the lease key for owner; it reports whether
	// owner holds it for ttl from now.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
}

// SeriesBuckets is what Exchange writes of one signal.
type SeriesBuckets struct {
	Signal  string
	Buckets []Bucket
	TTL     time.Duration
}

// SeriesSpan is what Exchange reads of one signal: buckets From..To.
type SeriesSpan struct {
	Signal   string
	From, To int64
}

// ExchangeEach implements Store.Exchange with one PutBuckets and one
// Buckets call per series, for stores that have no cheaper way.
func ExchangeEach(ctx context.Context, s interface {
	PutBuckets(ctx context.Context, signal, replica string, seq uint64, buckets []Bucket, ttl time.Duration) error
	Buckets(ctx context.Context, signal string, from, to int64) ([]ReplicaBucket, error)
}, replica string, seq uint64, puts []SeriesBuckets, reads []SeriesSpan) ([][]ReplicaBucket, error) {
	for _, p := range puts {
		if err := s.PutBuckets(ctx, p.Signal, replica, seq, p.Buckets, p.TTL); err != nil {
			return nil, err
		}
	}
	out := make([][]ReplicaBucket, len(reads))
	for i, r := range reads {
		rb, err := s.Buckets(ctx, r.Signal, r.From, r.To)
		if err != nil {
			return nil, err
		}
		out[i] = rb
	}
	return out, nil
}

// ErrNotFound is returned by Get for a missing key.
var ErrNotFound = errors.New("state: not found")
