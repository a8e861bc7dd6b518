// Package affinity gives the prefix-aware balancer what it needs to send a
// request where its prompt's prefix already is: a canonical rendering of
// the request's leading content, cut into blocks and hashed as a chain
// (Key), a bounded index of which backends recently served which blocks
// (Index), and rendezvous hashing for the first placement of a prefix no
// backend holds yet (Score).
//
// Model servers such as vLLM keep the KV cache of the prompts they have
// computed, block by block, and reuse it for a later prompt that starts
// with the same tokens: the time to the first token of a request whose
// long system prompt is cached is a fraction of a cold one's. The gateway
// does not tokenize; it hashes the request's text in blocks of
// block_chars bytes, each block's hash chained to the previous one's
// (h[i] = H(h[i-1], block i)), so that a block hash stands for the whole
// prefix up to the end of that block, as the servers' own block hashes do.
// Two requests share the leading blocks that their renderings share,
// whatever they differ in later.
//
// The package is pure: no HTTP, no gateway types. Everything in it is
// deterministic across processes, so that gateway replicas that share no
// state hash, place and learn alike.
package affinity

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// Hash functions, as config names them (balancer.prefix.hash).
const (
	HashXXH = "xxhash"
	HashFNV = "fnv"
)

// MaxBlocks is the most blocks a Key holds: balancer.prefix.max_chars /
// block_chars may not exceed it (config validates it), so that a Key is a
// fixed array, computed without allocating, and a huge prompt costs
// bounded time.
const MaxBlocks = 256

// Options configure a Hasher.
type Options struct {
	// BlockChars is the size of a block in bytes of the rendering, > 0
	// (balancer.prefix.block_chars).
	BlockChars int
	// MaxChars bounds the bytes of the rendering that are hashed; at most
	// MaxBlocks blocks (balancer.prefix.max_chars).
	MaxChars int
	// Hash is HashXXH or HashFNV (balancer.prefix.hash); every replica
	// must use the same.
	Hash string
}

// A Hasher computes Keys. It is immutable and safe for concurrent use.
type Hasher struct {
	block, max int
	fnv        bool
}

// NewHasher returns a Hasher, or an error naming the option that is out of
// range.
func NewHasher(o Options) (*Hasher, error) {
	h := &Hasher{block: o.BlockChars, max: o.MaxChars}
	switch o.Hash {
	case HashXXH:
	case HashFNV:
		h.fnv = true
	default:
		return nil, fmt.Errorf("hash: unknown hash %q (want %s or %s)", o.Hash, HashXXH, HashFNV)
	}
	if o.BlockChars <= 0 {
		return nil, fmt.Errorf("block_chars: must be > 0, got %d", o.BlockChars)
	}
	if o.MaxChars < o.BlockChars || o.MaxChars/o.BlockChars > MaxBlocks {
		return nil, fmt.Errorf("max_chars: must be between block_chars (%d) and %d × block_chars, got %d", o.BlockChars, MaxBlocks, o.MaxChars)
	}
	return h, nil
}

// BlockChars returns the block size in bytes.
func (h *Hasher) BlockChars() int { return h.block }

// A Key is what the balancer knows of one request's prompt. The zero Key
// has no blocks. A Key is used by one goroutine; it is large (MaxBlocks
// hashes) and meant to live on the caller's stack, not in a per-request
// allocation.
type Key struct {
	// Blocks holds the chained hashes of the rendering's full blocks; the
	// first N are valid (Chain).
	Blocks [MaxBlocks]uint64
	// N is the number of full blocks hashed.
	N int
	// Chars is the number of bytes rendered (at most max_chars: the
	// rendering stops there).
	Chars int
	// Anchor identifies the request's stable leading segment (system
	// prompt and tools, or the explicit affinity key), for the first
	// placement of a prefix (Score).
	Anchor uint64
	// Affinity reports that Anchor is the hash of an explicit affinity
	// key (prompt_cache_key or the session header), which also seeds the
	// chain.
	Affinity bool
}

// Chain returns the block hashes.
func (k *Key) Chain() []uint64 { return k.Blocks[:k.N] }

// Hash returns the hash of b with the Hasher's function: the hash of an
// affinity key, and of a backend's name for Score.
func (h *Hasher) Hash(b []byte) uint64 {
	if h.fnv {
		return fnvAdd(fnvOffset, b)
	}
	return xxhash.Sum64(b)
}

// HashString is Hash of a string, without converting it.
func (h *Hasher) HashString(s string) uint64 {
	if h.fnv {
		return fnvAddString(fnvOffset, s)
	}
	return xxhash.Sum64String(s)
}

// FNV-1a, 64 bits, written here rather than taken from hash/fnv: its New64a
// returns an interface, which would cost an allocation per request.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvAdd(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvAddString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvAdd64(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

// digest is a running hash of either function, seeded.
type digest struct {
	x   xxhash.Digest
	f   uint64
	fnv bool
}

func (d *digest) reset(seed uint64) {
	if d.fnv {
		d.f = fnvAdd64(fnvOffset, seed)
		return
	}
	d.x.ResetWithSeed(seed)
}

func (d *digest) write(b []byte) {
	if d.fnv {
		d.f = fnvAdd(d.f, b)
		return
	}
	_, _ = d.x.Write(b)
}

func (d *digest) sum() uint64 {
	if d.fnv {
		return d.f
	}
	return d.x.Sum64()
}

// Score is the rendezvous (highest random weight) score of a backend for
// an anchor: every replica that ranks the same backends by it for the same
// anchor picks the same one, with no state shared, and when a backend
// leaves only the anchors it held move. name is the hash of the backend's
// name (Hasher.HashString), weight its configured weight (> 0): a backend
// of twice the weight wins twice as many anchors (weighted rendezvous,
// score = −weight / ln u for u uniform in (0, 1) drawn from the pair's
// hash). The arithmetic is IEEE double's; replicas built for different
// architectures (one fusing multiply-adds in math.Log, one not) could
// disagree only between two scores equal to the last bit.
func Score(anchor, name uint64, weight float64) float64 {
	u := (float64(mix(anchor^mix(name))>>11) + 0.5) / (1 << 53)
	return -weight / math.Log(u)
}

// mix is a 64-bit finalizer (splitmix64's): anchor and name hashes are
// already uniform, but their XOR for nearby inputs must not be correlated
// across backends.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// bucket maps a hash onto [0, n) without a division (Lemire's multiply and
// shift), for an n that need not be a power of two.
func bucket(h uint64, n int) int {
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
}
