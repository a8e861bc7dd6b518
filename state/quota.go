package state

import (
	"context"
	"math"
	"time"
)

// Quotas are a store's tenant limits: an admission reserves a request and
// its estimated tokens against every limit of its scopes in one atomic
// step, or none when any would be exceeded; a settlement later corrects
// the reservation to what the request used. Memory and Redis implement it
// with one algorithm, checked alike by the same tests.
//
// A per-minute limit is a sliding window of one-second counts: an
// admission sums the 61 seconds that overlap the last 60 s (the oldest
// in full), so that no 60-second span, wherever it starts, holds more
// than the limit; at worst a second's worth of capacity is left unused.
// A per-day limit counts the UTC calendar day. Concurrency is a set of
// reservations, each lapsing after Hold if never settled (its replica
// died), so a slot is not lost for good.
type Quotas interface {
	Admit(ctx context.Context, a Admission) (QuotaVerdict, error)
	Settle(ctx context.Context, s Settlement) error
	// Replicas records replica as live for ttl and returns how many are.
	Replicas(ctx context.Context, replica string, ttl time.Duration) (int, error)
}

var (
	_ Quotas = (*Memory)(nil)
	_ Quotas = (*Redis)(nil)
)

// QuotaScope is one set of limits and what it counts: a tenant's, or a
// tenant's use of one model. A zero limit is none.
type QuotaScope struct {
	Key                                                             string
	RequestsPerMinute, TokensPerMinute, TokensPerDay, MaxConcurrent int64
}

// Admission asks to admit one request of Tokens estimated tokens under
// every scope. ID names the reservation (unique); Tenant groups the
// scopes' keys (in Redis, one hash slot).
type Admission struct {
	ID, Tenant string
	Scopes     []QuotaScope
	Tokens     int64
	Hold       time.Duration
	// Peek asks only: the verdict and use as if admitting, nothing
	// charged.
	Peek bool
}

// Refusal reasons.
const (
	QuotaRequests    = "requests"
	QuotaTokens      = "tokens"
	QuotaConcurrency = "concurrency"
)

// QuotaVerdict is an admission's answer.
type QuotaVerdict struct {
	Admitted bool
	// Reason is why not: QuotaRequests, QuotaTokens or QuotaConcurrency.
	Reason string
	// TooLarge: the request alone exceeds a limit, and waiting admits it
	// never.
	TooLarge bool
	// RetryAfter is when the refused request would fit, as far as the
	// counts so far tell.
	RetryAfter time.Duration
	// Second and Day are where the reservation counts (for Settle).
	Second, Day int64
	// Use is each scope's, after this admission when admitted.
	Use []QuotaUse
}

// QuotaUse is one scope's use in the window that ends now: requests and
// tokens in the last 60 s and tokens in the UTC day, and when the oldest
// of the window's requests and tokens leave it.
type QuotaUse struct {
	Requests, Tokens, TokensDay int64
	// InFlight counts the scope's concurrency slots held (those of
	// requests not yet settled), before this admission.
	InFlight                   int64
	ResetRequests, ResetTokens time.Duration
	// DayReset is the time to the next UTC midnight.
	DayReset time.Duration
}

// Settlement corrects a reservation: Tokens and Requests are added (a
// negative value returns them) at the reservation's second and day, and
// its concurrency slot is freed.
type Settlement struct {
	ID, Tenant       string
	Keys             []string // the admission's scope keys
	Second, Day      int64
	Tokens, Requests int64
}

// quotaSpan is how many one-second counts a per-minute window sums.
const quotaSpan = 61

// memScope is one scope's counts in Memory.
type memScope struct {
	requests, tokens map[int64]int64 // by second
	day              map[int64]int64 // by UTC day
	slots            map[string]time.Time
}

// windowOf sums counts over the 61 seconds up to sec and returns the sum
// and the counts, oldest first.
func windowOf(counts map[int64]int64, sec int64) (int64, [quotaSpan]int64) {
	var vals [quotaSpan]int64
	var sum int64
	for i := range quotaSpan {
		v := counts[sec-quotaSpan+1+int64(i)]
		vals[i] = v
		sum += v
	}
	return sum, vals
}

// freedAt returns how long from now (ms) until used less what leaves the
// window, plus need, is within limit: field i leaves at the start of
// second sec+i+1.
func freedAt(vals [quotaSpan]int64, used, need, limit, sec, nowMs int64) int64 {
	var freed int64
	for i, v := range vals {
		freed += v
		if used-freed+need <= limit {
			return (sec+int64(i)+1)*1000 - nowMs
		}
	}
	return 60_000
}

// resetOf is how long from now (ms) until the window's oldest count
// leaves it; 0 when it is empty.
func resetOf(vals [quotaSpan]int64, sec, nowMs int64) int64 {
	for i, v := range vals {
		if v != 0 {
			return (sec+int64(i)+1)*1000 - nowMs
		}
	}
	return 0
}

