package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/recovery"
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

// The replay cut is the orphan WAL's position when the agent saw a
// restore (here one that leaves the old sidecars: mispaired), read through the guard's fds (or, with the guard off, through
// the pins while the writer is still frozen): the rows the restore rolled
// back stay rolled back however close to it they were stamped (the time
// rule's margin would re-add them), and every row acknowledged after it
// comes back. A single connection commits one transaction at a time, so
// at most one row stamped before the restore can straddle it (committed
// after the cut) and come back.
func TestReplacedFrameCut(t *testing.T) {
	for _, source := range []string{"guard", "pin"} {
		t.Run(source, func(t *testing.T) {
			home, db := testHome(t)
			var mod func(*Options)
			if source == "guard" {
				mod = guardOn
			}
			a := startAgent(t, home, mod)
			w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300})
			waitHolder(t, a, db, w.Pid)
			hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
				acks := w.Acks(t)
				return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
			})
			if source == "guard" {
				waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
			}
			checkFrameCut(t, a, db, w, source)
		})
	}
}

func checkFrameCut(t *testing.T, a *Agent, db string, w *hermestest.Writer, source string) {
	t.Helper()
	hermestest.RenameFreshOver(t, db)
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	// The old sidecars stay at the path: mispaired, the same cut.
	if inc.State != journal.StateResolved || inc.Kind != journal.KindMispaired {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	// Frame 0 is a real position: the writer's checkpoint may have reset
	// its WAL just before the rename (seen under -race), and then every
	// row it had committed is in the main the restore replaced.
	if c := inc.Detail.WALCut; c == nil || c.Source != source || (c.Frame == 0 && c.Salt1 == 0 && c.Salt2 == 0) {
		t.Fatalf("incident %s journaled wal cut %+v; want one read by the %s", inc.ID, c, source)
	}
	rep, err := recovery.ReadDivert(inc.Detail.DivertDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.CutNote, "wal frame ") {
		t.Fatalf("divert split the rows by %q; want the frame cut", rep.CutNote)
	}
	// When the rename happened (the new main's ctime), as the incident
	// journaled it.
	before := inc.Detail.ReplacedAt
	waitExit(t, w, 10*time.Second)
	acks, rows := w.Acks(t), dbRows(t, db)
	var readded []int64
	for _, ack := range acks {
		if time.Unix(0, int64(ack.Timestamp*1e9)).Before(before) && rows[hermestest.MessageContent(ack.Session, ack.Seq)] > 0 {
			readded = append(readded, ack.Seq)
		}
	}
	if len(readded) > 1 {
		t.Fatalf("%d rows stamped before the restore replayed back (%v); the frame cut allows one straddler", len(readded), readded)
	}
	checkExactlyOnce(t, acks, rows, before, time.Time{})
}
