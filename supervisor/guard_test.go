package supervisor

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
	"github.com/stateguard/stateguard/store"
)

// The measured scenario (issue 7): a writer whose POSIX locks are
// cancelled every 3 commits, and plain `sqlite3 state.db "select ..."`
// runs, each of which closes believing it is the last connection. Armed,
// the guard keeps the -wal through every run and no incident opens;
// paused, the first runs unlink the WAL under the writer, and the daemon
// opens a sidecar_lost incident and captures every acknowledged row.
func TestGuardKeepsWALAgainstWrongLastCloser(t *testing.T) {
	cli, err := exec.LookPath("sqlite3")
	if err != nil {
		t.Skip("the sqlite3 CLI is not installed (Debian: apt-get install sqlite3); it is the wrong last closer this test needs")
	}
	for _, paused := range []bool{false, true} {
		name := "armed"
		if paused {
			name = "paused"
		}
		t.Run(name, func(t *testing.T) {
			home, db := testHome(t)
			a := startAgent(t, home, guardOn)
			w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, CancelLocksEvery: 3})
			waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
			if paused {
				if _, _, err := a.PauseGuard(context.Background(), db, time.Minute, "test"); err != nil {
					t.Fatal(err)
				}
				if st := a.guardStatus(db); st.State != control.GuardPaused {
					t.Fatalf("guard %+v after pause, want paused", st)
				}
				if l := ofdLocks(t, fileID(t, db)); len(l) != 0 {
					t.Fatalf("paused guard still holds %+v", l)
				}
			}
			wal := fileID(t, db+"-wal")
			lost := 0
			for run := range 10 {
				// At least one lock cancellation between two runs.
				w.AcksGrow(t, 4)
				// Deliberately without -readonly: this is the closer
				// the guard exists for.
				out, err := exec.Command(cli, db, "select count(*) from messages").CombinedOutput()
				if err != nil {
					t.Logf("sqlite3 run %d: %v: %s", run, err, out)
				}
				if now, err := os.Lstat(db + "-wal"); err != nil || fileID(t, db+"-wal") != wal || now == nil {
					lost++
					t.Logf("run %d: the -wal at the path is no longer the writer's (%v)", run, err)
					break
				}
			}
			if !paused {
				if lost > 0 {
					t.Fatal("the armed guard did not keep the writer's WAL")
				}
				if incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db}); err != nil || len(incs) > 0 {
					t.Fatalf("incidents with the guard armed: %+v %v", incs, err)
				}
				if st := a.guardStatus(db); st.State != control.GuardArmed {
					t.Fatalf("guard %+v at the end, want armed", st)
				}
				if err := w.Stop(10 * time.Second); err != nil {
					t.Fatal(err)
				}
				if miss := missingAcks(w.Acks(t), dbRows(t, db)); len(miss) > 0 {
					t.Fatalf("%d acknowledged rows missing from the store", len(miss))
				}
				return
			}
			if lost == 0 {
				t.Fatal("with the guard paused the WAL survived 10 wrong last closers: the test cannot tell the guard works")
			}
			inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
			if inc.Kind != journal.KindSidecarLost || inc.State != journal.StateResolved {
				t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
			}
			waitExit(t, w, 10*time.Second)
			rows := captureRows(t, inc.Detail.CapturePath)
			if miss := missingAcks(w.Acks(t), rows); len(miss) > 0 {
				t.Fatalf("%d acknowledged rows missing from the capture: %v", len(miss), miss)
			}
		})
	}
}

// A restore removes the old sidecars and renames a new main over the
// store; once a writer opens the new generation, the guard is armed on it
// within the reconcile deadline (fsnotify off: the reconcile alone must do
// it), and the old generation's locks and fds are gone.
func TestGuardRearmsAfterRenameOver(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, func(o *Options) { o.Guard, o.DisableNotify = true, true })
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 5, Linger: true})
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	oldMain, oldSHM := fileID(t, db), fileID(t, db+"-shm")
	waitGuarded(t, oldMain, oldSHM)
	// Our own fds keep the old inodes from being reused, so a lock on a
	// reused inode number cannot pass for an old lock.
	keep := holdInodes(t, db, db+"-shm")
	if err := w1.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Sidecars first: with the main replaced under them they would be
	// a mispaired generation, the quarantine's business, not this test's.
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil {
			t.Fatal(err)
		}
	}
	hermestest.RenameFreshOver(t, db)
	newMain := fileID(t, db)
	hermestest.Eventually(t, "the old generation released", 5*time.Second, func() bool {
		st := a.guardStatus(db)
		return st.State == control.GuardUnavailable && len(ofdLocks(t, oldMain)) == 0
	})
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 5, Linger: true})
	newSHM := fileID(t, db+"-shm")
	if fileID(t, db) != newMain {
		t.Fatal("the main changed again under the test")
	}
	deadline := 2*500*time.Millisecond + 2*time.Second // two reconciles, plus slack for -race
	hermestest.Eventually(t, "the new generation armed", deadline, func() bool { return guarded(t, newMain, newSHM) })
	if st := a.guardStatus(db); st.State != control.GuardArmed || st.Reason != "" {
		t.Fatalf("guard %+v, want armed", st)
	}
	for _, id := range []fileid.ID{oldMain, oldSHM} {
		if l := ofdLocks(t, id); len(l) != 0 {
			t.Fatalf("old generation %v still locked: %+v", id, l)
		}
		if fds := selfFDsOn(t, id, keep...); len(fds) != 0 {
			t.Fatalf("agent fds left on old generation %v: %v", id, fds)
		}
	}
	if err := w2.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// holdInodes opens paths read-only (no lock) until the test ends and
