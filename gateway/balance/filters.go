package balance

import (
	"slices"

	"github.com/vigil-gw/vigil/gateway/upstream"
)

// A Filter removes the backends that cannot take a request. Filters run in
// order, each on what the one before left, and read the backends' live
// state, so that an ejection or a health change takes effect at the next
// pick. Filters are safe for concurrent use.
type Filter interface {
	// Filter returns the candidates of cands (pool indexes, in pool
	// order) that may serve r, in order, in cands' array.
	Filter(r *Request, cands []int32) []int32
	// Err is the error of a pick that this filter leaves without a
	// candidate.
	Err() error
}

var (
	_ Filter = kindFilter{}
	_ Filter = modelFilter{}
	_ Filter = healthyFilter{}
	_ Filter = untriedFilter{}
)

// filters are every balancer's, in order: first what a backend is
// configured for, whose failure means no backend could ever serve the
// request (404), then what it can take now (503).
var filters = []Filter{kindFilter{}, modelFilter{}, healthyFilter{}, untriedFilter{}}

// kindFilter keeps the backends of a kind that serves the route (openai,
// tgi): a TGI-native route cannot go to an OpenAI-only server.
type kindFilter struct{}

func (kindFilter) Filter(r *Request, cands []int32) []int32 {
	if len(r.Kinds) == 0 {
		return cands
	}
	kinds, backends, kept := r.Kinds, r.Backends, cands[:0]
	for _, c := range cands {
		if slices.Contains(kinds, backends[c].Kind) {
			kept = append(kept, c)
		}
	}
	return kept
}

func (kindFilter) Err() error { return upstream.ErrUnknownModel }

// modelFilter keeps the backends that serve the model: by their configured
// models, else by the models they list (a LoRA adapter loaded on a server
// is a model it lists), else every model.
type modelFilter struct{}

func (modelFilter) Filter(r *Request, cands []int32) []int32 {
	if r.Model == "" {
		return cands
	}
	model, backends, kept := r.Model, r.Backends, cands[:0]
	for _, c := range cands {
		if backends[c].Serves(model) {
			kept = append(kept, c)
		}
	}
	return kept
}

func (modelFilter) Err() error { return upstream.ErrUnknownModel }

// healthyFilter keeps the backends whose last active check passed and
// that passive health has not ejected.
type healthyFilter struct{}

func (healthyFilter) Filter(r *Request, cands []int32) []int32 {
	backends, kept := r.Backends, cands[:0]
	for _, c := range cands {
		if backends[c].Healthy() {
			kept = append(kept, c)
		}
	}
	return kept
}

func (healthyFilter) Err() error { return upstream.ErrNoHealthy }

// untriedFilter drops the backends a retried request already tried: a
// retry goes elsewhere or not at all.
type untriedFilter struct{}

func (untriedFilter) Filter(r *Request, cands []int32) []int32 {
	if len(r.Exclude) == 0 {
		return cands
	}
	exclude, backends, kept := r.Exclude, r.Backends, cands[:0]
	for _, c := range cands {
		if !slices.Contains(exclude, backends[c]) {
			kept = append(kept, c)
		}
	}
	return kept
}

func (untriedFilter) Err() error { return upstream.ErrNoHealthy }
