package state_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/state"
	"github.com/vigil-gw/vigil/state/redistest"
)

// TestQuotas: each limit admits up to its value and refuses beyond, with
// the reason and a wait; a refusal charges no scope; a settlement returns
// what a request did not use and frees its slot; a request larger than a
// limit is told it never fits. The same in memory, on a Redis server and
// on a Redis Cluster.
func TestQuotas(t *testing.T) {
	stores(t, func(t *testing.T, st state.Store) {
		q := st.(state.Quotas)
		ctx := t.Context()
		n := 0
		admit := func(tenant string, tokens int64, scopes ...state.QuotaScope) state.QuotaVerdict {
			t.Helper()
			n++
			v, err := q.Admit(ctx, state.Admission{ID: fmt.Sprint("r", n), Tenant: tenant, Scopes: scopes, Tokens: tokens, Hold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		settle := func(tenant, id string, v state.QuotaVerdict, tokens, requests int64, keys ...string) {
			t.Helper()
			if err := q.Settle(ctx, state.Settlement{ID: id, Tenant: tenant, Keys: keys, Second: v.Second, Day: v.Day, Tokens: tokens, Requests: requests}); err != nil {
				t.Fatal(err)
			}
		}

		// Requests: 3 a minute.
		rpm := state.QuotaScope{Key: "t", RequestsPerMinute: 3}
		var last state.QuotaVerdict
		for i := range 3 {
			if last = admit("a", 10, rpm); !last.Admitted || last.Use[0].Requests != int64(i+1) {
				t.Fatalf("request %d: %+v", i, last)
			}
		}
		v := admit("a", 10, rpm)
		if v.Admitted || v.Reason != state.QuotaRequests || v.TooLarge || v.RetryAfter <= 0 || v.RetryAfter > 61*time.Second {
			t.Fatalf("4th request: %+v, want refused for requests within 61 s", v)
		}
		// One returned (the backend failed it): one more fits.
		settle("a", fmt.Sprint("r", n-1), last, -10, -1, "t")
		if v := admit("a", 10, rpm); !v.Admitted {
			t.Fatalf("after a refund: %+v", v)
		}

		// Tokens: 1,000 a minute; a model scope of 500 on top.
		tpm := state.QuotaScope{Key: "t", TokensPerMinute: 1000}
		model := state.QuotaScope{Key: "t|m", TokensPerMinute: 500}
		if v := admit("b", 400, tpm, model); !v.Admitted {
			t.Fatalf("400 tokens: %+v", v)
		}
		v = admit("b", 200, tpm, model)
		if v.Admitted || v.Reason != state.QuotaTokens || v.Use[0].Tokens != 400 {
			t.Fatalf("600 of the model's 500: %+v", v)
		}
		if v := admit("b", 500, tpm); !v.Admitted || v.Use[0].Tokens != 900 {
			t.Fatalf("the refusal charged the tenant: %+v", v)
		}
		if v := admit("b", 2000, tpm); v.Admitted || !v.TooLarge {
			t.Fatalf("2,000 tokens of 1,000: %+v, want too large", v)
		}
		// Too large while another limit is reached too: refused for the
		// limit no wait meets.
		both := state.QuotaScope{Key: "t", RequestsPerMinute: 1, TokensPerMinute: 1000}
		admit("e", 10, both)
		if v := admit("e", 2000, both); v.Admitted || !v.TooLarge || v.Reason != state.QuotaTokens {
			t.Fatalf("2,000 tokens of 1,000, the requests spent too: %+v, want too large for tokens", v)
		}

		// A day's tokens.
		day := state.QuotaScope{Key: "t", TokensPerDay: 100}
		first := admit("c", 60, day)
		if v := admit("c", 60, day); v.Admitted || v.Reason != state.QuotaTokens || v.RetryAfter > 24*time.Hour {
			t.Fatalf("120 of a day's 100: %+v", v)
		}
		settle("c", fmt.Sprint("r", n-1), first, -30, 0, "t") // it used 30
		if v := admit("c", 60, day); !v.Admitted || v.Use[0].TokensDay != 90 {
			t.Fatalf("after settling to 30: %+v", v)
		}

		// Concurrency: 2 in flight.
		cc := state.QuotaScope{Key: "t", MaxConcurrent: 2}
		a1 := admit("d", 1, cc)
		admit("d", 1, cc)
		if v := admit("d", 1, cc); v.Admitted || v.Reason != state.QuotaConcurrency {
			t.Fatalf("3 of 2 in flight: %+v", v)
		}
		settle("d", "r"+fmt.Sprint(n-2), a1, 0, 0, "t")
		if v := admit("d", 1, cc); !v.Admitted {
			t.Fatalf("after one ended: %+v", v)
		}
	})
}

// TestQuotasRacingReplicas: three replicas (Redis clients) admit at once
// against one limit of 50 requests and 5,000 tokens a minute: together
// they admit exactly what one would, 50 requests, however they race.
func TestQuotasRacingReplicas(t *testing.T) {
	srv := redistest.Start(t)
	var admitted, tokens atomic.Int64
	var wg sync.WaitGroup
	for r := range 3 {
		c, err := state.OpenRedis(srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		q := state.NewRedis(c, "test")
		for w := range 8 {
			wg.Go(func() {
				for i := range 40 {
					v, err := q.Admit(context.Background(), state.Admission{ID: fmt.Sprint(r, w, i), Tenant: "x", Tokens: 90,
						Scopes: []state.QuotaScope{{Key: "t", RequestsPerMinute: 50, TokensPerMinute: 5000}}})
					if err != nil {
						t.Error(err)
						return
					}
					if v.Admitted {
						admitted.Add(1)
						tokens.Add(90)
					}
				}
			})
		}
	}
	wg.Wait()
	// 5,000 tokens hold 55 requests of 90: the request limit binds.
	if admitted.Load() != 50 {
		t.Errorf("960 racing requests: %d admitted, want 50", admitted.Load())
	}
}
