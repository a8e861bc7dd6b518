package window

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
)

type reservoirView struct {
	Capacity, Dim int
	Seen          int64
	Keys          []uint64
	Rows          [][]float64
}

func viewReservoir(r *Reservoir) any {
	v := reservoirView{Capacity: r.Capacity(), Dim: r.Dim(), Seen: r.Seen(), Rows: r.Rows()}
	for _, it := range r.sorted() {
		v.Keys = append(v.Keys, it.key)
	}
	return v
}

func sameReservoir(t testing.TB) func(want, got *Reservoir) string {
	return sameEncoding[Reservoir](t, viewReservoir, func(x, y any) string { return gocmp.Diff(x, y) })
}

// vectors returns n vectors of dimension dim numbered from first: vector i
// is (i, i+0.5, ...), so each is identifiable.
func vectors(first, n, dim int) [][]float64 {
	vs := make([][]float64, n)
	for i := range vs {
		vs[i] = make([]float64, dim)
		for j := range vs[i] {
			vs[i][j] = float64(first+i) + float64(j)/2
		}
	}
	return vs
}

func reservoirOf(capacity, dim int, rng rand.Source, vs [][]float64) *Reservoir {
	r := NewReservoir(capacity, dim)
	for _, v := range vs {
		r.Add(v, rng)
	}
	return r
}

// TestReservoirKeepsSmallestKeys replays the key sequence of a seeded source
// and checks the kept rows are those with the capacity smallest keys.
func TestReservoirKeepsSmallestKeys(t *testing.T) {
	for _, n := range []int{0, 5, 16, 17, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const capacity, dim = 16, 3
			vs := vectors(0, n, dim)
			r := reservoirOf(capacity, dim, rand.NewPCG(1, 2), vs)
			keys := rand.NewPCG(1, 2)
			type keyed struct {
				key uint64
				row []float64
			}
			var all []keyed
			for _, v := range vs {
				all = append(all, keyed{keys.Uint64(), v})
			}
			slices.SortFunc(all, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
			want := [][]float64{}
			for _, k := range all[:min(capacity, n)] {
				want = append(want, k.row)
			}
			if d := gocmp.Diff(want, r.Rows()); d != "" {
				t.Errorf("rows (-want +got):\n%s", d)
			}
			if r.Seen() != int64(n) || r.Len() != min(capacity, n) {
				t.Errorf("seen %d len %d", r.Seen(), r.Len())
			}
			col := r.Column(1)
			for i, row := range want {
				if col[i] != row[1] {
					t.Fatalf("Column(1)[%d] = %v, want %v", i, col[i], row[1])
				}
			}
		})
	}
}

func TestReservoirCopiesInput(t *testing.T) {
	r := NewReservoir(4, 2)
	v := []float64{1, 2}
	r.Add(v, rand.NewPCG(1, 1))
	v[0] = 99
	if got := r.Rows()[0][0]; got != 1 {
		t.Errorf("reservoir aliases the caller's vector: %v", got)
	}
}

func TestReservoirZeroValue(t *testing.T) {
	var r Reservoir
	if r.Capacity() != DefaultReservoirSize || r.Dim() != 0 {
		t.Fatalf("capacity %d dim %d", r.Capacity(), r.Dim())
	}
	r.Add([]float64{1, 2, 3}, nil) // default source
	if r.Dim() != 3 || r.Len() != 1 {
		t.Errorf("dim %d len %d", r.Dim(), r.Len())
	}
	for _, n := range []int{2, 0} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Add of a %d-vector to a 3-reservoir did not panic", n)
				}
			}()
			r.Add(make([]float64, n), nil)
		}()
	}
	var z Reservoir
	if err := z.Merge(&r); err != nil || z.Dim() != 3 {
		t.Errorf("zero value merge: %v, dim %d", err, z.Dim())
	}
}

