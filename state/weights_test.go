package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/vigil-gw/vigil/state"
)

func TestWeightsMeanOverFreshReplicas(t *testing.T) {
	stores(t, func(t *testing.T, s state.Store) {
		now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		a := &state.Weights{Store: s, Replica: "a", MaxAge: 10 * time.Second, Now: clock}
		b := &state.Weights{Store: s, Replica: "b", MaxAge: 10 * time.Second, Now: clock}
		ctx := context.Background()
		if _, err := a.ShareWeights(ctx, map[string]float64{"x": 80, "y": 20}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Second)
		got, err := b.ShareWeights(ctx, map[string]float64{"x": 40, "y": 60})
		if err != nil {
			t.Fatal(err)
		}
		if got["x"] != 60 || got["y"] != 40 {
			t.Errorf("shared weights %v, want the means x=60 y=40", got)
		}
		now = now.Add(15 * time.Second) // a stopped publishing
		got, _ = b.ShareWeights(ctx, map[string]float64{"x": 40, "y": 60})
		if got["x"] != 40 || got["y"] != 60 {
			t.Errorf("weights %v, want b's own once a is stale", got)
		}
	})
}
