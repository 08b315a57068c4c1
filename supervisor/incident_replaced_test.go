package supervisor

import (
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A restore renames a fresh state.db over the path and removes the
// sidecars while the writer commits: the writer is frozen, terminated, and
// every row it acknowledged is in the capture.
func TestReplacedIncident(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := startHeldWriter(t, a, db)
	// Rows older than the replace margin before the restore are the ones
	// the restore rolls back on purpose; let the writer make some.
	hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
		acks := w.Acks(t)
		return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
	})

	start := hermestest.RestoreOver(t, db)
	// Stopped, or already terminated by the policy (its exit is checked
	// below); never still running past the deadline.
	hermestest.Eventually(t, "the writer to be stopped", 5*time.Second, func() bool {
		st := hermestest.StateOf(w.Pid)
		return st == 'T' || st == 'Z' || st == 'X'
	})
	t.Logf("writer stopped %v after the restore", time.Since(start))

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved || inc.Kind != journal.KindReplaced {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
	acks := w.Acks(t)
	if len(acks) == 0 {
		t.Fatal("the writer acknowledged nothing")
	}
	rows := captureRows(t, inc.Detail.CapturePath)
	if miss := missingAcks(acks, rows); len(miss) > 0 {
		t.Fatalf("%d of %d acknowledged rows missing from the capture: %v", len(miss), len(acks), miss)
	}
	// Every row the orphan committed after the restore is replayed into
	// the new generation exactly once; the rolled-back ones are not.
	checkExactlyOnce(t, acks, dbRows(t, db), start, start.Add(-incident.ReplaceMargin-100*time.Millisecond))
}
