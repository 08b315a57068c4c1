package incident

import (
	"testing"
	"time"
)

// A divert that fails is tried again soon (most failures pass in a
// second or two), then less often, and given up after about two minutes.
func TestDivertRetryBacksOff(t *testing.T) {
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	var total time.Duration
	for i, w := range want {
		if got := divertRetryAfter(i + 1); got != w {
			t.Errorf("wait after failure %d: %v, want %v", i+1, got, w)
		}
	}
	for tries := 1; tries < maxDivertFails; tries++ {
		total += divertRetryAfter(tries)
	}
	if total < time.Minute || total > 3*time.Minute {
		t.Errorf("a divert that always fails is given up after %v of retries, want between 1 and 3 minutes", total)
	}
}
