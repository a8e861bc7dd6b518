package balance

import (
	"github.com/vigil-gw/vigil/gateway/balance/affinity"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// A Request is one pick as the balancer's parts see it: what was asked,
// the pool, and what the picker says of its choice. The Balancer pools
// Requests, because the parts are called through interfaces and a pointer
// handed to an interface call escapes to the heap: a Request on the pick's
// stack would cost an allocation per pick. A part is given a Request for
// the length of its call and must not keep it.
type Request struct {
	// Model is the model asked for; empty: any.
	Model string
	// Kinds are the backend kinds that serve the route; empty: any.
	Kinds []string
	// Exclude are the backends a retried request already tried.
	Exclude []*upstream.Backend
	// Backends is the pool, in pool order; candidates are indexes into it.
	Backends []*upstream.Backend
	// Decision is what the picker says of its choice; Strategy is set
	// before the parts run.
	Decision Decision

	// key is a copy of the caller's key (its chain only, Blocks[:N]), so
	// that the caller's, on the gateway's stack, does not escape.
	key   affinity.Key
	keyed bool
	// cands is PickFor's candidate buffer, with room for the whole pool.
	cands []int32
}

// Key returns the request's prompt key; nil when it has none.
func (r *Request) Key() *affinity.Key {
	if !r.keyed {
		return nil
	}
	return &r.key
}

// setKey copies k (nil: none) into the request.
func (r *Request) setKey(k *affinity.Key) {
	r.keyed = k != nil
	if k == nil {
		return
	}
	r.key.N, r.key.Chars, r.key.Anchor, r.key.Affinity = k.N, k.Chars, k.Anchor, k.Affinity
	copy(r.key.Blocks[:k.N], k.Blocks[:k.N])
}

// request returns a pooled Request for a pick.
func (b *Balancer) request(model string, kinds []string, exclude []*upstream.Backend) *Request {
	r := b.reqs.Get().(*Request)
	// The slices are copied, not kept: kept in the pooled Request they
	// would escape, and a caller's variadic exclude (append(tried, b)...)
	// would cost an allocation.
	r.Model, r.Backends = model, b.pool.Backends()
	r.Kinds, r.Exclude = append(r.Kinds[:0], kinds...), append(r.Exclude[:0], exclude...)
	r.Decision = Decision{Strategy: b.strategy}
	r.keyed = false
	return r
}

// release returns r to the pool. What it keeps (kinds, backends) lives
// as long as the pool does.
func (b *Balancer) release(r *Request) {
	r.Model, r.Decision = "", Decision{}
	b.reqs.Put(r)
}

// Reason says why the prefix strategy chose a backend.
type Reason uint8

// The reasons of a Decision.
const (
	// ReasonNone: not the prefix strategy, or a single candidate.
	ReasonNone Reason = iota
	// ReasonMatch: the backend holds the longest prefix of the prompt.
	ReasonMatch
	// ReasonPlacement: no candidate holds any of it; the backend is the
	// anchor's rendezvous choice.
	ReasonPlacement
	// ReasonLoad: the preferred backend was much busier than the least
	// busy (the load guard); chosen as dynamic does.
	ReasonLoad
	// ReasonShort: the prompt is shorter than min_chars, has no full
	// block or could not be read; chosen as dynamic does.
	ReasonShort
)

var reasonNames = [...]string{"", "match", "placement", "load", "short"}

// String returns the reason's name as spans and the access log record it
// ("" for ReasonNone).
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// A Decision says how PickFor chose. It is small and holds no prompt data.
type Decision struct {
	// Strategy is the balancer's strategy (balancer.strategy).
	Strategy string
	// Blocks is the number of full blocks of the prompt hashed; Matched
	// the number of leading ones the preferred backend held.
	Blocks, Matched int
	// Preferred is the backend the prefix chose (by match or placement)
	// before the load guard; nil when none was preferred.
	Preferred *upstream.Backend
	// GuardOverride: the load guard passed over Preferred.
	GuardOverride bool
	// Hot: the prompt's anchor sent more than one backend's even share
	// of the requests; its holders shared them by load, and the guard
	// spilled at balancer.prefix.hot_guard_abs.
	Hot bool
	// Reason says why the chosen backend was chosen.
	Reason Reason
}
