package supervisor

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// A scan that makes many stores unknown says so in one scan.unknown line
// with the count, not one line per store; a later scan with the same
// verdicts says nothing.
func TestScanUnknownOncePerScan(t *testing.T) {
	home := scaleHome(t, 6)
	var logs hermestest.LogBuffer
	a := startAgent(t, home, func(o *Options) {
		o.Reconcile = time.Hour
		o.Verdict = holders.RuleStrict
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	unknown := 0
	for _, sr := range a.cache.Last().Stores {
		if sr.Verdict == holders.VerdictUnknown {
			unknown++
		}
	}
	if unknown < 2 {
		t.Skipf("%d stores unknown under the strict rule: no process on this host is blind to the scan", unknown)
	}
	recs := logs.Records(t, EventScanUnknown)
	if len(recs) != 1 {
		t.Fatalf("%d scan.unknown lines for one scan, want 1:\n%v", len(recs), recs)
	}
	if got := recs[0]["stores"]; got != float64(unknown) {
		t.Errorf("scan.unknown stores=%v, want %d", got, unknown)
	}
	if _, ok := recs[0]["first_reason"]; !ok {
		t.Errorf("scan.unknown has no first_reason: %v", recs[0])
	}
	a.fullScan()
	if recs := logs.Records(t, EventScanUnknown); len(recs) != 1 {
		t.Errorf("a second scan with the same verdicts logged again: %d lines", len(recs))
	}
}
