package errrate

import (
	"testing"
	"time"
)

// TestErrorRatesOutliveTheirSpan: the error rates' snapshots live in the
// store as long as the longest burn-rate window reads them, so that a
// replica that went away still counts in a 6 h burn rate.
func TestErrorRatesOutliveTheirSpan(t *testing.T) {
	e := New(10*time.Second, 6*time.Hour)
	if ttl, every := e.Sharing("errors/total"); ttl < 6*time.Hour || every != 1 {
		t.Errorf("sharing = %v, %d; want at least 6h, read every flush", ttl, every)
	}
}
