package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Model discovery. A backend configured without a models list serves every
// model as far as the gateway knows. vLLM lists what it serves in its
// /v1/models, including LoRA adapters (entries whose "parent" is the base
// model), and adapters are loaded on some servers and not others; so the
// scraper reads each such backend's list now and then, and a model that
// some backend lists goes only to the backends that list it (Serves). A
// model no fresh list names still goes to any backend, which answers its
// own 404 when it does not serve it: discovery narrows, it never makes a
// model unknown that configuration allowed. A backend without a fresh
// list (not asked, not read yet, or unreadable for longer than
// Scraper.ModelsStaleAfter) serves every model, as before discovery: a
// server whose /v1/models fails is not thereby cut off from the base
// model it serves. The adapters' parents, kept with the ids, tell the
// analyzers each adapter's base model (Pool.BaseModel).
//
// Only backends of kind openai whose metrics endpoint is configured are
// asked (vLLM and other OpenAI-compatible servers that the scraper reads
// already): the gateway sends nothing of its own to a backend that was not
// set up for it. A TGI server serves the one model of its /info and has no
// adapters to route by.

// maxModelsBytes bounds a /v1/models answer read by discovery.
const maxModelsBytes = 1 << 20

// maxModelIDs bounds the ids kept from one backend's list.
const maxModelIDs = 4096

// ModelSet is a backend's discovered model list. It is immutable once
// stored.
type ModelSet struct {
	// ids maps each listed id to its "parent": a LoRA adapter's base
	// model, empty for a base model.
	ids map[string]string
	// AsOf is when the list was read.
	AsOf time.Time
}

// Has reports whether the set lists model; a nil set lists nothing.
func (m *ModelSet) Has(model string) bool {
	if m == nil {
		return false
	}
	_, ok := m.ids[model]
	return ok
}

// Parent returns the base model that the set gives as model's "parent"
// (model is a LoRA adapter); empty when it gives none or does not list
// model, and for a nil set.
func (m *ModelSet) Parent(model string) string {
	if m == nil {
		return ""
	}
	return m.ids[model]
}

