package state

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// quotaKeys returns the four keys of each scope of tenant: request and
// token counts by second, token counts by day (hashes) and the
// concurrency slots (a sorted set by lapse time), all in the tenant's
// hash tag, so that one script reaches every one in a Cluster.
func (r *Redis) quotaKeys(tenant string, scopes []string) []string {
	keys := make([]string, 0, 4*len(scopes))
	for _, s := range scopes {
		base := r.prefix + ":q:{" + tenant + "}:" + s
		keys = append(keys, base+":rq", base+":tk", base+":dy", base+":cc")
	}
	return keys
}

// admitQuota is Memory.Admit in one script, on the server's clock (TIME),
// so that replicas with skewed clocks count in the same seconds.
// ARGV: id, tokens, hold ms, peek (1: charge nothing), then per scope its
// four limits.
var admitQuota = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sec = math.floor(now / 1000)
local day = math.floor(sec / 86400)
local id, tokens, hold, peek = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4] == '1'
local n = #KEYS / 4
local fields = {}
for i = 1, 61 do fields[i] = tostring(sec - 61 + i) end

-- forget what left the windows: seconds from the hash's mark up to sec-61
local function trim(key)
  if redis.call('EXISTS', key) == 0 then return end
  local lo = tonumber(redis.call('HGET', key, 'lo') or (sec - 61))
  for s = math.max(lo, sec - 180), sec - 61 do redis.call('HDEL', key, tostring(s)) end
  redis.call('HSET', key, 'lo', sec - 60)
end
local function window(key)
  local vals = redis.call('HMGET', key, unpack(fields))
  local used = 0
  for i = 1, 61 do
    local v = tonumber(vals[i]) or 0
    vals[i] = v
    used = used + v
  end
  return used, vals
end
local function freed(vals, used, need, limit)
  local f = 0
  for i = 1, 61 do
    f = f + vals[i]
    if used - f + need <= limit then return (sec + i) * 1000 - now end
  end
  return 60000
end
local function reset(vals)
  for i = 1, 61 do
    if vals[i] ~= 0 then return (sec + i) * 1000 - now end
  end
  return 0
end

local admitted, reason, large, retry = 1, 0, 0, 0
local function refuse(r, ms, tooLarge)
  -- A request larger than a limit is refused for that limit, whatever
  -- else it waits on: no wait admits it.
  if large == 0 and (admitted == 1 or ms > retry or tooLarge) then reason, retry = r, ms end
  admitted = 0
  if tooLarge then large = 1 end
