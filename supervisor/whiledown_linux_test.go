//go:build linux

package supervisor

import (
	"bytes"
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
	"github.com/stateguard/stateguard/store"
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
		cancelLocks        bool
	}{
		{"cp", "cp", "cp backup.db state.db", journal.KindRewritten, "the main", false},
		// --ignore-times: rsync skips a file of the same size and mtime
		// second, which a backup taken a moment after the store was
		// created can be.
		{"rsync --inplace", "rsync", "rsync --inplace --ignore-times backup.db state.db", journal.KindRewritten, "the main", false},
		{"mv aside, then cp", "cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired, "no longer at the path", false},
		// A writer whose POSIX locks on the main were cancelled (another
		// fd on the file closed: the last-closer hazard) holds no lock
		// that names the main it has under its new name; only the inode
		// journaled at the stop does.
		{"mv aside, then cp, locks cancelled", "cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired, "no longer at the path", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.need); err != nil {
				t.Skipf("no %s: %v", tc.need, err)
			}
			faultWhileDown(t, tc.script, tc.kind, tc.evidence, tc.cancelLocks)
		})
	}
}

func faultWhileDown(t *testing.T, script string, kind journal.Kind, evidence string, cancelLocks bool) {
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
	wo := hermestest.WriterOptions{DB: db, Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1}
	if cancelLocks {
		wo.CancelLocksEvery = 3
	}
	w := hermestest.StartWriter(t, wo)
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
	afterFault := faultUnderStoppedWriter(t, w, home, script)
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

// A main a checkpoint wrote while agentd was down is no rewrite, also
// when nothing in the wal-index says so: the last connection to close
// (one with PERSIST_WAL, as the agent's own are) checkpointed every frame,
// kept the -wal in place and removed the -shm, and the next opener
// rebuilt the wal-index from the -wal (the same salts, backfill mark 0,
// as journaled at the stop). The main's page 1 is one of the WAL's
// images: the look opens no incident and stops nobody.
func TestCheckpointWhileDownIsNoRewrite(t *testing.T) {
	home, db := testHome(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	withState := func(o *Options) { o.StateDir, o.Guard = stateDir, true }
	a := startAgent(t, home, withState)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200, CheckpointEvery: -1, AutoCheckpoint: -1})
	waitHolder(t, a, db, w1.Pid)
	w1.WaitAcks(t, 150) // enough to grow the database: page 1 is in the WAL
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	w1.Kill() // no checkpoint of its own
	waitExit(t, w1, 10*time.Second)
	checkpointByHand(t, db)
	if err := os.Remove(db + "-shm"); err != nil {
		t.Fatal(err)
	}
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1})
	w2.WaitAcks(t, 5)

	b := startAgent(t, home, withState)
	wk := b.worker(db)
	hermestest.Eventually(t, "the look at start", 20*time.Second, func() bool {
		var done bool
		_ = wk.do(ctx, func() { done = wk.down.done })
		return done
	})
	w2.AcksGrow(t, 10) // not stopped
	incs, err := b.journal.ListIncidents(ctx, journal.ListOptions{Store: db})
	if err != nil || len(incs) > 0 {
		t.Fatalf("incidents %+v (%v), want none", incs, err)
	}
	if p := b.downProblems(); len(p) > 0 {
		t.Fatalf("status problems %v, want none", p)
	}
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
}

// checkpointByHand does what a checkpoint of every committed frame does
// to the main: each page's newest image written in place, the file cut to
// the last commit's size. The -wal stays as it is.
func checkpointByHand(t *testing.T, db string) {
	t.Helper()
	wal, err := os.ReadFile(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.ParseWALHeader(wal)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := store.ReadWALCut(bytes.NewReader(wal), nil)
	if err != nil || cut.Frame == 0 {
		t.Fatalf("wal position %+v %v", cut, err)
	}
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs := store.WALFrameBytes(h.PageSize)
	var size uint32
	for i := int64(0); i < int64(cut.Frame); i++ {
		off := int64(store.WALHeaderSize) + i*fs
		fh, _ := store.ParseWALFrameHeader(wal[off:])
		if _, err := f.WriteAt(wal[off+store.WALFrameHeaderSize:off+fs], int64(fh.PageNumber-1)*int64(h.PageSize)); err != nil {
			t.Fatal(err)
		}
		if fh.IsCommit() {
			size = fh.CommitSize
		}
	}
	if err := f.Truncate(int64(size) * int64(h.PageSize)); err != nil {
		t.Fatal(err)
	}
}

// A restore made while agentd was down whose WAL is gone since (the
// sidecars removed, a writer started on the restored main with a WAL of
// its own): the main's change counter went back from the one journaled at
// the stop, but no WAL is left to show whether a live writer was left on
// the old content. Status says so, with the check to run; no incident
// opens and nobody is stopped.
func TestUndecidedWhileDownIsAStatusProblem(t *testing.T) {
	home, db := testHome(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	withState := func(o *Options) { o.StateDir, o.Guard = stateDir, true }
	a := startAgent(t, home, withState)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200, CheckpointEvery: 10})
	waitHolder(t, a, db, w1.Pid)
	w1.WaitAcks(t, 30)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w1.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// An older backup: its change counter (bytes 24 and 92 of the
	// header, equal for a valid in-header size) below any the store had.
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	copy(b[24:28], []byte{0, 0, 0, 0})
	copy(b[92:96], []byte{0, 0, 0, 0})
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(db + "-wal")
	os.Remove(db + "-shm")
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Rate: 100, CheckpointEvery: -1, AutoCheckpoint: -1})
	w2.WaitAcks(t, 5)

	bg := startAgent(t, home, withState)
	hermestest.Eventually(t, "the undecided store in status", 20*time.Second, func() bool { return len(bg.downProblems()) > 0 })
	p := bg.downProblems()
	if len(p) != 1 || p[0].Path != db || !strings.Contains(p[0].Err.Error(), "change counter went back") || !strings.Contains(p[0].Hint, "integrity_check") {
		t.Fatalf("status problems %v, want %s's counter gone back with the check to run", p, db)
	}
	w2.AcksGrow(t, 10) // not stopped
	if incs, err := bg.journal.ListIncidents(ctx, journal.ListOptions{Store: db}); err != nil || len(incs) > 0 {
		t.Fatalf("incidents %+v (%v), want none", incs, err)
	}
}

// faultUnderStoppedWriter runs script in home by sh with the writer
// stopped, so each of its acks is from before the fault or after it,
// and returns how many it had acknowledged by then.
func faultUnderStoppedWriter(t *testing.T, w *hermestest.Writer, home, script string) int {
	t.Helper()
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
	return len(w.Acks(t))
}
