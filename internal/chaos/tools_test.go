package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// newToolRun is a run with no agentd (it is "down": no freeze is
// measured) and one profile holding a live test writer, for the tool
// faults' own mechanics.
func newToolRun(t *testing.T) (*run, *profile, *hermestest.Writer) {
	t.Helper()
	return newToolRunRate(t, 50)
}

// newToolRunRate is newToolRun with the writer at rate messages a
// second (0: as fast as it can).
func newToolRunRate(t *testing.T, rate float64) (*run, *profile, *hermestest.Writer) {
	t.Helper()
	root := t.TempDir()
	e := &env{root: root, backups: filepath.Join(root, "backups"), home: filepath.Join(root, "home")}
	for _, d := range []string{e.backups, e.home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p := &profile{name: "default", dir: e.home, db: filepath.Join(e.home, "state.db")}
	e.profiles = []*profile{p}
	r := &run{cfg: Config{Pace: 0.05}, e: e, agent: &agentProc{}, rep: newReport(Config{}),
		rng: rand.New(rand.NewPCG(1, 2)), log: slog.New(slog.DiscardHandler)}
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: p.db, Create: true, Rate: rate, Session: "s"})
	w.WaitAcks(t, 5)
	return r, p, w
}

// inode is path's inode number, 0 when it does not exist.
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// TestToolFaults runs each tool fault with the real tool against a store
// with a live writer (no agentd) and checks that it did to the files what
// the operator's command does, and that the restore was recorded with the
// span the tool ran: the harness's judgement of every row rests on both.
func TestToolFaults(t *testing.T) {
	for _, bin := range []string{"sqlite3", "rsync", "tar", "cp"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (.ci/run installs it)", bin)
		}
	}
	for _, kind := range []string{FaultCpInplace, FaultRsyncInplace, FaultMvAsideCopy, FaultCpRmSidecars, FaultTarExtract, FaultSqlite3Restore} {
		t.Run(kind, func(t *testing.T) {
			r, p, w := newToolRun(t)
			if kind == FaultSqlite3Restore {
				r.cfg.Pace = 1 // a backup at least 1 s old: rows to see rolled back
			}
			main0, wal0 := inode(t, p.db), inode(t, p.db+"-wal")
			if _, err := r.toolFault(context.Background(), kind, p); err != nil {
				t.Fatal(err)
			}
			main1, wal1 := inode(t, p.db), inode(t, p.db+"-wal")
			rs := p.allRestores()
			if len(rs) != 1 {
				t.Fatalf("%d restores recorded, want 1", len(rs))
			}
			got := rs[0]
			if got.Kind != kind || !got.BackupAt.Before(got.Start) || got.At.Before(got.Start) {
				t.Errorf("restore %+v: want kind %s, backup before start, start ≤ done", got, kind)
			}
			if !strings.Contains(got.Command, shellQuote(got.Backup)) && kind != FaultTarExtract && kind != FaultSqlite3Restore {
				t.Errorf("command %q does not name the backup %s", got.Command, got.Backup)
			}
			sameMain := kind == FaultCpInplace || kind == FaultRsyncInplace || kind == FaultCpRmSidecars || kind == FaultSqlite3Restore
			if (main1 == main0) != sameMain {
				t.Errorf("main inode %d → %d; want the same inode: %t", main0, main1, sameMain)
			}
			if keepsWAL := kind != FaultCpRmSidecars; (wal1 == wal0) != keepsWAL {
				t.Errorf("-wal inode %d → %d; want it kept: %t", wal0, wal1, keepsWAL)
			}
			switch kind {
			case FaultMvAsideCopy:
				if inode(t, filepath.Join(p.dir, "state.db.old")) != main0 || !p.isOperatorFile("state.db.old") {
					t.Errorf("state.db.old is not the old main, recorded as the operator's (operator files %v)", p.operatorNames())
				}
				if next := p.asideName(); next == "state.db.old" {
					t.Error("a second mv-aside would move state.db over the first one's orphan")
				}
			case FaultTarExtract:
				if got.Command != "tar -xf "+shellQuote(got.Backup+".tar") {
					t.Errorf("command %q, want tar -xf of the backup's tarball", got.Command)
				}
			case FaultSqlite3Restore:
				rolledBackGone(t, p.db, w.AckPath, got)
			}
		})
	}
}

// rolledBackGone checks that rows acknowledged after the backup began and
// well before the restore are no longer in the store: the restore took.
func rolledBackGone(t *testing.T, db, ackPath string, rs restore) {
	t.Helper()
	acks, err := hermestest.ReadAcks(ackPath)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, a := range acks {
		if a.Timestamp < unixSec(rs.BackupAt.Add(300*time.Millisecond)) || a.Timestamp > unixSec(rs.Start.Add(-100*time.Millisecond)) {
			continue
		}
		out, err := exec.Command("sqlite3", "-readonly", db,
			"select count(*) from messages where content = '"+hermestest.MessageContent(a.Session, a.Seq)+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("sqlite3 -readonly: %v: %s", err, out)
		}
		if strings.TrimSpace(string(out)) != "0" {
			t.Errorf("seq %d, acked after the backup and before the restore, is still in the store", a.Seq)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("no row acknowledged between the backup (%s) and the restore (%s) to check", rs.BackupAt, rs.Start)
	}
}

// TestSqlite3RestoreCutsOnce is the evidence for the harness's reading of
// `sqlite3 state.db ".restore BACKUP"` (beforeBackupLock): under a writer
// committing as fast as it can (no agentd), the real tool's restores
// roll back every row committed before the backup API took the store's
// write lock and keep every row committed after it. So every row stamped
// after the tool returned is there, and the rows stamped while it ran
// that are missing all come before, in the writer's commit order, the
// ones that survived: one cut per restore, nothing lost around it.
func TestSqlite3RestoreCutsOnce(t *testing.T) {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("sqlite3 not installed (.ci/run installs it)")
	}
	r, p, w := newToolRunRate(t, 100)
	r.cfg.Pace = 0.3
	watch := newAckWatch()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { watch.run([]string{w.AckPath}, stop); close(done) }()
	for range 4 {
		if _, err := r.toolFault(context.Background(), FaultSqlite3Restore, p); err != nil {
			t.Fatal(err)
		}
		w.AcksGrow(t, 20) // rows committed after the restore returned
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Logf("writer stop: %v", err)
	}
	close(stop)
	<-done
	slot := &writerSlot{name: "s", p: p, opts: hermestest.WriterOptions{Ack: w.AckPath}}
	pr, err := checkProfile(p, []*writerSlot{slot}, watch, judge{
		settled: func(time.Time) bool { return true },
		failed:  func(*writerSlot, time.Time) bool { return false },
		noticed: func(restore) bool { return false },
	}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("acked %d, required %d, rolled back %d, stamped while sqlite3 ran %d (%d of them rolled back, committed before its write lock)",
		pr.Acked, pr.Required, pr.RolledBack, pr.DuringTool, pr.DuringRolledBack)
	if pr.Lost != 0 || pr.LostEarlier != 0 || pr.DuringLost != 0 || pr.Duplicated != 0 || pr.NotRolledBack != 0 {
		t.Errorf("lost %d, lost before a later restore %d, lost while the tool ran %d (%q), duplicated %d, not rolled back %d; want none",
			pr.Lost, pr.LostEarlier, pr.DuringLost, pr.DuringLostSamples, pr.Duplicated, pr.NotRolledBack)
	}
	if pr.Required == 0 || pr.Integrity != "ok" {
		t.Errorf("required %d, integrity %q: want rows after the last restore, an intact store", pr.Required, pr.Integrity)
	}
}
