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
	"github.com/stateguard/stateguard/recovery"
)

// A tool that rewrites the live main in place and has exited before the
// agent could read its fds from /proc (dd of a small store takes a few
// milliseconds): the agent cannot see it hold the main and no sidecar,
// so it cannot tell it from a connection that checkpointed and exited.
// What protects the store then is what the files show, not the tool: a
// -wal with frames at the path that the new main content would be paired
// with. The store must come out as with a tool that was caught: the
// writer frozen and killed (not thawed: it would commit on top of the new
// content), the restored store whole, every row the writer acknowledged
// in it at most once, and the ones missing kept by the divert as rolled
// back by the restore, nobody left stopped.
//
// The agent's look at the writer is held (the worker's inspection lock,
// which the write's handler takes before it reads /proc) until the tool
// has exited and been reaped. The live writer is stopped by the test just
// before the tool starts, as the agent's freeze at its first write would
// stop it within a millisecond: the held look must not let it commit on
// top of the new content, which the agent would never allow.
func TestRewriterGoneBeforeLookedAt(t *testing.T) {
	needFanotify(t)
	for _, tc := range []struct{ name, script string }{
		// Opened read-write, as a connection opens it: not held at the
		// open, not truncated; nothing names it a rewriter.
		{"dd 1<>", "dd if=backup.db bs=4096 conv=notrunc status=none 1<>state.db"},
		// Truncating: confirmed by the gate's hold or the cut, gone or not.
		{"cp", "cp backup.db state.db"},
		// A restore that removes the sidecars after the copy: gone by the
		// time the write is looked at, with no -wal at the path. The
		// gate held the cp's open while the live WAL was there, so it is
		// a rewrite with the gate's cut, not the sidecar_lost that would
		// replay back every row the restore rolled back.
		{"cp && rm sidecars", "cp backup.db state.db && rm -f state.db-wal state.db-shm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var gone bool
			var writer *hermestest.Writer
			var store string
			inc := toolScenarioAround(t, tc.script, journal.KindRewritten, hostWriter, hermestest.WriterOptions{CheckpointEvery: -1},
				func(a *Agent, db string, w *hermestest.Writer, run func()) {
					writer, store = w, db
					wk := a.worker(db)
					wk.rws.inspecting.Lock()
					if err := syscall.Kill(w.Pid, syscall.SIGSTOP); err != nil {
						wk.rws.inspecting.Unlock()
						t.Fatal(err)
					}
					deadline := time.Now().Add(10 * time.Second)
					for hermestest.StateOf(w.Pid) != 'T' && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					run() // sh waits for the tool, and is reaped: both are gone
					wk.rws.inspecting.Unlock()
					gone = true
				})
			if !gone {
				t.Fatal("the tool did not run with the agent's look held")
			}
			// Nothing the writer acknowledged vanishes: a row is in the
			// store once, or the restore rolled it back on purpose (it
			// was committed after the backup, before the tool) and the
			// divert keeps it, replayable on request.
			rows := dbRows(t, store)
			for _, ack := range writer.Acks(t) {
				if n := rows[hermestest.MessageContent(ack.Session, ack.Seq)]; n > 1 {
					t.Fatalf("row %d present %d times", ack.Seq, n)
				}
			}
			rep, err := recovery.ReadDivert(inc.Detail.DivertDir)
			if err != nil {
				t.Fatal(err)
			}
			if miss := missingAcks(writer.Acks(t), rows); len(miss) > rep.PreReplacementRows {
				t.Fatalf("rows %v missing from the store, the divert keeps %d rolled back", miss, rep.PreReplacementRows)
			}
			t.Logf("rewriter %+v confirmed %v; salvage %+v", inc.Detail.Rewriter, inc.Detail.RewriteConfirmed, inc.Detail.Salvage)
		})
	}
}