func TestReservoirMergeIncompatible(t *testing.T) {
	a := reservoirOf(8, 2, rand.NewPCG(1, 1), vectors(0, 3, 2))
	before := viewReservoir(a)
	for _, o := range []*Reservoir{NewReservoir(9, 2), reservoirOf(8, 3, nil, vectors(0, 1, 3))} {
		if err := a.Merge(o); !errors.Is(err, ErrIncompatible) {
			t.Errorf("Merge = %v, want ErrIncompatible", err)
		}
	}
	if d := gocmp.Diff(before, viewReservoir(a)); d != "" {
		t.Errorf("failed Merge changed the reservoir:\n%s", d)
	}
}

func TestReservoirMergeLaws(t *testing.T) {
	type parts struct {
		name    string
		a, b, c [][]float64
	}
	const capacity, dim = 16, 3
	cases := []parts{
		{"all empty", nil, nil, nil},
		{"below capacity", vectors(0, 3, dim), vectors(10, 4, dim), vectors(20, 5, dim)},
		{"one full", vectors(0, 100, dim), nil, vectors(200, 2, dim)},
		{"duplicates", vectors(0, 20, dim), vectors(0, 20, dim), vectors(0, 20, dim)},
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 30 {
		cases = append(cases, parts{fmt.Sprintf("random %d", i),
			vectors(0, rng.IntN(40), dim), vectors(1000, rng.IntN(40), dim), vectors(2000, rng.IntN(40), dim)})
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keys := rand.NewPCG(uint64(i), 99)
			a := reservoirOf(capacity, dim, keys, tc.a)
			b := reservoirOf(capacity, dim, keys, tc.b)
			c := reservoirOf(capacity, dim, keys, tc.c)
			checkLaws[Reservoir](t, NewReservoir(capacity, dim), a, b, c, sameReservoir(t))
			// One reservoir fed the same keys in the same order holds the
			// same sample as the merge.
			all := reservoirOf(capacity, dim, rand.NewPCG(uint64(i), 99), slices.Concat(tc.a, tc.b, tc.c))
			if d := sameReservoir(t)(all, merged[Reservoir](t, merged[Reservoir](t, c, a), b)); d != "" {
				t.Errorf("merge differs from one reservoir (-all +merged):\n%s", d)
			}
		})
	}
}

func TestReservoirSelfMergeAndReset(t *testing.T) {
	r := reservoirOf(8, 2, rand.NewPCG(3, 3), vectors(0, 5, 2))
	rows := r.Rows()
	if err := r.Merge(r); err != nil {
		t.Fatal(err)
	}
	// Each item now appears twice with its key; the 8 smallest are the
	// first four rows, twice each.
	var want [][]float64
	for _, row := range rows[:4] {
		want = append(want, row, row)
	}
	if d := gocmp.Diff(want, r.Rows()); d != "" || r.Seen() != 10 {
		t.Errorf("self merge: seen %d, rows (-want +got):\n%s", r.Seen(), d)
	}
	r.Reset()
	if d := sameReservoir(t)(NewReservoir(8, 2), r); d != "" {
		t.Errorf("reset:\n%s", d)
	}
}

