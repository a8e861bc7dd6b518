package calibrate

import (
	"errors"
	"math"
	"sync"
	"time"
)

// ErrUnknown is returned by Store.Label for an id that was never remembered,
// or that was evicted or has expired since.
var ErrUnknown = errors.New("calibrate: unknown or expired response id")

// Defaults for NewStore arguments that are not positive.
const (
	DefaultMaxPending = 100000
	DefaultMaxLabels  = 10000
)

// Pair is one labelled response: the confidence the model had in it, and
// whether the user said it was correct.
type Pair struct {
	Confidence float64 `json:"confidence"`
	Correct    bool    `json:"correct"`
}

// A Store joins labels to the confidence of the responses they are about.
// It remembers at most maxPending responses (evicting the oldest first) for
// at most ttl each, and keeps at most maxLabels labelled pairs (dropping the
// oldest first). Memory is bounded by those two numbers, whatever the
// traffic, and Remember and Label do not allocate in steady state.
//
// A Store is safe for concurrent use. Its methods take one mutex, which is
// fine because none of them is on a client's request path: the analyzers
// goroutine calls Remember, feedback handlers call Label.
type Store struct {
	maxPending int
	ttl        time.Duration

	mu sync.Mutex
	// index maps a remembered id to its node.
	index map[string]int32
	// nodes is a slab of at most maxPending nodes, grown on demand, linked
	// in insertion order (head oldest) or, when unused, into the free list.
	nodes      []node
	head, tail int32
	free       int32
	// labels is a ring of at most maxLabels pairs; pair number s (counting
	// from 0 since the Store was made) lives at labels[s%maxLabels] until
	// pair number s+maxLabels overwrites it.
	labels    []Pair
	maxLabels int
	nlabels   uint64
}

// node is one remembered response.
type node struct {
	id         string
	confidence float64
	at         time.Time
	// label is 1 + the number of the pair this response's label wrote, or 0
	// while it has none.
	label      uint64
	prev, next int32
}

const nilNode = -1

// NewStore returns an empty Store that remembers at most maxPending
// responses, each for ttl, and keeps the latest maxLabels labelled pairs.
// maxPending and maxLabels below 1 mean DefaultMaxPending and
// DefaultMaxLabels; a ttl of zero or less means responses do not expire and
// only maxPending bounds them.
func NewStore(maxPending int, ttl time.Duration, maxLabels int) *Store {
	if maxPending < 1 {
		maxPending = DefaultMaxPending
	}
	if maxPending > math.MaxInt32 {
		maxPending = math.MaxInt32
	}
	if maxLabels < 1 {
		maxLabels = DefaultMaxLabels
	}
	return &Store{
		maxPending: maxPending,
		ttl:        ttl,
		index:      make(map[string]int32),
		head:       nilNode,
		tail:       nilNode,
		free:       nilNode,
		maxLabels:  maxLabels,
	}
}

// Remember records the confidence of response id, made at now, so that a
// later Label can join it. confidence is the response's geometric-mean token
// probability and must be in (0, 1]; Remember ignores other values (NaN
// included) and the empty id. Remembering an id again replaces the earlier
// response, and any label it had stays in the pairs without being joined to
// the new one. Remember first drops the expired responses at the old end;
// when maxPending responses are remembered it evicts the oldest.
func (s *Store) Remember(id string, confidence float64, now time.Time) {
	if id == "" || !(confidence > 0 && confidence <= 1) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, ok := s.index[id]; ok {
		s.remove(i)
	}
	s.purge(now)
	if len(s.index) >= s.maxPending {
		s.remove(s.head)
	}
	i := s.alloc()
	s.nodes[i] = node{id: id, confidence: confidence, at: now, prev: s.tail, next: nilNode}
	if s.tail != nilNode {
		s.nodes[s.tail].next = i
	} else {
		s.head = i
	}
	s.tail = i
	s.index[id] = i
}

// Label records whether response id, labelled at now, was correct. It
// returns ErrUnknown when id was never remembered, or has been evicted or
// has expired (now is ttl or more after Remember). A second label for the
// same response replaces the first in place, so the latest word counts once;
// if the first has already been dropped from the ring, the second is added
// as a new pair. A labelled response stays remembered, and relabelable,
// until it expires or is evicted like any other.
func (s *Store) Label(id string, correct bool, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.index[id]
	if !ok {
		return ErrUnknown
	}
	n := &s.nodes[i]
	if s.expired(n, now) {
		s.remove(i)
		return ErrUnknown
	}
	p := Pair{Confidence: n.confidence, Correct: correct}
	if n.label != 0 && n.label-1+uint64(s.maxLabels) >= s.nlabels {
		// The first label is still in the ring: overwrite it.
		s.labels[(n.label-1)%uint64(s.maxLabels)] = p
		return nil
	}
	seq := s.nlabels
	if len(s.labels) < s.maxLabels {
		s.labels = append(s.labels, p)
	} else {
		s.labels[seq%uint64(s.maxLabels)] = p
	}
	s.nlabels++
	n.label = seq + 1
	return nil
}

// Pairs returns a copy of the labelled pairs, oldest first: at most
// maxLabels of them.
func (s *Store) Pairs() []Pair {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Pair, len(s.labels))
	if s.nlabels <= uint64(s.maxLabels) {
		copy(out, s.labels)
		return out
	}
	start := int(s.nlabels % uint64(s.maxLabels))
	k := copy(out, s.labels[start:])
	copy(out[k:], s.labels[:start])
	return out
}

// Len returns the number of responses remembered (labelled or not, until
// they expire or are evicted; expired ones count until Remember or Label
// purges them) and the number of labelled pairs kept.
func (s *Store) Len() (pending, labels int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.index), len(s.labels)
}

func (s *Store) expired(n *node, now time.Time) bool {
	return s.ttl > 0 && now.Sub(n.at) >= s.ttl
}

// purge drops expired responses from the old end. Nodes are in insertion
// order, so with a non-decreasing now it drops every expired one; if now
// goes backwards some may linger until Label finds them or they are evicted.
func (s *Store) purge(now time.Time) {
	for s.head != nilNode && s.expired(&s.nodes[s.head], now) {
		s.remove(s.head)
	}
}

// alloc returns an unused node, from the free list or by growing the slab.
func (s *Store) alloc() int32 {
	if s.free != nilNode {
		i := s.free
		s.free = s.nodes[i].next
		return i
	}
	s.nodes = append(s.nodes, node{})
	return int32(len(s.nodes) - 1)
}

// remove unlinks node i, forgets its id and puts it on the free list.
func (s *Store) remove(i int32) {
	n := &s.nodes[i]
	if n.prev != nilNode {
		s.nodes[n.prev].next = n.next
	} else {
		s.head = n.next
	}
	if n.next != nilNode {
		s.nodes[n.next].prev = n.prev
	} else {
		s.tail = n.prev
	}
	delete(s.index, n.id)
	*n = node{next: s.free, prev: nilNode}
	s.free = i
}