// returns the fds, for selfFDsOn to skip.
func holdInodes(t *testing.T, paths ...string) []uintptr {
	t.Helper()
	var fds []uintptr
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fds = append(fds, f.Fd())
	}
	return fds
}

// A pause releases the locks, is journaled, and re-arms by itself when it
// runs out.
func TestGuardPauseExpires(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 100, Linger: true})
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	main, shm := fileID(t, db), fileID(t, db+"-shm")
	p, st, err := a.PauseGuard(context.Background(), db, 1500*time.Millisecond, "vacuum")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != control.GuardPaused || !st.Until.Equal(p.Until) || st.Reason != "vacuum" {
		t.Fatalf("guard %+v after pause %+v", st, p)
	}
	if l := ofdLocks(t, main); len(l) != 0 {
		t.Fatalf("paused guard still locks the main: %+v", l)
	}
	ps, err := a.journal.ActivePauses(context.Background(), time.Now())
	if err != nil || len(ps) != 1 || ps[0].Store != db {
		t.Fatalf("journaled pauses %+v %v", ps, err)
	}
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	if time.Now().Before(p.Until) {
		t.Fatalf("re-armed before the pause ran out (%v)", p.Until)
	}
	hermestest.Eventually(t, "the locks back", 5*time.Second, func() bool { return guarded(t, main, shm) })
	w.AcksGrow(t, 3)
}

