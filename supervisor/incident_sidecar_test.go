package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/incident"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// -wal and -shm are unlinked under a live writer, then a second writer
// opens the store and creates new ones: the first is killed without a
// checkpoint, the shared main stays healthy, and the capture holds every
// row the first writer acknowledged.
func TestSidecarLostIncident(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s1", Rate: 300})
	waitHolder(t, a, db, w1.Pid)

	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Rate: 300})

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved || inc.Kind != journal.KindSidecarLost {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	waitExit(t, w1, 10*time.Second)
	if !killedBy(w1.Cmd.ProcessState, syscall.SIGKILL) {
		t.Fatalf("first writer ended with %v, want SIGKILL (policy kill)", w1.Cmd.ProcessState)
	}
	rows := captureRows(t, inc.Detail.CapturePath)
	acks := w1.Acks(t)
	if miss := missingAcks(acks, rows); len(miss) > 0 {
		t.Fatalf("%d of %d acknowledged rows of the first writer missing from the capture: %v", len(miss), len(acks), miss)
	}
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	healthy := dbRows(t, db) // integrity_check ok
	// Both writers' rows end up in the healthy store exactly once: the
	// second's directly, the first's by replay.
	checkExactlyOnce(t, w2.Acks(t), healthy, time.Time{}, time.Time{})
	checkExactlyOnce(t, acks, healthy, time.Time{}, time.Time{})
}

func killedBy(ps *os.ProcessState, sig syscall.Signal) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// A restore renames a new main over the path but leaves the old -wal and
// -shm: they are quarantined before the next writer opens the store, so
// that writer's store holds none of the old WAL's rows.
func TestMispairedIncident(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s1", Rate: 300, CheckpointEvery: -1})
	waitHolder(t, a, db, w1.Pid)
	hermestest.Eventually(t, "acks older than the replace margin", 10*time.Second, func() bool {
		acks := w1.Acks(t)
		return len(acks) > 0 && time.Since(time.Unix(0, int64(acks[0].Timestamp*1e9))) > 2*incident.ReplaceMargin
	})

	oldWAL := inode(t, db+"-wal")
	oldSHM := inode(t, db+"-shm")
	hermestest.RenameFreshOver(t, db)
	renamed := time.Now()
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.Kind != journal.KindMispaired || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	if len(inc.Detail.Quarantined) == 0 {
		t.Fatal("no sidecar was quarantined")
	}
	waitExit(t, w1, 10*time.Second)
	// The old sidecars are gone from the path (the divert's read-only
	// open may have created new, empty ones).
	if inode(t, db+"-wal") == oldWAL || inode(t, db+"-shm") == oldSHM {
		t.Fatal("the old generation's sidecars are still at the path after quarantine")
	}
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 20})
	waitExit(t, w2, 10*time.Second)
	healthy := dbRows(t, db)
	// The old WAL was never recovered into the new main: its rows from
	// before the restore are not there; the ones committed after it came
	// back once, by replay.
	checkExactlyOnce(t, w1.Acks(t), healthy, renamed, renamed.Add(-incident.ReplaceMargin-100*time.Millisecond))
	checkExactlyOnce(t, w2.Acks(t), healthy, time.Time{}, time.Time{})
	rows := captureRows(t, inc.Detail.CapturePath)
	if miss := missingAcks(w1.Acks(t), rows); len(miss) > 0 {
		t.Fatalf("%d acknowledged rows of the old writer missing from the capture", len(miss))
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A writer created the store, so its schema and rows live only in the
// -wal; the -wal is unlinked under it. The store at the path has no
// tables now: the incident diverts every row and its replay waits,
// without spending attempts, until Hermes (a new writer) creates the
// schema again; then it resolves at once and every row is there.
func TestSidecarLostTakesTheSchema(t *testing.T) {
	home := t.TempDir()
	db := filepath.Join(home, "state.db")
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, home, nil)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Session: "s1", Rate: 300})
	waitHolder(t, a, db, w1.Pid)
	hermestest.Eventually(t, "some acks", 10*time.Second, func() bool { return len(w1.Acks(t)) >= 20 })
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	waitExit(t, w1, 10*time.Second)

	ctx := context.Background()
	hermestest.Eventually(t, "the replay to wait for the schema", 30*time.Second, func() bool {
		jobs, err := a.journal.ListJobs(ctx, journal.JobFilter{Store: db})
		return err == nil && len(jobs) == 1 && strings.Contains(jobs[0].LastError, "waiting for Hermes to create")
	})
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, Session: "s2", Rate: 300})
	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
	if inc.State != journal.StateResolved || inc.Kind != journal.KindSidecarLost {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	healthy := dbRows(t, db)
	checkExactlyOnce(t, w1.Acks(t), healthy, time.Time{}, time.Time{})
	checkExactlyOnce(t, w2.Acks(t), healthy, time.Time{}, time.Time{})
}
