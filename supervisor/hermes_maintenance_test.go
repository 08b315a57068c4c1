//go:build linux

package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// Hermes' maintenance run from a process of its own against a guarded
// store, the way Hermes' code does it (hermestest.Maintain): VACUUM and
// _safe_restore_db's online-backup restore work with the guard armed and
// a gateway writing; a journal-mode switch needs the store to itself and
// works once the gateway is stopped and the guard paused.
func TestHermesMaintenanceUnderGuard(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	w := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.Rate = 50; o.CheckpointEvery = 50 })
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	before := len(w.WaitAcks(t, 10))
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)

	if out, err := hermestest.Maintain(t, db, "vacuum"); err != nil {
		t.Fatalf("VACUUM under the guard: %v\n%s", err, out)
	}
	if out, err := hermestest.Maintain(t, db, "restore:"+backup); err != nil {
		t.Fatalf("online-backup restore under the guard: %v\n%s", err, out)
	}
	after := len(w.Acks(t)) // the ones in between were rolled back by the restore
	w.AcksGrow(t, 5)        // the gateway goes on: same inode, same generation stamp
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := countDiverted(w.Acks(t)); n != 0 {
		t.Fatalf("the gateway refused %d writes: it took the maintenance for a replaced store", n)
	}
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
	if err != nil || len(incs) != 0 {
		t.Fatalf("maintenance opened incidents %+v (%v)", incs, err)
	}

	out, err := hermestest.Maintain(t, db, "journal-delete")
	if err == nil {
		t.Fatal("journal_mode=DELETE succeeded next to the guard's locks")
	}
	t.Logf("journal_mode=DELETE under the guard: %s", out)
	if _, _, err := a.PauseGuard(context.Background(), db, time.Minute, "journal_mode switch"); err != nil {
		t.Fatal(err)
	}
	if out, err := hermestest.Maintain(t, db, "journal-delete"); err != nil {
		t.Fatalf("journal_mode=DELETE with the guard paused: %v\n%s", err, out)
	}
	if out, err := hermestest.Maintain(t, db, "journal-wal"); err != nil {
		t.Fatalf("journal_mode=WAL with the guard paused: %v\n%s", err, out)
	}
	acks := w.Acks(t)
	kept := append(acks[:before:before], acks[after:]...)
	checkExactlyOnce(t, kept, dbRows(t, db), time.Time{}, time.Time{})
}

// _safe_restore_db's fallback (a destination that fails its structural
// check) publishes the backup by rename only when no other process holds
// a file of the store: the guard's fds count, so Hermes refuses and names
// agentd's pid; with the guard paused (`agentctl guard off`) it restores,
// and agentd takes the new main for a plain generation change.
func TestHermesFallbackRestoreNeedsGuardOff(t *testing.T) {
	home, db := testHome(t)
	a := startAgent(t, home, guardOn)
	w := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.Count = 20 })
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	waitExit(t, w, 20*time.Second)
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, db, backup)

	out, err := hermestest.Maintain(t, db, "restore-fallback:"+backup)
	if err == nil || !strings.Contains(out, fmt.Sprint(os.Getpid())) {
		t.Fatalf("fallback restore next to the guard: %v, %q; want a refusal naming agentd's pid %d", err, out, os.Getpid())
	}
	if _, _, err := a.PauseGuard(context.Background(), db, time.Minute, "hermes restore"); err != nil {
		t.Fatal(err)
	}
	if out, err := hermestest.Maintain(t, db, "restore-fallback:"+backup); err != nil {
		t.Fatalf("fallback restore with the guard paused: %v\n%s", err, out)
	}
	checkExactlyOnce(t, w.Acks(t), dbRows(t, db), time.Time{}, time.Time{})
	// `agentctl guard on`: the guard re-arms on the restored generation
	// once a Hermes process opens it again.
	if _, _, err := a.ResumeGuard(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	w2 := hermesWriter(t, db, func(o *hermestest.WriterOptions) { o.Session, o.Count, o.Linger = "s2", 5, true })
	waitGuard(t, a, db, control.GuardArmed, 10*time.Second)
	w2.WaitAcks(t, 5)
	incs, err := a.journal.ListIncidents(context.Background(), journal.ListOptions{Store: db})
	if err != nil || len(incs) != 0 {
		t.Fatalf("the restore opened incidents %+v (%v)", incs, err)
	}
}