// TestReservoirUniformMerges: items 0..n−1 are split over four reservoirs of
// uneven sizes (one below capacity), which are merged in alternating orders;
// over T trials each item's inclusion count should be Binomial(T, k/n). With
// e = T·k/n, the statistic X = Σ (count−e)²/e has mean ≈ (n−1)(1−k/n) ≈ 179
// and standard deviation ≈ 19 for uniform sampling; the check allows ±6
// standard deviations, and each item's count ±6σ of e (σ = √(T·p·(1−p))). A
// sampler biased towards one part, or towards early or late items, lands far
// outside. The seed is fixed, so the test cannot flake.
func TestReservoirUniformMerges(t *testing.T) {
	const n, k, trials = 200, 20, 3000
	bounds := []int{0, 10, 60, 130, n} // parts of 10, 50, 70 and 70 items
	rng := rand.New(rand.NewPCG(2024, 11))
	counts := make([]float64, n)
	for trial := range trials {
		var parts []*Reservoir
		for p := range len(bounds) - 1 {
			r := NewReservoir(k, 1)
			for i := bounds[p]; i < bounds[p+1]; i++ {
				r.Add([]float64{float64(i)}, rng)
			}
			parts = append(parts, r)
		}
		var out *Reservoir
		if trial%2 == 0 {
			out = merged[Reservoir](t, merged[Reservoir](t, parts[0], parts[1]), merged[Reservoir](t, parts[2], parts[3]))
		} else {
			out = merged[Reservoir](t, parts[3], merged[Reservoir](t, parts[2], merged[Reservoir](t, parts[1], parts[0])))
		}
		if out.Len() != k || out.Seen() != n {
			t.Fatalf("merged len %d seen %d", out.Len(), out.Seen())
		}
		for _, x := range out.Column(0) {
			counts[int(x)]++
		}
	}
	p := float64(k) / n
	e := trials * p
	sigma := math.Sqrt(trials * p * (1 - p))
	var chi2 float64
	for i, c := range counts {
		chi2 += (c - e) * (c - e) / e
		if math.Abs(c-e) > 6*sigma {
			t.Errorf("item %d kept %v times, want %v ± %.0f", i, c, e, 6*sigma)
		}
	}
	mean := (n - 1) * (1 - p)
	sd := math.Sqrt(2 * mean)
	if math.Abs(chi2-mean) > 6*sd {
		t.Errorf("chi-square %.1f, want %.1f ± %.1f", chi2, mean, 6*sd)
	}
	t.Logf("chi-square %.1f (expected %.1f ± %.1f)", chi2, mean, sd)
}

func TestReservoirRoundTrip(t *testing.T) {
	for _, r := range []*Reservoir{
		new(Reservoir),
		NewReservoir(4, 2),
		reservoirOf(4, 2, rand.NewPCG(1, 2), vectors(0, 3, 2)),
		reservoirOf(4, 2, rand.NewPCG(1, 2), append(vectors(0, 30, 2), []float64{math.NaN(), math.Inf(-1)})),
	} {
		if d := sameReservoir(t)(r, cloneOf[Reservoir](t, r)); d != "" {
			t.Errorf("round trip (-want +got):\n%s", d)
		}
	}
}

func TestReservoirUnmarshalRejects(t *testing.T) {
	valid := encode[Reservoir](t, reservoirOf(4, 2, rand.NewPCG(1, 2), vectors(0, 30, 2)))
	head := func(fields ...uint64) []byte {
		b := []byte{tagReservoir}
		for _, f := range fields {
			b = appendUvarintForTest(b, f)
		}
		return b
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:len(valid)-1]},
		{"trailing", append(slices.Clone(valid), 0)},
		{"capacity 0", head(0, 1, 0, 0)},
		{"capacity too large", head(MaxReservoirSize+1, 1, 0, 0)},
		{"dimension too large", head(4, MaxReservoirDim+1, 0, 0)},
		{"more kept than capacity", head(4, 1, 9, 5)},
		{"kept without dimension", append(head(4, 0, 1, 1), make([]byte, 8)...)},
		{"more kept than seen", append(head(4, 1, 1, 2), make([]byte, 32)...)},
		{"below capacity but lost items", append(head(4, 1, 9, 1), make([]byte, 16)...)},
		{"huge claimed length", head(MaxReservoirSize, MaxReservoirDim, 1<<20, 1<<20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := reservoirOf(4, 2, rand.NewPCG(1, 2), vectors(0, 3, 2))
			before := viewReservoir(r)
			if err := r.UnmarshalBinary(tc.data); !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			if d := gocmp.Diff(before, viewReservoir(r)); d != "" {
				t.Errorf("failed UnmarshalBinary changed the reservoir:\n%s", d)
			}
		})
	}
}
