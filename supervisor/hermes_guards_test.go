//go:build linux

package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// The incidents of docs/design.md §6 with a writer that has Hermes' own
// guards (hermestest -hermes-guards): it refuses and diverts writes to
// sessions/<session>.jsonl and captures the lost WAL generation itself,
// at its first refused write or at close. Whatever it and agentd each
// do, the store ends with one capture of the orphan, no staging
// directory, and every acknowledged row (committed or diverted) once.

func hermesWriter(t *testing.T, db string, mod func(*hermestest.WriterOptions)) *hermestest.Writer {
	t.Helper()
	o := hermestest.WriterOptions{DB: db, Session: "s1", Rate: 300, CheckpointEvery: -1, HermesGuards: true}
	if mod != nil {
		mod(&o)
	}
	return hermestest.StartWriter(t, o)
}

// checkOneCapture fails unless db has exactly one finished capture
// directory and no staging directory, and returns it.
func checkOneCapture(t *testing.T, db string) string {
	t.Helper()
	all, err := filepath.Glob(db + ".retired-wal-*")
	if err != nil {
		t.Fatal(err)
	}
	var done, partial []string
	for _, p := range all {
		if strings.HasSuffix(p, ".partial") {
			partial = append(partial, filepath.Base(p))
		} else {
			done = append(done, filepath.Base(p))
		}
	}
	if len(done) != 1 || len(partial) != 0 {
		t.Fatalf("captures %v, staging %v: want exactly one capture and no staging directory", done, partial)
	}
	return filepath.Join(filepath.Dir(db), done[0])
}

func resolved(t *testing.T, a *Agent, db string, kind journal.Kind) journal.Incident {
	t.Helper()
	inc := waitIncident(t, a, db, 60*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.State != journal.StateResolved || inc.Kind != kind {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	return inc
}

// A rename-over restore that removes the sidecars (replaced, policy
// terminate): the writer refuses every write after it and, at the close
// SIGTERM runs, captures the retired WAL generation as Hermes does.
func TestHermesGuardsReplaced(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermesWriter(t, db, nil)
	waitHolder(t, a, db, w.Pid)
	hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
		acks := w.Acks(t)
		return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
	})
	renamed := hermestest.RestoreOver(t, db)
	inc := resolved(t, a, db, journal.KindReplaced)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	// The writer diverts the writes it tries between the restore and
	// the freeze: none when the freeze came first.
	acks := w.Acks(t)
	t.Logf("%d of %d acks diverted by the writer", countDiverted(acks), len(acks))
	checkExactlyOnce(t, acks, dbRows(t, db), renamed, renamed.Add(-incident.ReplaceMargin-100*time.Millisecond))
}

// The writer refuses and diverts writes after a restore the agent sees
// only later (it starts after it): the lines appended before the incident
// opened are the incident's, replayed once; they were lost when the
// session files were marked at the open.
func TestHermesGuardsDivertBeforeIncident(t *testing.T) {
	home, db := testHome(t)
	w := hermesWriter(t, db, nil)
	w.WaitAcks(t, 20)
	renamed := hermestest.RestoreOver(t, db)
	hermestest.Eventually(t, "diverted acks", 10*time.Second, func() bool { return countDiverted(w.Acks(t)) >= 10 })
	a := startAgent(t, home, nil)
	inc := resolved(t, a, db, journal.KindReplaced)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), renamed, renamed.Add(-incident.ReplaceMargin-100*time.Millisecond))
}

// -wal and -shm unlinked under the writer (sidecar_lost, policy kill):
// its next write is refused and it captures the generation at that halt,
// usually before agentd freezes it.
func TestHermesGuardsSidecarLost(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermesWriter(t, db, nil)
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 30)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	inc := resolved(t, a, db, journal.KindSidecarLost)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	// Once resolved, agentd holds no deleted -wal: a new Hermes opener,
	// which refuses next to one, starts.
	w2 := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.Session, o.Count = "s2", 10 })
	waitExit(t, w2, 20*time.Second)
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
	checkExactlyOnce(t, w2.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
}

// The same, with the writer stopped inside its own capture (its staging
// directory and an empty state.db-wal.part exist) when agentd freezes
// and kills it: agentd removes the staging directory once its own
// capture holds the generation.
func TestHermesGuardsInterruptedCapture(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.CapturePause = true })
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 30)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	inc := resolved(t, a, db, journal.KindSidecarLost)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
}

// A restore renames a new main over the path and leaves the old sidecars
// (mispaired, policy kill): they are quarantined into agentd's capture.
func TestHermesGuardsMispaired(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermesWriter(t, db, nil)
	waitHolder(t, a, db, w.Pid)
	hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
		acks := w.Acks(t)
		return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
	})
	hermestest.RenameFreshOver(t, db)
	renamed := time.Now()
	inc := resolved(t, a, db, journal.KindMispaired)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), renamed, renamed.Add(-incident.ReplaceMargin-100*time.Millisecond))
}

func countDiverted(acks []hermestest.Ack) int {
	n := 0
	for _, a := range acks {
		if a.ID == -1 {
			n++
		}
	}
	return n
}

// Mispaired with policy terminate: the writer's close captures the WAL
// agentd quarantined into its own capture (the same inode): that second
// copy is removed.
func TestHermesGuardsMispairedTerminate(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Policies.Mispaired = incident.PolicyTerminate })
	w := hermesWriter(t, db, nil)
	waitHolder(t, a, db, w.Pid)
	hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
		acks := w.Acks(t)
		return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
	})
	hermestest.RenameFreshOver(t, db)
	renamed := time.Now()
	inc := resolved(t, a, db, journal.KindMispaired)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), renamed, renamed.Add(-incident.ReplaceMargin-100*time.Millisecond))
}

// -wal and -shm unlinked while no agentd runs: the writer diverts from
// its next write on, and the agent started a second later opens the
// incident. The lines diverted before it did are the incident's: the
// unlink (the pinned -wal's ctime) dates the change, not the moment the
// agent saw it.
func TestHermesGuardsSidecarLostBeforeAgent(t *testing.T) {
	home, db := testHome(t)
	w := hermesWriter(t, db, nil)
	w.WaitAcks(t, 30)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	hermestest.Eventually(t, "diverted acks older than the replace margin", 10*time.Second, func() bool {
		for _, a := range w.Acks(t) {
			if a.ID == -1 {
				return time.Since(time.Unix(0, int64(a.Timestamp*1e9))) > 3*incident.ReplaceMargin
			}
		}
		return false
	})
	a := startAgent(t, home, nil)
	inc := resolved(t, a, db, journal.KindSidecarLost)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
}

// The writer diverts three messages it had committed (their commit
// reported an error but reached the WAL) with the refused ones: their
// rows are in the orphan, so in agentd's divert, and in Hermes' own
// sessions/s1.jsonl. Each appears once in the store. (The agent starts
// after the unlink, so the writer has diverted before it is frozen.)
func TestHermesGuardsRowInBothTrails(t *testing.T) {
	home, db := testHome(t)
	w := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.Redivert = 3 })
	w.WaitAcks(t, 30)
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	hermestest.Eventually(t, "diverted acks", 10*time.Second, func() bool { return countDiverted(w.Acks(t)) >= 5 })
	a := startAgent(t, home, nil)
	inc := resolved(t, a, db, journal.KindSidecarLost)
	waitExit(t, w, 20*time.Second)
	if dir := checkOneCapture(t, db); dir != inc.Detail.CapturePath {
		t.Fatalf("the capture left is %s, the incident's is %s", dir, inc.Detail.CapturePath)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
}
