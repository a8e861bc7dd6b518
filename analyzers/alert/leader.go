package alert

import (
	"context"
	"time"
)

// LeaseStore grants leases; state.Store satisfies it.
type LeaseStore interface {
	// Acquire takes or renews the lease key for owner and reports whether
	// owner holds it for ttl from now.
	Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
}

// Leader elects the one replica that sends notifications: the holder of a
// lease, taken or renewed at every Observe. Replicas must share Store and
// Key and differ in Owner.
type Leader struct {
	Store LeaseStore
	// Owner identifies this replica (e.g. share.ReplicaID()).
	Owner string
	// TTL is the lease's length; it must exceed the period so that the
	// holder renews it in time. Zero: 3 periods.
	TTL time.Duration
	// Key is the lease's key. Empty: "alert/leader".
	Key string
}

// leads reports whether this engine sends. Without a Leader (or without its
// store) the single process sends. When the store fails the engine does
// not send: a missed notification is re-sent later by the leader, while a
// duplicate cannot be taken back.
func (e *Engine) leads(ctx context.Context) bool {
	l := e.leader
	if l == nil || l.Store == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	ok, err := l.Store.Acquire(ctx, l.Key, l.Owner, l.TTL)
	if err != nil {
		e.storeFails.Add(1)
		e.log.Warn("alert lease not acquired: not sending", "err", err)
		return false
	}
	return ok
}
