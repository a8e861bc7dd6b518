package balance

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/vigil-gw/vigil/config"
	"github.com/vigil-gw/vigil/gateway/upstream"
)

// TestFilters: each filter alone, on the whole pool, and the error it
// gives when it leaves no candidate.
func TestFilters(t *testing.T) {
	p := newPool(t, 4, func(i int, b *config.Backend) {
		switch i {
		case 0:
			b.Models = []string{"m1"}
		case 2:
			b.Kind = "tgi"
		case 3:
			b.Models = []string{"m2"}
		}
	})
	bs := p.Backends()
	bs[1].SetHealthy(false)
	all := []int32{0, 1, 2, 3}
	tests := []struct {
		name  string
		f     Filter
		req   Request
		cands []int32
		want  []int32 // empty: Pick fails with Err
		err   error
	}{
		{"kind", kindFilter{}, Request{Kinds: []string{"tgi"}}, all, []int32{2}, upstream.ErrUnknownModel},
		{"kind: any", kindFilter{}, Request{}, all, all, upstream.ErrUnknownModel},
		{"kind: none", kindFilter{}, Request{Kinds: []string{"x"}}, all, nil, upstream.ErrUnknownModel},
		{"model (an empty list serves all)", modelFilter{}, Request{Model: "m1"}, all, []int32{0, 1, 2}, upstream.ErrUnknownModel},
		{"model: any", modelFilter{}, Request{}, all, all, upstream.ErrUnknownModel},
		{"model: none", modelFilter{}, Request{Model: "m1"}, []int32{3}, nil, upstream.ErrUnknownModel},
		{"healthy", healthyFilter{}, Request{}, all, []int32{0, 2, 3}, upstream.ErrNoHealthy},
		{"healthy: none", healthyFilter{}, Request{}, []int32{1}, nil, upstream.ErrNoHealthy},
		{"untried", untriedFilter{}, Request{Exclude: []*upstream.Backend{bs[0], bs[3]}}, all, []int32{1, 2}, upstream.ErrNoHealthy},
		{"untried: none", untriedFilter{}, Request{Exclude: bs}, all, nil, upstream.ErrNoHealthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Backends = bs
			got := tt.f.Filter(&tt.req, append([]int32(nil), tt.cands...))
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			if !errors.Is(tt.f.Err(), tt.err) {
				t.Errorf("Err() = %v, want %v", tt.f.Err(), tt.err)
			}
		})
	}
}
