package window_test

import (
	"fmt"
	"time"

	"github.com/vigil-gw/vigil/analyzers/window"
)

// A replica keeps per-minute latency sketches; another replica's bucket,
// received as bytes, merges into the same minute.
func ExampleSeries() {
	start := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	local := window.NewSeries[window.Sketch](time.Minute, 60, nil)
	for i := range 100 {
		local.Bucket(start.Add(time.Duration(i) * time.Second)).Add(0.080 + float64(i%10)*0.01)
	}

	var remote window.Sketch
	for range 50 {
		remote.Add(0.5)
	}
	blob, _ := remote.MarshalBinary()

	var decoded window.Sketch
	if err := decoded.UnmarshalBinary(blob); err != nil {
		panic(err)
	}
	if err := local.Bucket(start).Merge(&decoded); err != nil {
		panic(err)
	}

	all, _ := local.Range(start, start.Add(5*time.Minute))
	fmt.Printf("requests %d, p50 %.3fs, p99 %.3fs\n", all.Count(), all.Quantile(0.5), all.Quantile(0.99))
	// Output: requests 150, p50 0.151s, p99 0.500s
}
