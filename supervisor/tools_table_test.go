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
	"github.com/stateguard/stateguard/recovery"
)

// needFanotify skips where the agent would get no writer pids (not root).
func needFanotify(t *testing.T) {
	t.Helper()
	mw, err := modwatch.New(func(modwatch.Event) {}, modwatch.Config{Log: discardLogger()})
	if errors.Is(err, modwatch.ErrUnsupported) {
		t.Skipf("no fanotify: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Close()
	if !mw.Attributed() {
		t.Skip("no writer pids (no CAP_SYS_ADMIN)")
	}
}

// Issue 13's table, row by row, with the real tools: each restores a
// backup taken seconds earlier over a store a writer commits into. The
// in-place ones rewrite the live main's inode (rewritten: the writer is
// frozen at the first write and killed once the tool is done, the old
// -wal/-shm moved out of the path, the rows it committed while the tool
// wrote salvaged from the old WAL's page images or counted); the
// rename-style ones leave the old generation to its writer (mispaired).
// Then a writer started after the tool returned commits into a healthy
// store: every row acknowledged after the tool returned is there exactly
// once, integrity_check and the FTS5 integrity check pass, and no process
// is left stopped.
func TestToolTable(t *testing.T) {
	needFanotify(t)
	for _, tc := range []struct {
		name, need, script string
		kind               journal.Kind // "": no incident (a SQLite-level restore)
	}{
		{"cp", "cp", "cp backup.db state.db", journal.KindRewritten},
		{"rsync --inplace", "rsync", "rsync --inplace backup.db state.db", journal.KindRewritten},
		{"mv aside, then cp", "cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired},
		{"cp, then rm the sidecars", "cp", "cp backup.db state.db && rm -f state.db-wal state.db-shm", journal.KindRewritten},
		// dd of= opens the main O_WRONLY|O_CREAT, no O_TRUNC: held at its
		// open like cp.
		{"dd conv=notrunc", "dd", "dd if=backup.db of=state.db bs=4096 conv=notrunc status=none", journal.KindRewritten},
		{"rsync", "rsync", "rsync backup.db state.db", journal.KindMispaired},
		{"tar -xf", "tar", tarScript, journal.KindMispaired},
		{"git checkout", "git", gitScript, journal.KindMispaired},
		{"sqlite3 .restore", "sqlite3", "sqlite3 state.db \".timeout 5000\" \".restore backup.db\"", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := exec.LookPath(tc.need); err != nil {
				t.Skipf("%s not installed", tc.need)
			}
			inc := toolScenario(t, tc.script, tc.kind, hostWriter, hermestest.WriterOptions{})
			wantConfirmed(t, inc)
		})
	}
}

// A tool that opens the live main read-write without truncating, as
// every SQLite connection does (here the shell's 1<> redirection, dd
// writing to it): the gate cannot tell it from a connection opening the
// store, so it lets the open through, and the tool is caught at its first
// write (FAN_MODIFY): the writers are frozen then, before a commit of
// theirs can follow the tool's first page. What a checkpoint already in
// flight writes in the millisecond before the freeze lands in the new
// content (rewrite.raced, BenchmarkCpOverCheckpointingWriter/first-write);
// so the writer here leaves checkpoints to SQLite's own auto-checkpoint,
// which makes this row's outcome the detection's, not that window's.
//
// dd writes a store this size in a few milliseconds and may be gone
// before the agent reads its fds: the rewrite is then unconfirmed (it
// might have been a connection that checkpointed and exited), and its
// capture keeps every row the live store lacks; nothing acknowledged
// after dd returned is lost either way.
func TestToolTableReadWriteOpen(t *testing.T) {
	needFanotify(t)
	inc := toolScenario(t, "dd if=backup.db bs=4096 conv=notrunc status=none 1<>state.db", journal.KindRewritten, hostWriter,
		hermestest.WriterOptions{CheckpointEvery: -1})
	if exe := inc.Detail.Rewriter.Exe; inc.Detail.RewriteConfirmed && filepath.Base(exe) != "dd" {
		t.Fatalf("rewriter %+v: want dd, the process that wrote (the shell only opened the main)", inc.Detail.Rewriter)
	}
}

// The gateway in a container (own mount and pid namespaces, the profile
// home bind-mounted at another path), then each incident fault on the
// host: the writer is found by inode, frozen and released by its host
// pid, and nothing it acknowledged after the tool returned is lost.
func TestToolTableContainer(t *testing.T) {
	needFanotify(t)
	for _, tc := range []struct {
		name, script string
		kind         journal.Kind
	}{
		{"cp", "cp backup.db state.db", journal.KindRewritten},
		{"mv aside, then cp", "mv state.db state.db.old && cp backup.db state.db", journal.KindMispaired},
		{"cp, then rm the sidecars", "cp backup.db state.db && rm -f state.db-wal state.db-shm", journal.KindRewritten},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inc := toolScenario(t, tc.script, tc.kind, containerWriter, hermestest.WriterOptions{})
			wantConfirmed(t, inc)
		})
	}
}