end
local out = {}
for s = 0, n - 1 do
  local rq, tk, dy, cc = KEYS[4*s+1], KEYS[4*s+2], KEYS[4*s+3], KEYS[4*s+4]
  local lr, lt, ld, lc = tonumber(ARGV[5+4*s]), tonumber(ARGV[6+4*s]), tonumber(ARGV[7+4*s]), tonumber(ARGV[8+4*s])
  trim(rq)
  trim(tk)
  redis.call('HDEL', dy, tostring(day - 1), tostring(day - 2))
  redis.call('ZREMRANGEBYSCORE', cc, '-inf', now)
  local ru, rv = window(rq)
  local tu, tv = window(tk)
  local du = tonumber(redis.call('HGET', dy, tostring(day)) or 0)
  if lr > 0 and ru + 1 > lr then refuse(1, freed(rv, ru, 1, lr), false) end
  if lt > 0 and tu + tokens > lt then refuse(2, freed(tv, tu, tokens, lt), tokens > lt) end
  if ld > 0 and du + tokens > ld then refuse(2, (day + 1) * 86400000 - now, tokens > ld) end
  local inflight = redis.call('ZCARD', cc)
  if lc > 0 and inflight + 1 > lc then
    local first = redis.call('ZRANGE', cc, 0, 0, 'WITHSCORES')
    refuse(3, math.min(tonumber(first[2]) - now, 1000), false)
  end
  out[#out + 1] = {ru, tu, du, reset(rv), reset(tv), inflight}
end
local res = {admitted, reason, large, retry, sec, day, now}
for s = 0, n - 1 do
  local u = out[s + 1]
  if admitted == 1 and not peek then
    local rq, tk, dy, cc = KEYS[4*s+1], KEYS[4*s+2], KEYS[4*s+3], KEYS[4*s+4]
    redis.call('HINCRBY', rq, tostring(sec), 1)
    redis.call('HINCRBY', tk, tostring(sec), tokens)
    redis.call('HINCRBY', dy, tostring(day), tokens)
    redis.call('PEXPIRE', rq, 62000)
    redis.call('PEXPIRE', tk, 62000)
    redis.call('PEXPIRE', dy, 2 * 86400000)
    if tonumber(ARGV[8+4*s]) > 0 then
      redis.call('ZADD', cc, now + hold, id)
      redis.call('PEXPIRE', cc, hold + 1000)
    end
    u[1], u[2], u[3] = u[1] + 1, u[2] + tokens, u[3] + tokens
    if u[4] == 0 then u[4] = (sec + 61) * 1000 - now end
    if u[5] == 0 and tokens > 0 then u[5] = u[4] end
  end
  for k = 1, 6 do res[#res + 1] = u[k] end
end
return res
`)

// settleQuota adds ARGV tokens and requests at the reservation's second
// and day where those counts still live, and frees its slot.
// ARGV: id, second, day, tokens, requests.
var settleQuota = redis.NewScript(`
for s = 0, #KEYS / 4 - 1 do
  local rq, tk, dy, cc = KEYS[4*s+1], KEYS[4*s+2], KEYS[4*s+3], KEYS[4*s+4]
  if redis.call('HEXISTS', rq, ARGV[2]) == 1 then
    redis.call('HINCRBY', rq, ARGV[2], ARGV[5])
    redis.call('HINCRBY', tk, ARGV[2], ARGV[4])
  end
  if redis.call('HEXISTS', dy, ARGV[3]) == 1 then
    redis.call('HINCRBY', dy, ARGV[3], ARGV[4])
  end
  redis.call('ZREM', cc, ARGV[1])
end
return 1
`)

// Admit implements Quotas.
func (r *Redis) Admit(ctx context.Context, a Admission) (QuotaVerdict, error) {
	names := make([]string, len(a.Scopes))
	peek := 0
	if a.Peek {
		peek = 1
	}
	args := []any{a.ID, a.Tokens, a.Hold.Milliseconds(), peek}
	for i, s := range a.Scopes {
		names[i] = s.Key
		args = append(args, s.RequestsPerMinute, s.TokensPerMinute, s.TokensPerDay, s.MaxConcurrent)
	}
	vals, err := admitQuota.Run(ctx, r.c, r.quotaKeys(a.Tenant, names), args...).Int64Slice()
	if err != nil {
		return QuotaVerdict{}, err
	}
	if len(vals) != 7+6*len(a.Scopes) {
		return QuotaVerdict{}, fmt.Errorf("quota admission: %d values for %d scopes", len(vals), len(a.Scopes))
	}
	ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
	v := QuotaVerdict{Admitted: vals[0] == 1, TooLarge: vals[2] == 1, RetryAfter: ms(vals[3]), Second: vals[4], Day: vals[5],
		Reason: [...]string{"", QuotaRequests, QuotaTokens, QuotaConcurrency}[min(max(vals[1], 0), 3)]}
	dayReset := ms((vals[5]+1)*86_400_000 - vals[6])
	for i := range a.Scopes {
		u := vals[7+6*i:]
		v.Use = append(v.Use, QuotaUse{Requests: u[0], Tokens: u[1], TokensDay: u[2],
			ResetRequests: ms(u[3]), ResetTokens: ms(u[4]), DayReset: dayReset, InFlight: u[5]})
	}
	return v, nil
}

// Settle implements Quotas.
func (r *Redis) Settle(ctx context.Context, s Settlement) error {
	return settleQuota.Run(ctx, r.c, r.quotaKeys(s.Tenant, s.Keys), s.ID, s.Second, s.Day, s.Tokens, s.Requests).Err()
}

// liveReplicas keeps the replicas in a sorted set by lapse time.
var liveReplicas = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])
`)

// Replicas implements Quotas.
func (r *Redis) Replicas(ctx context.Context, replica string, ttl time.Duration) (int, error) {
	return liveReplicas.Run(ctx, r.c, []string{r.prefix + ":q:replicas"}, replica, ttl.Milliseconds()).Int()
}
