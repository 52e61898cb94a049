package store

import (
	"testing"
	"time"
)

// The conflict retry delay must keep the timing it had before it moved to
// internal/backoff: 1ms<<n capped at 50ms, drawn from [d/2, d].
func TestConflictBackoffIsUpperHalfOfDoublingDelay(t *testing.T) {
	for n := range 10 {
		d := min(time.Millisecond<<n, 50*time.Millisecond)
		lo, hi := d/2-time.Microsecond, d+time.Microsecond // float rounding
		var sawLow, sawHigh bool
		for range 2000 {
			got := conflictBackoff.Delay(n)
			if got < lo || got > hi {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", n, got, d/2, d)
			}
			sawLow = sawLow || got < d/2+d/8
			sawHigh = sawHigh || got > d-d/8
		}
		if !sawLow || !sawHigh {
			t.Errorf("Delay(%d) does not spread over [%s, %s] (low seen %v, high seen %v)", n, d/2, d, sawLow, sawHigh)
		}
	}
}
