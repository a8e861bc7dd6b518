package stats

import (
	"math"
	"strconv"
)

// Num is a float64 that encodes to JSON as null when it is NaN or infinite
// (encoding/json refuses those), so that a statistic of an empty window
// reads as "no value" rather than breaking the whole document.
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}