// Pause and resume over the control socket, by profile; a pause outlives
// an agent restart because it is journaled.
func TestGuardPauseAPIAndRestart(t *testing.T) {
	home, db := testHome(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 3, Linger: true})
	var opts Options
	a := startAgent(t, home, func(o *Options) { o.Guard = true; opts = *o })
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)

	if _, code := postGuard(t, a, "pause", control.GuardRequest{Profile: "nope"}); code != http.StatusNotFound {
		t.Fatalf("unknown profile: HTTP %d, want 404", code)
	}
	if _, code := postGuard(t, a, "pause", control.GuardRequest{Profile: "default", For: "-1m"}); code != http.StatusBadRequest {
		t.Fatalf("negative pause: HTTP %d, want 400", code)
	}
	ans, code := postGuard(t, a, "pause", control.GuardRequest{Profile: "default", Home: home, For: "10m", Reason: "journal_mode switch"})
	if code != http.StatusOK || ans.Store != db || ans.Guard == nil || ans.Guard.State != control.GuardPaused || ans.Pause == nil {
		t.Fatalf("pause: HTTP %d %+v", code, ans)
	}
	r, _ := http.NewRequest("GET", "/v1/status", nil)
	st, err := a.Status(r)
	if err != nil || len(st.Stores) != 1 || st.Stores[0].Guard == nil || st.Stores[0].Guard.State != control.GuardPaused {
		t.Fatalf("status %+v %v", st.Stores, err)
	}

	// The same agent again: stop this one, start one on its state dir.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a2, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close(context.Background())
	g := waitGuard(t, a2, db, control.GuardPaused, 10*time.Second)
	if g.Reason != "journal_mode switch" || g.Until.Before(time.Now().Add(9*time.Minute)) {
		t.Fatalf("pause after restart %+v", g)
	}
	if l := ofdLocks(t, fileID(t, db)); len(l) != 0 {
		t.Fatalf("paused after restart, but locked: %+v", l)
	}
	ans, code = postGuard(t, a2, "resume", control.GuardRequest{Store: db})
	if code != http.StatusOK || !ans.Resumed || ans.Guard == nil || ans.Guard.State != control.GuardArmed {
		t.Fatalf("resume: HTTP %d %+v", code, ans)
	}
	waitGuarded(t, fileID(t, db), fileID(t, db+"-shm"))
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Config: generic stores stay off unless set, guard = false turns Hermes
// stores off, and a store not in WAL mode is never locked.
func TestGuardConfig(t *testing.T) {
	home, db := testHome(t)
	dir := t.TempDir()
	generic := dir + "/app.db"
	rollback := dir + "/rollback.db"
	for _, p := range []string{generic, rollback} {
		if err := hermestest.CreateStore(p); err != nil {
			t.Fatal(err)
		}
	}
	setJournalMode(t, rollback, "delete")
	// A -shm left next to a rollback-journal database: only the header
	// check keeps the guard off it.
	if err := os.WriteFile(rollback+"-shm", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ws := []*hermestest.Writer{
		hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 2, Linger: true}),
		hermestest.StartWriter(t, hermestest.WriterOptions{DB: generic, Count: 2, Linger: true}),
	}
	for _, c := range []struct {
		name  string
		mod   func(*Options)
		wants map[string]string
	}{
		{"defaults", func(o *Options) { o.Guard = true },
			map[string]string{db: control.GuardArmed, generic: control.GuardOff, rollback: control.GuardOff}},
		{"guard = false", func(o *Options) { o.Guard = false },
			map[string]string{db: control.GuardOff, generic: control.GuardOff, rollback: control.GuardOff}},
		{"per store", func(o *Options) {
			o.Guard = true
			o.StoreGuard = map[string]bool{db: false, generic: true, rollback: true}
		}, map[string]string{db: control.GuardOff, generic: control.GuardArmed, rollback: control.GuardUnavailable}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := startAgent(t, home, func(o *Options) {
				o.Discover.ExtraStores = []string{generic, rollback}
				c.mod(o)
			})
			for path, want := range c.wants {
				st := waitGuard(t, a, path, want, 10*time.Second)
				if want == control.GuardUnavailable && !strings.Contains(st.Reason, "WAL") {
					t.Errorf("%s: reason %q, want it to name WAL mode", path, st.Reason)
				}
				if want != control.GuardArmed {
					if l := ofdLocks(t, fileID(t, path)); len(l) != 0 {
						t.Errorf("%s: guard %s but locked %+v", path, want, l)
					}
				}
			}
		})
	}
	for _, w := range ws {
		if err := w.Stop(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

func setJournalMode(t *testing.T, path, mode string) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	if err := db.QueryRow("PRAGMA journal_mode=" + mode).Scan(&got); err != nil || got != mode {
		t.Fatalf("journal_mode=%s on %s: %q %v", mode, path, got, err)
	}
}

// The guard is for the live generation; an incident's orphan is the
// incident's. Through a sidecar_lost and a mispaired incident with the
// guard armed, each incident resolves as without it, and the guard ends
// armed on the new generation with nothing left on the old one.
func TestGuardAcrossIncidents(t *testing.T) {
	for _, c := range []struct {
		kind    journal.Kind
		replace func(t *testing.T, db string)
	}{
		{journal.KindSidecarLost, func(t *testing.T, db string) {
			os.Remove(db + "-wal")
			os.Remove(db + "-shm")
		}},
		{journal.KindMispaired, func(t *testing.T, db string) { hermestest.RenameFreshOver(t, db) }},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			home, db := testHome(t)
			a := startAgent(t, home, guardOn)
			w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s1", Rate: 300, CheckpointEvery: -1})
			waitHolder(t, a, db, w1.Pid)
			waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
			oldMain, oldSHM := fileID(t, db), fileID(t, db+"-shm")
			keep := holdInodes(t, db, db+"-shm")

			c.replace(t, db)
			inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed)
			if inc.Kind != c.kind || inc.State != journal.StateResolved {
				t.Fatalf("incident %s: kind %s state %s error %q", inc.ID, inc.Kind, inc.State, inc.Detail.Error)
			}
			waitExit(t, w1, 10*time.Second)
			if miss := missingAcks(w1.Acks(t), captureRows(t, inc.Detail.CapturePath)); len(miss) > 0 {
				t.Fatalf("%d acknowledged rows missing from the capture", len(miss))
			}
			w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 3, Linger: true})
			newMain, newSHM := fileID(t, db), fileID(t, db+"-shm")
			hermestest.Eventually(t, "the new generation armed", 5*time.Second, func() bool { return guarded(t, newMain, newSHM) })
			old := []fileid.ID{oldSHM}
			if c.kind == journal.KindMispaired {
				old = append(old, oldMain)
			}
			for _, id := range old {
				hermestest.Eventually(t, "nothing left on the old generation", 5*time.Second, func() bool {
					return len(ofdLocks(t, id)) == 0 && len(selfFDsOn(t, id, keep...)) == 0
				})
			}
			if err := w2.Stop(10 * time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func readGen(t *testing.T, db string) store.Generation {
	t.Helper()
	g, err := store.ReadGeneration(db)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A connection creating the sidecars is guarded at its event, not after
// the check's settle and full scan: that scan waits for any other store's
// or the reconcile walker's, here held for the whole test, and a short-lived
// connection would otherwise be gone, as the last closer, before the arm.
func TestGuardArmsWhileScansWait(t *testing.T) {
	home, db := testHome(t)
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	a := startAgent(t, home, func(o *Options) { o.Guard, o.Reconcile = true, time.Hour })
	waitGuard(t, a, db, control.GuardUnavailable, 10*time.Second)
	a.scanMu.Lock()
	defer a.scanMu.Unlock()
	hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 5, Linger: true})
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	waitGuarded(t, fileID(t, db), fileID(t, db+"-shm"))
}
