package upstream

import (
	"math"
	"sync"
	"time"
)

// Prefix-cache hit rates. Two sources tell how much of the prompts a
// backend served from its prefix (KV) cache: the backend's own counters
// (vLLM's vllm:prefix_cache_queries and vllm:prefix_cache_hits, in
// tokens), scraped from its metrics endpoint, and the cached prompt tokens
// its answers report (usage.prompt_tokens_details.cached_tokens and the
// like), which the gateway adds up per backend as they pass. The server's
// counters see every request, including those that did not come through
// this gateway or did not report usage, so they win when the backend
// exports them; the gateway's figures stand in for servers without them
// (and for vLLM started without --enable-prompt-tokens-details, they are
// zero: the hit rate then says 0 from the gateway, which is why the server
// source is preferred).
//
// The hit rate is taken over a window (PrefixWindow) of the scraper's
// samples, not over the backend's lifetime: a lifetime ratio hides a
// change in the traffic or the routing for hours.

// PrefixWindow is the span of the recent hit rate: the change of the
// counters between the oldest sample within it and the newest.
const PrefixWindow = time.Minute

// maxPrefixSamples bounds the samples kept per backend (a scrape interval
// under PrefixWindow/maxPrefixSamples shortens the window instead).
const maxPrefixSamples = 256

// Prefix-cache sources, as PrefixCache.Source names them.
const (
	PrefixSourceServer  = "server"
	PrefixSourceGateway = "gateway"
)

// PrefixCache is a backend's prefix-cache figures as of the last scrape.
// It is immutable once stored.
type PrefixCache struct {
	// HitRate is hits/queries over the last PrefixWindow, in [0, 1]; NaN
	// when the window saw no prompt tokens (or has a single sample).
	HitRate float64
	// Source is where HitRate, Queries and Hits come from:
	// PrefixSourceServer when the backend's metrics endpoint exports the
	// prefix-cache counters (and its reading is fresh), else
	// PrefixSourceGateway.
	Source string
	// WindowQueries and WindowHits are the prompt tokens looked up in the
	// cache and those found, over the window.
	WindowQueries, WindowHits float64
	// Queries and Hits are the totals of Source: the server's counters
	// since the gateway first read them (a server restart's reset is
	// bridged: the counts after it are added, never subtracted), or the
	// gateway's PromptTokens and CachedTokens.
	Queries, Hits float64
	// ServerQueries and ServerHits are the server's totals as above; NaN
	// when its metrics endpoint never exported them.
	ServerQueries, ServerHits float64
	// AsOf is when the sample was taken.
	AsOf time.Time
}

// prefixSample is one reading of a backend's counters.
type prefixSample struct {
	at time.Time
	// q and h are the server's bridged totals; NaN when the reading was
	// missing or stale.
	q, h float64
	// p and c are the gateway's prompt and cached tokens.
	p, c int64
}

// prefixState is the scraper's running state for one backend.
type prefixState struct {
	mu      sync.Mutex
	samples []prefixSample // oldest first, within PrefixWindow of the newest
	// The server's counters: the last raw values, the time of the reading
	// they came from, and the totals bridged across resets.
	rawQ, rawH float64
	readAt     time.Time
	accQ, accH float64
	seen       bool // the server exported the counters at least once
}

// ObserveTokens records one answer's prompt tokens and how many of them
// the backend read from its prefix cache, as its usage reported them.
// Values out of range are clamped (cached to [0, prompt]). It is on the
// request path: two atomic adds.
func (b *Backend) ObserveTokens(prompt, cached int) {
	if prompt <= 0 {
		return
	}
	b.promptTokens.Add(int64(prompt))
	if cached > 0 {
		b.cachedTokens.Add(int64(min(cached, prompt)))
	}
}

// PromptTokens returns the prompt tokens that the backend's answers through
// this gateway reported, since start.
func (b *Backend) PromptTokens() int64 { return b.promptTokens.Load() }

// CachedTokens returns the part of PromptTokens the backend reported as
// read from its prefix cache.
func (b *Backend) CachedTokens() int64 { return b.cachedTokens.Load() }

