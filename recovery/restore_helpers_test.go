//go:build linux

package recovery

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// newStore makes a real Hermes store (FTS5 tables and triggers) in a
// fresh directory and appends n messages to each of the sessions.
func newStore(t *testing.T, sessions map[string]int) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "state.db")
	if err := hermestest.CreateStore(db); err != nil {
		t.Fatal(err)
	}
	addMessages(t, db, sessions)
	return db
}

// backupOf is a backup (VACUUM INTO) of a new store with n messages in
// each of the sessions.
func backupOf(t *testing.T, sessions map[string]int) string {
	t.Helper()
	backup := filepath.Join(t.TempDir(), "backup.db")
	hermestest.VacuumInto(t, newStore(t, sessions), backup)
	return backup
}

// addMessages appends n messages to each session, creating it when
// missing, in one transaction, and closes the connection again.
func addMessages(t *testing.T, db string, sessions map[string]int) {
	t.Helper()
	ctx := context.Background()
	w, err := store.OpenWritable(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	names := make([]string, 0, len(sessions))
	for s := range sessions {
		names = append(names, s)
	}
	sort.Strings(names)
	err = w.InTx(ctx, func(tx *store.Tx) error {
		for _, s := range names {
			ok, err := store.SessionExists(ctx, tx, s)
			if err != nil {
				return err
			}
			if !ok {
				if err := tx.CreateSession(store.Session{ID: s, Source: "cli", StartedAt: sql.NullFloat64{Float64: 1.75e9, Valid: true}}); err != nil {
					return err
				}
			}
			for i := range sessions[s] {
				role := "user"
				if i%2 == 1 {
					role = "assistant"
				}
				if _, err := tx.AppendMessage(store.Message{SessionID: s, Role: role,
					Content:   sql.NullString{String: fmt.Sprintf("%s message %d", s, i), Valid: true},
					Timestamp: sql.NullFloat64{Float64: 1.75e9 + float64(i), Valid: true}}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// rowCounts reads a store's rows through a read-only connection that is
// closed again before returning.
func rowCounts(t *testing.T, db string) Counts {
	t.Helper()
	c, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n, err := countRows(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func integrityOK(t *testing.T, db string) {
	t.Helper()
	c, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	problems, err := integrityCheck(context.Background(), c, "integrity_check")
	if err != nil || len(problems) > 0 {
		t.Fatalf("integrity_check of %s: %v %v", db, problems, err)
	}
}

func inodeOf(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func fileBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// emptyDir fails when dir holds anything.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s should be empty, holds %v", dir, names)
	}
}

// sigWriters stops and resumes real processes with SIGSTOP/SIGCONT, the
// way agentctl's holders-backed implementation does, without importing
// holders into recovery.
type sigWriters struct {
	t      *testing.T
	pids   []int
	stops  int
	resume int
}

func (w *sigWriters) Stop(ctx context.Context) error {
	w.stops++
	for _, pid := range w.pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
	}
	for _, pid := range w.pids {
		deadline := time.Now().Add(5 * time.Second)
		for hermestest.StateOf(pid) != 'T' {
			if time.Now().After(deadline) {
				return fmt.Errorf("pid %d did not stop", pid)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

func (w *sigWriters) Resume(ctx context.Context) error {
	w.resume++
	for _, pid := range w.pids {
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			return err
		}
	}
	return nil
}

// planIn plans a restore with a private temp dir the test can inspect.
func planIn(t *testing.T, backup, target string) (*RestorePlan, string, error) {
	t.Helper()
	tmp := t.TempDir()
	p, err := PlanRestore(context.Background(), RestoreRequest{Backup: backup, Target: target, TempDir: tmp,
		Now: func() time.Time { return time.Date(2026, 10, 1, 7, 24, 48, 0, time.UTC) }})
	if p != nil {
		t.Cleanup(func() { p.Close() })
	}
	return p, tmp, err
}
