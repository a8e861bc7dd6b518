package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store shared by replicas. Keys start with the prefix and
// put the signal in a hash tag, {signal}, so that one signal's buckets live
// in one Cluster slot and are read in one round trip.
type Redis struct {
	c      redis.UniversalClient
	prefix string
}

var _ Store = (*Redis)(nil)

// NewRedis returns a store over c with keys under prefix.
func NewRedis(c redis.UniversalClient, prefix string) *Redis {
	return &Redis{c: c, prefix: prefix}
}

// OpenRedis makes a client from a URL, with short timeouts: callers run
// off the request path, but a hung Redis must still not hold them long.
//
//	redis://host:6379/0                               one server (rediss:// for TLS, unix:///path)
//	redis://host1:7000?addr=host2:7001&addr=host3:7002 Redis Cluster (any seed nodes)
//	redis://sentinel:26379/0?master_name=mymaster      Sentinel (addr= for more sentinels)
func OpenRedis(rawURL string) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	const timeout = time.Second
	switch q := u.Query(); {
	case q.Has("master_name"):
		opt, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis sentinel url: %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = timeout, timeout, timeout, 0
		return redis.NewFailoverClient(opt), nil
	case q.Has("addr"):
		opt, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redis cluster url: %w", err)
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = timeout, timeout, timeout, 0
		return redis.NewClusterClient(opt), nil
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = timeout, timeout, timeout
	opt.MaxRetries = 0    // the callers retry on their own schedule
	opt.DialerRetries = 1 // and a refused dial should fail at once
	return redis.NewClient(opt), nil
}

func (r *Redis) bucketKey(signal string, start int64) string {
	return r.prefix + ":{" + signal + "}:b:" + strconv.FormatInt(start, 10)
}

// putBucket stores field=replica → seq(8 bytes big-endian) ++ payload in
// the bucket's hash unless the stored sequence is >= seq, and refreshes the
// hash's expiry.
var putBucket = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and string.len(cur) >= 8 and string.sub(cur, 1, 8) >= string.sub(ARGV[2], 1, 8) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// PutBuckets implements Store, in one pipeline.
func (r *Redis) PutBuckets(ctx context.Context, signal, replica string, seq uint64, bs []Bucket, ttl time.Duration) error {
	_, err := r.Exchange(ctx, replica, seq, []SeriesBuckets{{Signal: signal, Buckets: bs, TTL: ttl}}, nil)
	return err
}

// Buckets implements Store, in one pipeline of HGETALLs.
func (r *Redis) Buckets(ctx context.Context, signal string, from, to int64) ([]ReplicaBucket, error) {
	out, err := r.Exchange(ctx, "", 0, nil, []SeriesSpan{{Signal: signal, From: from, To: to}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// Exchange implements Store, in one pipeline: a script call per bucket
// written, then an HGETALL per bucket read. In Redis Cluster go-redis
// sends each node its part of the pipeline.
func (r *Redis) Exchange(ctx context.Context, replica string, seq uint64, puts []SeriesBuckets, reads []SeriesSpan) ([][]ReplicaBucket, error) {
	pipe := r.c.Pipeline()
	n := 0
	for _, p := range puts {
		for _, b := range p.Buckets {
			v := make([]byte, 8+len(b.Payload))
			binary.BigEndian.PutUint64(v, seq) // big-endian: byte order is numeric order
			copy(v[8:], b.Payload)
			// Eval, not EvalSha: a pipeline cannot fall back on NOSCRIPT.
			putBucket.Eval(ctx, pipe, []string{r.bucketKey(p.Signal, b.Start)}, replica, v, p.TTL.Milliseconds())
			n++
		}
	}
	cmds := make([][]*redis.MapStringStringCmd, len(reads))
	for i, rd := range reads {
		for s := rd.From; s <= rd.To; s++ {
			cmds[i] = append(cmds[i], pipe.HGetAll(ctx, r.bucketKey(rd.Signal, s)))
			n++
		}
	}
	out := make([][]ReplicaBucket, len(reads))
	if n == 0 {
		return out, nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, rd := range reads {
		for j, c := range cmds[i] {
			for rep, v := range c.Val() {
				if len(v) < 8 {
					continue
				}
				out[i] = append(out[i], ReplicaBucket{Replica: rep, Bucket: Bucket{Start: rd.From + int64(j), Payload: []byte(v[8:])}})
			}
		}
	}
	return out, nil
}

func (r *Redis) docKey(key string) string { return r.prefix + ":doc:" + key }

// Get implements Store.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	v, err := r.c.Get(ctx, r.docKey(key)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	return v, err
}

// Set implements Store.
func (r *Redis) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	return r.c.Set(ctx, r.docKey(key), value, ttl).Err()
}

// SetMany implements Store, in one pipeline.
func (r *Redis) SetMany(ctx context.Context, docs map[string][]byte, ttl time.Duration) error {
	if len(docs) == 0 {
		return nil
	}
	pipe := r.c.Pipeline()
	for k, v := range docs {
		pipe.Set(ctx, r.docKey(k), v, ttl)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Claim implements Store in one pipeline: SET NX GET, which returns the
// document already there (Redis 7.0 and later), and PEXPIRE, which keeps
// the key for ttl whoever holds it.
func (r *Redis) Claim(ctx context.Context, docs map[string][]byte, ttl time.Duration) (map[string][]byte, error) {
	if len(docs) == 0 {
		return map[string][]byte{}, nil
	}
	pipe := r.c.Pipeline()
	cmds := make(map[string]*redis.StatusCmd, len(docs))
	for k, v := range docs {
		key := r.docKey(k)
		cmds[k] = pipe.SetArgs(ctx, key, v, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
		pipe.PExpire(ctx, key, ttl)
	}
	// Exec reports the first command's error, redis.Nil for a key that
	// was free: each command is read on its own below.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make(map[string][]byte, len(docs))
	for k, c := range cmds {
		switch v, err := c.Result(); {
		case errors.Is(err, redis.Nil):
			out[k] = docs[k]
		case err != nil:
			return nil, err
		default:
			out[k] = []byte(v)
		}
	}
	return out, nil
}

// acquire takes the lease if it is free or already owner's (renewal).
var acquire = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if (not cur) or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`)

// Acquire implements Store: SET NX PX, renewed by the owner.
func (r *Redis) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	n, err := acquire.Run(ctx, r.c, []string{r.prefix + ":lease:" + key}, owner, ttl.Milliseconds()).Int()
	return n == 1, err
}