// PrefixCache returns the backend's prefix-cache figures as of the last
// scrape; nil before the first.
func (b *Backend) PrefixCache() *PrefixCache { return b.prefixCache.Load() }

// samplePrefix reads the backend's counters at now, adds them to the
// window and stores the figures. A server reading older than staleAfter
// (zero: never stale) is not used: the gateway's counters stand in until
// a fresh one comes.
func (b *Backend) samplePrefix(now time.Time, staleAfter time.Duration) *PrefixCache {
	st := &b.prefix
	st.mu.Lock()
	defer st.mu.Unlock()
	s := prefixSample{at: now, q: math.NaN(), h: math.NaN(), p: b.promptTokens.Load(), c: b.cachedTokens.Load()}
	if l := b.serverLoad.Load(); l != nil && !math.IsNaN(l.PrefixQueries) && !math.IsNaN(l.PrefixHits) &&
		(staleAfter <= 0 || now.Sub(l.AsOf) <= staleAfter) {
		if !l.AsOf.Equal(st.readAt) { // a new reading: bridge it
			st.accQ += counterDelta(st.rawQ, l.PrefixQueries, st.seen)
			st.accH += counterDelta(st.rawH, l.PrefixHits, st.seen)
			st.rawQ, st.rawH, st.readAt, st.seen = l.PrefixQueries, l.PrefixHits, l.AsOf, true
		}
		s.q, s.h = st.accQ, st.accH
	}
	st.samples = append(st.samples, s)
	// Keep the samples within the window, and at most maxPrefixSamples.
	drop := 0
	for drop < len(st.samples)-1 && (now.Sub(st.samples[drop].at) > PrefixWindow || len(st.samples)-drop > maxPrefixSamples) {
		drop++
	}
	if drop > 0 {
		st.samples = append(st.samples[:0], st.samples[drop:]...)
	}

	pc := &PrefixCache{HitRate: math.NaN(), AsOf: now, ServerQueries: math.NaN(), ServerHits: math.NaN()}
	if st.seen {
		pc.ServerQueries, pc.ServerHits = st.accQ, st.accH
	}
	if !math.IsNaN(s.q) {
		pc.Source, pc.Queries, pc.Hits = PrefixSourceServer, s.q, s.h
		// The oldest sample in the window with a server reading.
		for _, o := range st.samples {
			if !math.IsNaN(o.q) {
				pc.WindowQueries, pc.WindowHits = s.q-o.q, s.h-o.h
				break
			}
		}
	} else {
		o := st.samples[0]
		pc.Source, pc.Queries, pc.Hits = PrefixSourceGateway, float64(s.p), float64(s.c)
		pc.WindowQueries, pc.WindowHits = float64(s.p-o.p), float64(s.c-o.c)
	}
	if pc.WindowQueries > 0 {
		pc.HitRate = min(max(pc.WindowHits/pc.WindowQueries, 0), 1)
	}
	b.prefixCache.Store(pc)
	return pc
}

// counterDelta is what a counter added between the readings prev and cur:
// a value below the previous one is a reset (the server restarted), after
// which the counter counted cur from zero. The first reading counts whole:
// the server's totals since its start.
func counterDelta(prev, cur float64, seen bool) float64 {
	switch {
	case !seen, cur < prev:
		return max(cur, 0)
	default:
		return cur - prev
	}
}

// FleetPrefixCache sums the backends' window and total figures (each from
// its own source): the fleet's hit rate is Σ hits / Σ queries over the
// window, NaN when no backend saw prompt tokens in it.
func (p *Pool) FleetPrefixCache() PrefixCache {
	f := PrefixCache{HitRate: math.NaN()}
	for _, b := range p.backends {
		pc := b.PrefixCache()
		if pc == nil {
			continue
		}
		f.WindowQueries += pc.WindowQueries
		f.WindowHits += pc.WindowHits
		f.Queries += pc.Queries
		f.Hits += pc.Hits
		if pc.AsOf.After(f.AsOf) {
			f.AsOf = pc.AsOf
		}
	}
	if f.WindowQueries > 0 {
		f.HitRate = min(max(f.WindowHits/f.WindowQueries, 0), 1)
	}
	return f
}