// wantConfirmed fails unless a rewritten incident names its rewriter as
// surely no connection: cp, dd of= and rsync --inplace are always
// confirmed, by the gate's hold of their open or by the truncation.
func wantConfirmed(t *testing.T, inc journal.Incident) {
	t.Helper()
	if inc.Kind == journal.KindRewritten && !inc.Detail.RewriteConfirmed {
		t.Fatalf("rewriter %+v not confirmed: want the tool's process, confirmed", inc.Detail.Rewriter)
	}
}

// hostWriter and containerWriter start the live writer of a scenario.
func hostWriter(t *testing.T, home, db string, o hermestest.WriterOptions) *hermestest.Writer {
	o.DB = db
	return hermestest.StartWriter(t, o)
}

func containerWriter(t *testing.T, home, db string, o hermestest.WriterOptions) *hermestest.Writer {
	volume := t.TempDir()
	o.DB = filepath.Join(volume, filepath.Base(db))
	return hermestest.StartContainerWriter(t, o, home, volume)
}

const tarScript = "mkdir t && cp backup.db t/state.db && tar -cf b.tar -C t state.db && tar -xf b.tar"

// gitScript commits the backup as state.db in a repository of its own,
// then checks it out over the live store (git unlinks the file it
// replaces and creates a new one).
const gitScript = "mkdir g && cp backup.db g/state.db && git -C g init -q && git -C g add state.db && " +
	"git -C g -c user.name=sg -c user.email=sg@example.invalid commit -qm backup && " +
	"git --git-dir=g/.git --work-tree=. checkout -f HEAD -- state.db"

func toolScenario(t *testing.T, script string, kind journal.Kind,
	start func(t *testing.T, home, db string, o hermestest.WriterOptions) *hermestest.Writer, o hermestest.WriterOptions) journal.Incident {
	return toolScenarioAround(t, script, kind, start, o, nil)
}

// toolScenarioAround is toolScenario with around, when set, running the
// tool: it calls run (which runs it) with the agent and the live writer.
func toolScenarioAround(t *testing.T, script string, kind journal.Kind,
	start func(t *testing.T, home, db string, o hermestest.WriterOptions) *hermestest.Writer, o hermestest.WriterOptions,
	around func(a *Agent, db string, w *hermestest.Writer, run func())) journal.Incident {
	return toolScenarioWith(t, script, kind, start, o, guardOn, around)
}

