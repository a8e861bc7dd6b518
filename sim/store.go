package sim

import (
	"container/list"
	"encoding/json"
	"sync"
)

// maxStoredResponses bounds the responses a Server keeps. vLLM keeps every
// stored response in memory without bound (and so disables the store by
// default); the simulator keeps the most recently used ones instead.
const maxStoredResponses = 10000

// storedResponse is a response kept for GET /v1/responses/{id} and for
// requests that continue it with previous_response_id.
type storedResponse struct {
	resp responseObject
	// items are the input items of the request that made it.
	items []json.RawMessage
	// history is the conversation's text without the instructions: the
	// previous response's history, this input, this output; what a
	// follow-up puts after its own instructions.
	history string
}

// responseStore is an LRU of stored responses, safe for concurrent use.
type responseStore struct {
	mu    sync.Mutex
	limit int
	byID  map[string]*list.Element // of *storedResponse
	order list.List                // most recently used first
}

func newResponseStore(limit int) *responseStore {
	return &responseStore{limit: limit, byID: make(map[string]*list.Element)}
}

// put stores r under its id, replacing one with the same id (identical
// requests get identical ids), and evicts the least recently used beyond
// the limit.
func (st *responseStore) put(r *storedResponse) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if e, ok := st.byID[r.resp.ID]; ok {
		e.Value = r
		st.order.MoveToFront(e)
		return
	}
	st.byID[r.resp.ID] = st.order.PushFront(r)
	for st.order.Len() > st.limit {
		last := st.order.Back()
		st.order.Remove(last)
		delete(st.byID, last.Value.(*storedResponse).resp.ID)
	}
}

// get returns the response stored under id and marks it used.
func (st *responseStore) get(id string) (*storedResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if !ok {
		return nil, false
	}
	st.order.MoveToFront(e)
	return e.Value.(*storedResponse), true
}

// remove deletes the response stored under id and reports whether there
// was one.
func (st *responseStore) remove(id string) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	e, ok := st.byID[id]
	if ok {
		st.order.Remove(e)
		delete(st.byID, id)
	}
	return ok
}