// Admit implements Quotas.
func (m *Memory) Admit(_ context.Context, a Admission) (QuotaVerdict, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	nowMs := now.UnixMilli()
	sec := nowMs / 1000
	day := sec / 86400
	dayReset := time.Duration((day+1)*86400*1000-nowMs) * time.Millisecond
	v := QuotaVerdict{Admitted: true, Second: sec, Day: day, Use: make([]QuotaUse, len(a.Scopes))}
	scopes := make([]*memScope, len(a.Scopes))
	refuse := func(reason string, retry int64, tooLarge bool) {
		// A request larger than a limit is refused for that limit,
		// whatever else it waits on: no wait admits it.
		if !v.TooLarge && (v.Admitted || retry > v.RetryAfter.Milliseconds() || tooLarge) {
			v.Reason, v.RetryAfter = reason, time.Duration(retry)*time.Millisecond
		}
		v.Admitted = false
		v.TooLarge = v.TooLarge || tooLarge
	}
	for i, sc := range a.Scopes {
		s := m.quotas[a.Tenant+"\x00"+sc.Key]
		if s == nil {
			s = &memScope{requests: map[int64]int64{}, tokens: map[int64]int64{}, day: map[int64]int64{}, slots: map[string]time.Time{}}
			m.quotas[a.Tenant+"\x00"+sc.Key] = s
		}
		scopes[i] = s
		// Forget what left the windows: memory stays bounded.
		for k := range s.requests {
			if k <= sec-quotaSpan {
				delete(s.requests, k)
			}
		}
		for k := range s.tokens {
			if k <= sec-quotaSpan {
				delete(s.tokens, k)
			}
		}
		for k := range s.day {
			if k < day {
				delete(s.day, k)
			}
		}
		for id, exp := range s.slots {
			if !now.Before(exp) {
				delete(s.slots, id)
			}
		}
		rUsed, rVals := windowOf(s.requests, sec)
		tUsed, tVals := windowOf(s.tokens, sec)
		u := &v.Use[i]
		u.Requests, u.Tokens, u.TokensDay = rUsed, tUsed, s.day[day]
		u.ResetRequests = time.Duration(resetOf(rVals, sec, nowMs)) * time.Millisecond
		u.ResetTokens = time.Duration(resetOf(tVals, sec, nowMs)) * time.Millisecond
		u.DayReset = dayReset
		u.InFlight = int64(len(s.slots))
		if l := sc.RequestsPerMinute; l > 0 && rUsed+1 > l {
			refuse(QuotaRequests, freedAt(rVals, rUsed, 1, l, sec, nowMs), false)
		}
		if l := sc.TokensPerMinute; l > 0 && tUsed+a.Tokens > l {
			refuse(QuotaTokens, freedAt(tVals, tUsed, a.Tokens, l, sec, nowMs), a.Tokens > l)
		}
		if l := sc.TokensPerDay; l > 0 && s.day[day]+a.Tokens > l {
			refuse(QuotaTokens, dayReset.Milliseconds(), a.Tokens > l)
		}
		if l := sc.MaxConcurrent; l > 0 && int64(len(s.slots))+1 > l {
			next := int64(math.MaxInt64)
			for _, exp := range s.slots {
				next = min(next, exp.Sub(now).Milliseconds())
			}
			// A slot frees when a request ends, which no count foretells:
			// a second, unless one lapses sooner.
			refuse(QuotaConcurrency, min(next, 1000), false)
		}
	}
	if !v.Admitted || a.Peek {
		return v, nil
	}
	for i, s := range scopes {
		s.requests[sec]++
		s.tokens[sec] += a.Tokens
		s.day[day] += a.Tokens
		if a.Scopes[i].MaxConcurrent > 0 {
			s.slots[a.ID] = now.Add(a.Hold)
		}
		u := &v.Use[i]
		u.Requests++
		u.Tokens += a.Tokens
		u.TokensDay += a.Tokens
		if u.ResetRequests == 0 {
			u.ResetRequests = time.Duration((sec+quotaSpan)*1000-nowMs) * time.Millisecond
		}
		if u.ResetTokens == 0 && a.Tokens > 0 {
			u.ResetTokens = u.ResetRequests
		}
	}
	return v, nil
}

// Settle implements Quotas.
func (m *Memory) Settle(_ context.Context, st Settlement) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range st.Keys {
		s := m.quotas[st.Tenant+"\x00"+k]
		if s == nil {
			continue
		}
		if _, ok := s.requests[st.Second]; ok {
			s.requests[st.Second] += st.Requests
			s.tokens[st.Second] += st.Tokens
		}
		if _, ok := s.day[st.Day]; ok {
			s.day[st.Day] += st.Tokens
		}
		delete(s.slots, st.ID)
	}
	return nil
}

// Replicas implements Quotas.
func (m *Memory) Replicas(_ context.Context, replica string, ttl time.Duration) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.live == nil {
		m.live = map[string]time.Time{}
	}
	m.live[replica] = now.Add(ttl)
	for r, exp := range m.live {
		if !now.Before(exp) {
			delete(m.live, r)
		}
	}
	return len(m.live), nil
}
