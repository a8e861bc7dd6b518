package stats

import (
	"math/rand/v2"
	"testing"
)

func normalSample(n int, shift float64, seed uint64) []float64 {
	r := rand.New(rand.NewPCG(seed, 3))
	x := make([]float64, n)
	for i := range x {
		x[i] = r.NormFloat64() + shift
	}
	return x
}

func BenchmarkKS2Samp10k(b *testing.B) {
	x, y := normalSample(10000, 0, 1), normalSample(10000, 0.02, 2)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := KS2Samp(x, y); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFitMCD(b *testing.B) {
	x := gaussianWithOutliers(2000, 8, 5)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := FitMCD(x, rand.New(rand.NewPCG(1, 2))); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChiSquare(b *testing.B) {
	r := rand.New(rand.NewPCG(4, 5))
	table := [][]float64{make([]float64, 20), make([]float64, 20)}
	for _, row := range table {
		for j := range row {
			row[j] = float64(r.IntN(1000))
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ChiSquare(table); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPSI10k(b *testing.B) {
	ref, cur := normalSample(10000, 0, 6), normalSample(10000, 0.1, 7)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PSI(ref, cur, 10); err != nil {
			b.Fatal(err)
		}
	}
}