// toolScenarioWith is toolScenarioAround with the agent's options set by
// opts.
func toolScenarioWith(t *testing.T, script string, kind journal.Kind,
	start func(t *testing.T, home, db string, o hermestest.WriterOptions) *hermestest.Writer, o hermestest.WriterOptions,
	opts func(*Options), around func(a *Agent, db string, w *hermestest.Writer, run func())) journal.Incident {
	home, db := testHome(t)
	a := startAgent(t, home, opts)
	o.Rate, o.Linger = 200, true
	w := start(t, home, db, o)
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 300) // a store of some size: the old WAL must not fit the backup by chance
	walBackup(t, db, filepath.Join(home, "backup.db"))
	w.AcksGrow(t, 40) // rows the restore rolls back on purpose

	var began, done time.Time
	run := func() {
		began = time.Now()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = home
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
		done = time.Now()
	}
	if around != nil {
		around(a, db, w, run)
	} else {
		run()
	}

	var inc journal.Incident
	if kind != "" {
		inc = waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
		if inc.Kind != kind || inc.State != journal.StateResolved {
			t.Fatalf("incident %s: kind %s state %s error %q, want %s resolved", inc.ID, inc.Kind, inc.State, inc.Detail.Error, kind)
		}
		if len(inc.Detail.Holders) != 1 || inc.Detail.Holders[0].PID != w.Pid {
			t.Fatalf("holders %+v: want the writer", inc.Detail.Holders)
		}
		if kind == journal.KindRewritten && (inc.Detail.Rewriter == nil || inc.Detail.Rewriter.PID <= 0) {
			t.Fatalf("rewriter %+v: want the tool's process", inc.Detail.Rewriter)
		}
		if kind == journal.KindRewritten && !inc.Detail.Holders[0].Frozen {
			t.Fatalf("holder %+v: want the writer frozen when the rewrite was seen", inc.Detail.Holders[0])
		}
		waitExit(t, w, 10*time.Second)
	} else {
		w.AcksGrow(t, 20) // it goes on committing into the restored store
		w.Kill()
		waitExit(t, w, 10*time.Second)
	}

	// A gateway started after the restore commits into the restored store.
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "after", Count: 30})
	acks2 := w2.WaitAcks(t, 30)
	waitExit(t, w2, 10*time.Second)
	waitSettled(t, a, db)
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
	if err != nil || (kind == "" && len(incs) > 0) || (kind != "" && len(incs) != 1) {
		t.Fatalf("incidents %+v (%v), want %d", incs, err, min(1, len(kind)))
	}
	rows := dbRows(t, db)
	checkFTS(t, db)
	checkExactlyOnce(t, acks2, rows, time.Time{}, time.Time{})

	// What the first writer acknowledged after the tool returned: in the
	// store exactly once. While it ran: never twice.
	var during, after []hermestest.Ack
	for _, ack := range w.Acks(t) {
		switch ts := time.Unix(0, int64(ack.Timestamp*1e9)); {
		case ts.After(done):
			after = append(after, ack)
		case ts.After(began):
			during = append(during, ack)
		}
	}
	checkExactlyOnce(t, after, rows, time.Time{}, time.Time{})
	lost := 0
	if inc.Detail.Salvage != nil {
		lost = inc.Detail.Salvage.LostMessages
	}
	// A SQLite-level restore overwrites what was committed while it ran,
	// on purpose; a rewrite's rows are salvaged or counted, but for those
	// committed before the rewrite's cut (the WAL at the tool's open, as
	// root): the tool may take a while to open the main (rsync forks its
	// receiver), and what was committed by then is what it overwrites.
	if miss := missingAcks(afterCut(during, inc.Detail.WALCut), rows); kind == journal.KindRewritten && len(miss) > lost {
		t.Fatalf("%d rows acknowledged while the tool ran (%v) are missing, %d counted lost (cut %+v)", len(miss), miss, lost, inc.Detail.WALCut)
	}
	for _, ack := range during {
		if n := rows[hermestest.MessageContent(ack.Session, ack.Seq)]; n > 1 {
			t.Fatalf("row %d present %d times", ack.Seq, n)
		}
	}
	if st := hermestest.StateOf(w.Pid); st == 'T' {
		t.Fatal("the writer is left stopped")
	}
	t.Logf("tool ran %v; acknowledged while it ran %d, after %d; incident %s %s; salvage %+v",
		done.Sub(began), len(during), len(after), inc.Kind, inc.State, inc.Detail.Salvage)
	return inc
}

