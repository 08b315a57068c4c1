//go:build linux

package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// Issue 30's faults, made while agentd is stopped and a writer goes on
// committing: a backup copied over the live main in place (cp, rsync
// --inplace), and the main moved aside with the backup copied in its
// place. The next agentd finds each in its first look (the WAL does not
// fit the main; the writer holds a main no longer at the path), freezes
// the writer before it checkpoints again, and cuts the replay at the WAL
// position the stopping agent journaled: every row acknowledged after
// the fault is in the store exactly once, the rows the backup lacks that
// were committed before the agent stopped stay rolled back, and the
// store passes its integrity checks.
func TestFaultsWhileDown(t *testing.T) {
	for _, tc := range []struct {
		name, need, script string
		kind               journal.Kind
		evidence           string
	}{
		{"cp", "cp", "cp backup.db state.db", journal.KindRewritten, "the main"},
		// --ignore-times: rsync skips a file of the same size and mtime
		// second, which a backup taken a moment after the store was
		// created can be.
		{"rsync --inplace", "rsync", "rsync --inplace --ignore-times backup.db state.db", journal.KindRewritten, "the main"},
		{"mv aside, then cp", "cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired, "no longer at the path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.need); err != nil {
				t.Skipf("no %s: %v", tc.need, err)
			}
			faultWhileDown(t, tc.script, tc.kind, tc.evidence)
		})
	}
}

func faultWhileDown(t *testing.T, script string, kind journal.Kind, evidence string) {
	home, db := testHome(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	withState := func(o *Options) { o.StateDir, o.Guard = stateDir, true }
	a := startAgent(t, home, withState)
	// No checkpoint, its own or SQLite's automatic one: what it commits
	// while agentd is down stays in the WAL for the next agent to find,
	// in the WAL whose position the stop journaled. (A writer that
	// checkpoints after a rewrite while no agent runs corrupts the copy
	// before any agent can look; a 1000-page autocheckpoint came about
	// once a second here.)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 20)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	restored := dbRows(t, backup)
	w.AcksGrow(t, 15) // rolled back by the restore on purpose

	beforeStop := len(w.Acks(t)) // committed before the stopping agent's position
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w.AcksGrow(t, 5) // committed while down, before the fault
	// The writer is stopped for the fault itself, so each ack is from
	// before it or after it.
	if err := syscall.Kill(w.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = home
	out, err := cmd.CombinedOutput()
	if kerr := syscall.Kill(w.Pid, syscall.SIGCONT); kerr != nil {
		t.Fatal(kerr)
	}
	if err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	afterFault := len(w.Acks(t))
	w.AcksGrow(t, 15) // committed after the fault: never lost

	b := startAgent(t, home, withState)
	inc := waitIncident(t, b, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != kind || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q, want %s resolved", inc.ID, inc.Kind, inc.State, inc.Detail.Error, kind)
	}
	if !strings.Contains(inc.Detail.Evidence, "found at start") || !strings.Contains(inc.Detail.Evidence, evidence) {
		t.Errorf("incident %s: evidence %q, want it found at start by %q", inc.ID, inc.Detail.Evidence, evidence)
	}
	if c := inc.Detail.WALCut; c == nil || c.Source != "journal" {
		t.Errorf("incident %s: wal cut %+v, want the position the stopping agent journaled", inc.ID, c)
	}
	waitExit(t, w, 10*time.Second)
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
	rows := dbRows(t, db)
	var lost, dup, readded []int64
	for i, ack := range w.Acks(t) {
		c := hermestest.MessageContent(ack.Session, ack.Seq)
		switch n := rows[c]; {
		case restored[c] > 0 && n != 1:
			lost = append(lost, ack.Seq) // the backup's own rows, once
		case i >= afterFault && n != 1:
			if n == 0 {
				lost = append(lost, ack.Seq)
			} else {
				dup = append(dup, ack.Seq)
			}
		case i < beforeStop && restored[c] == 0 && n > 0:
			readded = append(readded, ack.Seq)
		}
	}
	if len(lost)+len(dup)+len(readded) > 0 {
		t.Fatalf("incident %s, cut %+v: lost %v, duplicated %v, rolled back before agentd stopped but re-added %v",
			inc.ID, inc.Detail.WALCut, lost, dup, readded)
	}
	if _, err := os.Stat(backup); err != nil {
		t.Fatal(err)
	}
}
