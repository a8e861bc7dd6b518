package alert

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
)

// history is the period values of one series, oldest first, at most cap
// long, and the number of the last period recorded.
type history struct {
	last   int64 // period number (unix nanoseconds / Period) of the newest value; -1: none
	values []float64
}

// add records v for period p unless p is not newer than the last recorded
// period (another replica sharing the store recorded it already), dropping
// the oldest values beyond capacity.
func (h *history) add(p int64, v float64, capacity int) {
	if p <= h.last {
		return
	}
	h.last = p
	h.values = append(h.values, v)
	if n := len(h.values) - capacity; n > 0 {
		h.values = slices.Delete(h.values, 0, n)
	}
}

// Encoding: version byte, last period (int64), then the values (float64),
// little-endian. 7 days of 5-minute periods is 16 KiB.
const historyVersion = 1

func (h *history) encode() []byte {
	b := make([]byte, 0, 9+8*len(h.values))
	b = append(b, historyVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(h.last))
	for _, v := range h.values {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
	}
	return b
}

var errBadHistory = errors.New("alert: malformed history document")

func decodeHistory(b []byte) (history, error) {
	if len(b) < 9 || b[0] != historyVersion || (len(b)-9)%8 != 0 {
		return history{last: -1}, errBadHistory
	}
	h := history{last: int64(binary.LittleEndian.Uint64(b[1:9]))}
	h.values = make([]float64, 0, (len(b)-9)/8)
	for i := 9; i < len(b); i += 8 {
		h.values = append(h.values, math.Float64frombits(binary.LittleEndian.Uint64(b[i:])))
	}
	return h, nil
}

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of values by linear
// interpolation between closest ranks: with the values sorted as
// x[0] ≤ … ≤ x[n-1], h = q·(n−1) and the result is
// x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]). This is Hyndman and Fan's
// definition 7, the default of numpy.percentile, R's quantile and
// Prometheus's quantile_over_time. It returns NaN for no values.
func Percentile(values []float64, q float64) float64 {
	if len(values) == 0 {
		return math.NaN()
	}
	s := slices.Clone(values)
	slices.Sort(s)
	h := q * float64(len(s)-1)
	lo := int(math.Floor(h))
	if lo >= len(s)-1 {
		return s[len(s)-1]
	}
	if lo < 0 {
		return s[0]
	}
	return s[lo] + (h-float64(lo))*(s[lo+1]-s[lo])
}
