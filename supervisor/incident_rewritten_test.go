//go:build linux

package supervisor

import (
	"context"
	"database/sql"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/modwatch"
)

// needFanotify skips where the agent would get no writer pids (not root).
func needFanotify(t *testing.T) {
	t.Helper()
	mw, err := modwatch.New(func(modwatch.Event) {})
	if errors.Is(err, modwatch.ErrUnsupported) {
		t.Skipf("no fanotify: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	_ = mw.Close()
}

// The in-place tools of issue 13's table, with the real tools: each
// rewrites the live main's inode with a backup taken seconds earlier
// while a writer commits. The writer is frozen at the tool's first write
// and killed once the tool is done (its page cache is stale), the old
// -wal/-shm are moved out of the path, and the rows it committed while
// the tool wrote are salvaged from the old WAL's page images (or
// counted). A writer started after the tool returned commits into a
// healthy store: every row it acknowledges is there exactly once, the
// store passes integrity_check and the FTS5 integrity check, and no
// process is left stopped.
func TestRewrittenInPlace(t *testing.T) {
	needFanotify(t)
	for _, tc := range []struct{ name, need, script string }{
		{"cp", "cp", "cp backup.db state.db"},
		{"rsync --inplace", "rsync", "rsync --inplace backup.db state.db"},
		{"cp, then rm the sidecars", "cp", "cp backup.db state.db && rm -f state.db-wal state.db-shm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.need); err != nil {
				t.Skipf("%s not installed", tc.need)
			}
			rewriteScenario(t, tc.script)
		})
	}
}

func rewriteScenario(t *testing.T, script string) {
	home, db := testHome(t)
	a := startAgent(t, home, nil)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 300) // a store of some size: the old WAL must not fit the backup by chance
	walBackup(t, db, filepath.Join(home, "backup.db"))
	w.AcksGrow(t, 40) // rows the restore rolls back on purpose

	start := time.Now()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = home
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	done := time.Now()

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != journal.KindRewritten || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	if inc.Detail.Rewriter == nil || len(inc.Detail.Holders) != 1 || inc.Detail.Holders[0].PID != w.Pid {
		t.Fatalf("rewriter %+v, holders %+v: want the tool's process and the writer", inc.Detail.Rewriter, inc.Detail.Holders)
	}
	waitExit(t, w, 10*time.Second)

	// A gateway started after the restore commits into the restored store.
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Count: 30})
	acks2 := w2.WaitAcks(t, 30)
	waitExit(t, w2, 10*time.Second)
	rows := dbRows(t, db)
	checkFTS(t, db)
	checkExactlyOnce(t, acks2, rows, time.Time{}, time.Time{})

	// What the first writer acknowledged once the tool had begun: in the
	// store exactly once, or counted as lost in the incident.
	var during []hermestest.Ack
	for _, ack := range w.Acks(t) {
		if time.Unix(0, int64(ack.Timestamp*1e9)).After(start) {
			during = append(during, ack)
		}
	}
	lost := 0
	if inc.Detail.Salvage != nil {
		lost = inc.Detail.Salvage.LostMessages
	}
	if miss := missingAcks(during, rows); len(miss) > lost {
		t.Fatalf("%d rows acknowledged while the tool ran (%v) are missing, %d counted lost", len(miss), miss, lost)
	}
	for _, ack := range during {
		if n := rows[hermestest.MessageContent(ack.Session, ack.Seq)]; n > 1 {
			t.Fatalf("row %d present %d times", ack.Seq, n)
		}
	}
	if st := hermestest.StateOf(w.Pid); st == 'T' {
		t.Fatal("the writer is left stopped")
	}
	t.Logf("tool ran %v; %d rows acknowledged while it ran; rewriter %+v; salvage %+v", done.Sub(start), len(during), inc.Detail.Rewriter, inc.Detail.Salvage)
}

// checkFTS runs the FTS5 integrity check of Hermes' full-text tables.
func checkFTS(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tbl := range []string{"messages_fts", "messages_fts_trigram"} {
		if _, err := db.Exec("INSERT INTO " + tbl + "(" + tbl + ") VALUES('integrity-check')"); err != nil {
			t.Fatalf("FTS5 integrity check of %s in %s: %v", tbl, path, err)
		}
	}
}

// walBackup is a consistent backup of db in WAL mode, as a copy of a
// Hermes store is: VACUUM INTO, then the WAL mode bytes set in its header.
func walBackup(t *testing.T, db, dst string) {
	t.Helper()
	hermestest.VacuumInto(t, db, dst)
	b, err := sql.Open("sqlite", "file:"+dst)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mode string
	if err := b.QueryRow("PRAGMA journal_mode=WAL").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("backup %s: journal mode %q %v", dst, mode, err)
	}
}

// A SQLite connection the holder cache does not know yet (started after
// the last scan) writes the main in its checkpoints: it holds the -wal and
// -shm, so it is no rewriter. No incident opens, nobody stays stopped,
// and every row both writers acknowledge is in the store once.
func TestCheckpointOfANewConnectionIsNoRewrite(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Reconcile, o.Guard = time.Hour, true })
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 100, Count: 150, Linger: true})
	waitHolder(t, a, db, w1.Pid)
	// Checkpoints every few commits, from its first second on.
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 60, CheckpointEvery: 3})
	acks2 := w2.WaitAcks(t, 60)
	// Usually its first checkpoint was looked into and it was vouched
	// for; when a scan saw it first, the cache vouched.
	wk := a.worker(db)
	wk.rws.mu.Lock()
	_, vouched := wk.rws.vouched[w2.Pid]
	wk.rws.mu.Unlock()
	t.Logf("new connection vouched for by its first write: %v", vouched)
	waitExit(t, w2, 30*time.Second)
	acks1 := w1.WaitAcks(t, 150)
	if st := hermestest.StateOf(w1.Pid); st == 'T' {
		t.Fatal("the first writer is left stopped")
	}
	w1.Kill()
	waitExit(t, w1, 30*time.Second)
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(incs) > 0 {
		t.Fatalf("incident %s (%s) opened for a connection's checkpoints: %s", incs[0].ID, incs[0].Kind, incs[0].Detail.Error)
	}
	rows := dbRows(t, db)
	checkExactlyOnce(t, append(acks1, acks2...), rows, time.Time{}, time.Time{})
}