// afterCut is the acks stamped after a rewritten incident's cut time: a
// row stamped by then may have been committed by the cut, rolled back by
// the restore.
func afterCut(acks []hermestest.Ack, cut *journal.WALCutRecord) []hermestest.Ack {
	if cut == nil {
		return acks
	}
	var out []hermestest.Ack
	for _, a := range acks {
		if time.Unix(0, int64(a.Timestamp*1e9)).After(cut.At) {
			out = append(out, a)
		}
	}
	return out
}

// checkFTS runs the FTS5 integrity check of Hermes' full-text tables.
func checkFTS(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
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
func walBackup(t testing.TB, db, dst string) {
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

// A main new at the path (moved aside, then a copy into a new file, or
// tar -x) is a generation change: its check classifies it (mispaired),
// and what writes the new file meanwhile is no rewrite of the live store,
// whose connections hold the main moved aside. The check is held in its
// full scan while cp fills the new main, so every one of cp's writes
// lands while the change is being classified; under load that is where
// tar -x and mv-then-cp were taken for a rewrite.
func TestNewMainFilledDuringItsCheckIsNoRewrite(t *testing.T) {
	needFanotify(t)
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Guard, o.Reconcile = true, time.Hour })
	// It commits, then idles holding the store: the check of the swap
	// below is the only one (no checkpoint runs one meanwhile).
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 200, Count: 120, Linger: true})
	waitHolder(t, a, db, w.Pid)
	w.WaitAcks(t, 100)
	walBackup(t, db, filepath.Join(home, "backup.db"))
	backedUp := dbRows(t, filepath.Join(home, "backup.db"))
	w.WaitAcks(t, 120)
	waitSettled(t, a, db)

	a.scanMu.Lock()
	locked := true
	defer func() {
		if locked {
			a.scanMu.Unlock()
		}
	}()
	sh := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = home
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", script, err, out)
		}
	}
	// One rename puts the new main at the path (the old one stays as
	// state.db.old): the check that sees the change sees the new main.
	sh(": >state.db.new && ln state.db state.db.old && mv state.db.new state.db")
	// The check froze the writer (it holds the main moved aside) and
	// waits for the scan: the new main is at the path, unclassified.
	deadline := time.Now().Add(10 * time.Second)
	for hermestest.StateOf(w.Pid) != 'T' {
		if time.Now().After(deadline) {
			t.Fatal("the writer of the moved main was not frozen")
		}
		time.Sleep(time.Millisecond)
	}
	sh("cp backup.db state.db")
	a.scanMu.Unlock()
	locked = false

	inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
	if inc.Kind != journal.KindMispaired || inc.State != journal.StateResolved {
		t.Fatalf("incident %s: kind %s state %s error %q, want mispaired resolved", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
	}
	waitExit(t, w, 10*time.Second)
	waitSettled(t, a, db)
	if incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db}); err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v (%v), want the mispaired one", incs, err)
	}
	rows := dbRows(t, db)
	checkFTS(t, db)
	// The writer committed nothing after the swap: the frame cut replays
	// nothing, and what it acknowledged after the backup began is rolled
	// back by the restore on purpose, kept in the divert's
	// pre-replacement files.
	rep, err := recovery.ReadDivert(inc.Detail.DivertDir)
	if err != nil {
		t.Fatal(err)
	}
	var rolledBack []int64
	for _, ack := range w.Acks(t) {
		n := rows[hermestest.MessageContent(ack.Session, ack.Seq)]
		switch {
		case n == 0 && backedUp[hermestest.MessageContent(ack.Session, ack.Seq)] == 0:
			rolledBack = append(rolledBack, ack.Seq)
		case n != 1:
			t.Fatalf("row %d present %d times, want once (in the backup, restored)", ack.Seq, n)
		}
	}
	if len(rolledBack) > rep.PreReplacementRows || rep.ReplayRows > 0 {
		t.Fatalf("rows %v rolled back by the restore; the divert kept %d before the replacement and replays %d (want them kept, none replayed)",
			rolledBack, rep.PreReplacementRows, rep.ReplayRows)
	}
}
