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
	if len(bs) == 0 {
		return nil
	}
	pipe := r.c.Pipeline()
	for _, b := range bs {
		v := make([]byte, 8+len(b.Payload))
		binary.BigEndian.PutUint64(v, seq) // big-endian: byte order is numeric order
		copy(v[8:], b.Payload)
		// Eval, not EvalSha: a pipeline cannot fall back on NOSCRIPT.
		putBucket.Eval(ctx, pipe, []string{r.bucketKey(signal, b.Start)}, replica, v, ttl.Milliseconds())
	}
	_, err := pipe.Exec(ctx)
	if err != nil && errors.Is(err, redis.Nil) {
		err = nil
	}
	return err
}

// Buckets implements Store, in one pipeline of HGETALLs.
func (r *Redis) Buckets(ctx context.Context, signal string, from, to int64) ([]ReplicaBucket, error) {
	if to < from {
		return nil, nil
	}
	pipe := r.c.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 0, to-from+1)
	for s := from; s <= to; s++ {
		cmds = append(cmds, pipe.HGetAll(ctx, r.bucketKey(signal, s)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []ReplicaBucket
	for i, c := range cmds {
		for rep, v := range c.Val() {
			if len(v) < 8 {
				continue
			}
			out = append(out, ReplicaBucket{Replica: rep, Bucket: Bucket{Start: from + int64(i), Payload: []byte(v[8:])}})
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
