package sim

import (
	"container/list"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// prefixCache is the simulated automatic prefix cache of one Server: the
// hashes of full blocks of BlockSize prompt tokens, least recently used
// first out. A block's hash covers its tokens and, through its parent's
// hash, every token before it, so a lookup walks the prompt's blocks from
// the first and stops at the first miss, as vLLM v1's KVCacheManager does.
//
// Capacity and block size follow the knobs: sync applies the Server's
// current knobs, under the mutex, so that concurrent knob updates leave
// the cache as the last one says.
type prefixCache struct {
	mu        sync.Mutex
	capacity  int // blocks; 0 means off
	blockSize int
	// blocks maps a block hash to its element in lru, whose Value is the
	// hash; the front is the most recently used.
	blocks map[uint64]*list.Element
	lru    list.List

	// queries and hits count prompt tokens looked up and found, as vLLM
	// v1's prefix_cache_queries and prefix_cache_hits.
	queries, hits atomic.Int64
	// held mirrors len(blocks) for /metrics, read without the mutex.
	held atomic.Int64
}

func newPrefixCache() *prefixCache {
	return &prefixCache{blocks: map[uint64]*list.Element{}}
}

// sync applies capacity and block size from k: a smaller capacity evicts
// the least recently used blocks down to it, another block size empties
// the cache (its hashes cover other spans of tokens).
func (c *prefixCache) sync(k *Knobs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncLocked(k.PrefixCacheBlocks, k.BlockSize)
}

func (c *prefixCache) syncLocked(capacity, blockSize int) {
	if blockSize != c.blockSize {
		c.blockSize = blockSize
		c.clearLocked()
	}
	c.capacity = capacity
	c.evictLocked()
}

// reset empties the cache; counters keep counting, as vLLM's do across
// its /reset_prefix_cache.
func (c *prefixCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLocked()
}

func (c *prefixCache) clearLocked() {
	clear(c.blocks)
	c.lru.Init()
	c.held.Store(0)
}

func (c *prefixCache) evictLocked() {
	for len(c.blocks) > c.capacity {
		e := c.lru.Back()
		delete(c.blocks, e.Value.(uint64))
		c.lru.Remove(e)
	}
	c.held.Store(int64(len(c.blocks)))
}

// usage is the share of the capacity the cached blocks fill, 0 when off.
func (c *prefixCache) usage() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.capacity == 0 {
		return 0
	}
	return float64(len(c.blocks)) / float64(c.capacity)
}

// lookup returns how many leading tokens of prompt p, of n tokens, the
// cache holds, and then records p's full blocks as most recently used.
// root keys the chain (the model or LoRA adapter: vLLM hashes the adapter
// into every block, so adapters share no blocks). read false records
// without reading or counting, as vLLM does for a request that asks for
// prompt_logprobs, which it must compute whole.
//
// vLLM recomputes at least the prompt's last token, to have logits to
// sample from: a hit covers at most (n-1)/BlockSize blocks, so a prompt of
// exactly k full blocks, all cached, reuses k-1 of them.
//
// The work is O(n) to hash and O(blocks) under the mutex; only the first
// capacity blocks are hashed, as no more can be cached at once.
func (c *prefixCache) lookup(root uint64, p promptText, n int, read bool) int {
	c.mu.Lock()
	capacity, bs := c.capacity, c.blockSize
	c.mu.Unlock()
	if capacity == 0 || n <= 0 {
		return 0
	}
	hashes := blockHashes(root, p, bs, min(n/bs, capacity))

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.blockSize != bs || c.capacity == 0 {
		// The knobs changed while hashing: these hashes cover spans of
		// another size, or caching went off.
		return 0
	}
	cached := 0
	if read {
		limit := min((n-1)/bs, len(hashes))
		for cached < limit {
			if _, ok := c.blocks[hashes[cached]]; !ok {
				break
			}
			cached++
		}
		cached *= bs
		c.queries.Add(int64(n))
		c.hits.Add(int64(cached))
	}
	// Most recent last: the first block is touched last, so that a
	// prompt's early blocks, which every longer prompt sharing them needs,
	// outlive its late ones, as vLLM frees a request's blocks tail first.
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		if e, ok := c.blocks[h]; ok {
			c.lru.MoveToFront(e)
			continue
		}
		c.blocks[h] = c.lru.PushFront(h)
	}
	c.evictLocked()
	return cached
}

// blockHashes returns the chained hashes of the first count full blocks of
// bs tokens of p. A prompt given as token ids hashes the ids; a text prompt
// hashes its text, bs 4-character tokens (see promptText.tokens) a block,
// which is the same as hashing the tokens themselves and needs no
// allocation per token.
func blockHashes(root uint64, p promptText, bs, count int) []uint64 {
	out := make([]uint64, 0, count)
	parent := root
	if p.ids != nil {
		for i := range count {
			h := fnvOffset64
			h.writeUint64(parent)
			for _, id := range p.ids[i*bs : (i+1)*bs] {
				h.writeUint64(uint64(id))
			}
			parent = mix(uint64(h))
			out = append(out, parent)
		}
		return out
	}
	s := p.text
	runes := 4 * bs
	for range count {
		end := 0
		for r := 0; r < runes && end < len(s); r++ {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
		}
		h := fnvOffset64
		h.writeUint64(parent)
		h.write(s[:end])
		parent = mix(uint64(h))
		out = append(out, parent)
		s = s[end:]
	}
	return out
}

// writeUint64 adds v's eight bytes to the hash.
func (h *fnv64a) writeUint64(v uint64) {
	x := *h
	for range 8 {
		x ^= fnv64a(v & 0xff)
		x *= fnvPrime64
		v >>= 8
	}
	*h = x
}

// modelRoot is the root of a model's block hash chains: the hash of its
// name, "" for the base model.
func modelRoot(adapter string) uint64 {
	if adapter == "" {
		return 0
	}
	return mix(uint64(newContext(adapter)))
}