// The same tool, gone before it was looked at, over a store whose -wal a
// TRUNCATE checkpoint emptied: no frame is left for the new content to be
// paired with, so the write was taken for a connection's checkpoint and
// the writer thawed. But the live writer's page cache is of the old
// content, trusted for as long as the -shm's wal-index header is
// unchanged, and the rewrite changes no byte of it: its next commit would
// put pages of the old content on top of the new. A checkpoint that wrote
// the main changes that header or the backfill mark; unchanged since the
// check before the write, the write was a rewrite: the incident opens and
// the writer is killed. Before, no incident opened (the writer thawed).
func TestRewriterGoneWithAnEmptyWAL(t *testing.T) {
	needFanotify(t)
	cli, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("the sqlite3 CLI is not installed (Debian: apt-get install sqlite3): it empties the WAL here")
	}
	home, db := testHome(t)
	a := startAgent(t, home, nil) // no guard: its read of the WAL would keep TRUNCATE from emptying it
	w := hostWriter(t, home, db, hermestest.WriterOptions{Rate: 200, Count: 80, Linger: true, CheckpointEvery: -1})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 40)
	backup := filepath.Join(home, "backup.db")
	walBackup(t, db, backup)
	w.WaitAcks(t, 80) // then it lingers with the store open, idle
	if out, err := exec.Command(cli, db, "PRAGMA wal_checkpoint(TRUNCATE)").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "0|0|0" {
		t.Fatalf("sqlite3 wal_checkpoint(TRUNCATE): %v: %q, want 0|0|0", err, out)
	}
	if st, err := os.Stat(db + "-wal"); err != nil || st.Size() != 0 {
		t.Fatalf("-wal after TRUNCATE: %v %v, want an empty file", st, err)
	}
	wk := a.worker(db)
	if err := wk.do(context.Background(), func() { wk.check(time.Now()) }); err != nil {
		t.Fatal(err)
	}
	var noted time.Time
	if err := wk.do(context.Background(), func() {
		wk.rws.mu.Lock()
		noted = wk.rws.shm[0].at
		wk.rws.mu.Unlock()
	}); err != nil || noted.IsZero() {
		t.Fatalf("no -shm mark noted by the check (%v)", err)
	}
	// The write's event must come after the note by more than the margin
	// that keeps a note taken between a write and its event out.
	hermestest.Eventually(t, "the note to be older than its margin", 10*time.Second, func() bool {
		return time.Since(noted) > 2*shmMarkMargin
	})

	wk.rws.inspecting.Lock()
	if err := syscall.Kill(w.Pid, syscall.SIGSTOP); err != nil {
		wk.rws.inspecting.Unlock()
		t.Fatal(err)
	}
	hermestest.Eventually(t, "the writer stopped", 10*time.Second, func() bool { return hermestest.StateOf(w.Pid) == 'T' })
	tool := exec.Command("sh", "-c", "dd if=backup.db bs=4096 conv=notrunc status=none 1<>state.db")
	tool.Dir = home
	out, err := tool.CombinedOutput()
	wk.rws.inspecting.Unlock()
	if err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != journal.KindRewritten || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q, want rewritten resolved", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
	hermestest.Eventually(t, "no incident open", 30*time.Second, func() bool {
		incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db, OpenOnly: true})
		return err == nil && len(incs) == 0
	})
	if err := storeWhole(db); err != nil {
		t.Fatal(err)
	}
}

// The other side of TestRewriterGoneWithAnEmptyWAL: a connection whose
// TRUNCATE checkpoint wrote the main and emptied the -wal, gone before
// the agent looked at it, is no rewriter. Its checkpoint restarted the
// wal-index header, so the writers frozen at its write are thawed and no
// incident opens (with the -shm judged unchanged, this test's writer
// would be killed by a rewritten incident).
func TestCheckpointerGoneWithAnEmptyWAL(t *testing.T) {
	needFanotify(t)
	cli, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("the sqlite3 CLI is not installed (Debian: apt-get install sqlite3): it checkpoints here")
	}
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hostWriter(t, home, db, hermestest.WriterOptions{Rate: 200, Count: 60, Linger: true, CheckpointEvery: -1})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 60)
	wk := a.worker(db)
	var noted time.Time
	if err := wk.do(context.Background(), func() {
		wk.check(time.Now())
		wk.rws.mu.Lock()
		noted = wk.rws.shm[0].at
		wk.rws.mu.Unlock()
	}); err != nil || noted.IsZero() {
		t.Fatalf("no -shm mark noted by the check (%v)", err)
	}
	hermestest.Eventually(t, "the note to be older than its margin", 10*time.Second, func() bool {
		return time.Since(noted) > 2*shmMarkMargin
	})

	wk.rws.inspecting.Lock() // the checkpointer is gone when its write is looked into
	out, err := exec.Command(cli, db, "PRAGMA wal_checkpoint(TRUNCATE)").CombinedOutput()
	wk.rws.inspecting.Unlock()
	if err != nil || strings.TrimSpace(string(out)) != "0|0|0" {
		t.Fatalf("sqlite3 wal_checkpoint(TRUNCATE): %v: %q, want 0|0|0", err, out)
	}
	if st, err := os.Stat(db + "-wal"); err != nil || st.Size() != 0 {
		t.Fatalf("-wal after TRUNCATE: %v %v, want an empty file", st, err)
	}
	// The check after the write has judged it once nothing is pending.
	hermestest.Eventually(t, "the checkpointer's write judged", 30*time.Second, func() bool {
		var judged bool
		_ = wk.do(context.Background(), func() {
			wk.check(time.Now())
			wk.rws.mu.Lock()
			judged = len(wk.rws.pending) == 0 && len(wk.rws.active) == 0
			wk.rws.mu.Unlock()
		})
		return judged
	})
	if incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db}); err != nil || len(incs) > 0 {
		t.Fatalf("incidents after a connection's checkpoint: %+v %v", incs, err)
	}
	if st := hermestest.StateOf(w.Pid); st == 'T' {
		t.Fatal("the writer is left stopped")
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if miss := missingAcks(w.Acks(t), dbRows(t, db)); len(miss) > 0 {
		t.Fatalf("%d acknowledged rows missing from the store", len(miss))
	}
}
