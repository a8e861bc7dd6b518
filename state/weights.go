package state

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// Weights shares the balancer's state among replicas (it is a
// gateway/balance.Store and HomeStore): each replica publishes its backend
// weights with the time, and uses the mean over the replicas that
// published within MaxAge; and the prefix strategy's homes go through
// Claim, the first replica to claim an anchor deciding its home.
type Weights struct {
	Store   Store
	Replica string
	// MaxAge drops the weights of replicas that stopped publishing.
	MaxAge time.Duration
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

type published struct {
	At      time.Time          `json:"at"`
	Weights map[string]float64 `json:"weights"`
}

// homeKey is the document key of a prefix anchor's home.
func homeKey(anchor uint64) string { return "prefix:home:" + strconv.FormatUint(anchor, 16) }

// ClaimHomes shares the prefix strategy's homes among replicas (it is a
// gateway/balance.HomeStore): each anchor's first claim in the store wins
// and is returned, and every claim keeps its anchor's home for ttl.
func (w *Weights) ClaimHomes(ctx context.Context, claims map[uint64]string, ttl time.Duration) (map[uint64]string, error) {
	docs := make(map[string][]byte, len(claims))
	keys := make(map[string]uint64, len(claims))
	for a, name := range claims {
		k := homeKey(a)
		docs[k], keys[k] = []byte(name), a
	}
	got, err := w.Store.Claim(ctx, docs, ttl)
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]string, len(got))
	for k, v := range got {
		if a, ok := keys[k]; ok {
			out[a] = string(v)
		}
	}
	return out, nil
}

// weightsSignal names the one-bucket series the weights live in.
const weightsSignal = "weights"

// ShareWeights publishes local and returns the mean weight per backend over
// the fresh replicas (this one included).
func (w *Weights) ShareWeights(ctx context.Context, local map[string]float64) (map[string]float64, error) {
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	v, err := json.Marshal(published{At: now, Weights: local})
	if err != nil {
		return nil, err
	}
	if err := w.Store.PutBuckets(ctx, weightsSignal, w.Replica, uint64(now.UnixNano()), []Bucket{{Payload: v}}, 10*w.MaxAge); err != nil {
		return nil, err
	}
	all, err := w.Store.Buckets(ctx, weightsSignal, 0, 0)
	if err != nil {
		return nil, err
	}
	sum, n := map[string]float64{}, map[string]int{}
	for _, b := range all {
		var p published
		if json.Unmarshal(b.Payload, &p) != nil || now.Sub(p.At) > w.MaxAge {
			continue
		}
		for name, wt := range p.Weights {
			sum[name] += wt
			n[name]++
		}
	}
	out := make(map[string]float64, len(sum))
	for name, s := range sum {
		out[name] = s / float64(n[name])
	}
	return out, nil
}