// IDs returns the listed model ids, sorted.
func (m *ModelSet) IDs() []string {
	if m == nil {
		return nil
	}
	out := make([]string, 0, len(m.ids))
	for id := range m.ids {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// listing is the pool's index of the fresh discovered lists: the models
// some backend lists, each with the first parent a list gives it (in the
// pool's order of backends; empty for a base model). It is immutable once
// stored.
type listing struct {
	ids map[string]string
}

// Serves reports whether the backend may be sent requests for model: an
// empty model matches every backend; a configured models list decides for
// its backend; a backend with a fresh discovered list serves what it
// lists, and the models no backend's fresh list names; a backend without
// one serves every model. It takes no lock and does not allocate: Pick
// calls it per candidate.
//
// The backend's list and the pool's index are stored one after the other:
// a reader in between may let a backend serve a model that another
// backend's new list just claimed, for one pick; never the reverse.
func (b *Backend) Serves(model string) bool {
	if model == "" {
		return true
	}
	if b.models != nil {
		_, ok := b.models[model]
		return ok
	}
	d := b.discovered.Load()
	if d == nil || d.Has(model) || b.pool == nil {
		return true
	}
	return !b.pool.Listed(model)
}

// Listed reports whether some backend's fresh discovered list names model.
func (p *Pool) Listed(model string) bool {
	l := p.listing.Load()
	if l == nil {
		return false
	}
	_, ok := l.ids[model]
	return ok
}

// BaseModel returns the base model of the LoRA adapter model: the
// "parent" that some backend's fresh discovered list gives it; empty for
// a base model and for a model no fresh list names. Like Listed it takes
// no lock and does not allocate; it is safe for concurrent use.
func (p *Pool) BaseModel(model string) string {
	l := p.listing.Load()
	if l == nil {
		return ""
	}
	return l.ids[model]
}

// DiscoveredModels returns the backend's last discovered model list; nil
// before the first or once it went stale.
func (b *Backend) DiscoveredModels() *ModelSet { return b.discovered.Load() }

// StoreDiscoveredModels replaces the backend's discovered list (nil: none)
// and rebuilds the pool's index.
func (b *Backend) StoreDiscoveredModels(m *ModelSet) {
	b.discovered.Store(m)
	if b.pool != nil {
		b.pool.reindex()
	}
}

// reindex rebuilds the listing from the backends' discovered lists. It is
// serialized, so that two rebuilds cannot store out of order.
func (p *Pool) reindex() {
	p.listingMu.Lock()
	defer p.listingMu.Unlock()
	var ids map[string]string
	for _, b := range p.backends {
		m := b.discovered.Load()
		if m == nil || b.models != nil {
			continue
		}
		if ids == nil {
			ids = map[string]string{}
		}
		for id, parent := range m.ids {
			if ids[id] == "" {
				ids[id] = parent
			}
		}
	}
	if ids == nil {
		p.listing.Store(nil)
		return
	}
	p.listing.Store(&listing{ids: ids})
}

// discovers reports whether the scraper reads b's model list: a backend
// of kind openai without a configured list, whose metrics it reads.
func (b *Backend) discovers() bool {
	return b.models == nil && b.Kind == KindOpenAI && b.Metrics != nil
}

// ParseModelList reads the ids of an OpenAI /v1/models answer
// ({"object": "list", "data": [{"id": ...}, ...]}), LoRA adapters
// included, at most maxModelIDs of them, each mapped to its "parent":
// vLLM gives a LoRA adapter's base model there, null for a base model.
// A parent that is not a string, or names the id itself, counts as none.
func ParseModelList(body []byte) (map[string]string, error) {
	var l struct {
		Data []struct {
			ID string `json:"id"`
			// Parent is decoded loosely: a server that puts something
			// else there must not lose its whole list.
			Parent any `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("models: invalid list JSON: %w", err)
	}
	if l.Data == nil {
		return nil, fmt.Errorf("models: no \"data\" list")
	}
	ids := make(map[string]string, min(len(l.Data), maxModelIDs))
	for _, m := range l.Data {
		if m.ID == "" {
			continue
		}
		parent, _ := m.Parent.(string)
		if parent == m.ID {
			parent = ""
		}
		if old, seen := ids[m.ID]; seen {
			if old == "" {
				ids[m.ID] = parent
			}
			continue
		}
		if len(ids) < maxModelIDs {
			ids[m.ID] = parent
		}
	}
	return ids, nil
}

func (s *Scraper) scrapeModels(ctx context.Context, b *Backend) error {
	body, err := s.getLimit(ctx, b.URL.JoinPath("/v1/models").String(), maxModelsBytes)
	if err != nil {
		return fmt.Errorf("models: %w", err)
	}
	ids, err := ParseModelList(body)
	if err != nil {
		return err
	}
	now := time.Now()
	if old := b.discovered.Load(); old != nil && maps.Equal(old.ids, ids) {
		// The same list: refresh its age without rebuilding the index.
		b.discovered.Store(&ModelSet{ids: old.ids, AsOf: now})
		return nil
	}
	b.StoreDiscoveredModels(&ModelSet{ids: ids, AsOf: now})
	return nil
}

// expireModels drops the discovered lists last read before now −
// staleAfter, so that a backend whose list cannot be read any more stops
// narrowing (or widening) the routing of models.
func (p *Pool) expireModels(now time.Time, staleAfter time.Duration) {
	changed := false
	for _, b := range p.backends {
		if m := b.discovered.Load(); m != nil && now.Sub(m.AsOf) > staleAfter {
			if b.discovered.CompareAndSwap(m, nil) {
				changed = true
			}
		}
	}
	if changed {
		p.reindex()
	}
}
