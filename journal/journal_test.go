package journal

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// openTestJournal opens a fresh journal in a prepared state directory.
func openTestJournal(t *testing.T) (*Journal, string) {
	t.Helper()
	j, path := openJournalIn(t, filepath.Join(t.TempDir(), "state"))
	t.Cleanup(func() { j.Close() })
	return j, path
}

// openJournalIn opens (creating) the journal in dir, made 0700.
func openJournalIn(t *testing.T, dir string) (*Journal, string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, FileName)
	j, err := Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return j, path
}

// rawDB opens path with the plain driver, for checks and for damage the
// journal API would not do.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMigrationsWellFormed(t *testing.T) {
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range ms {
		if m.version != i+1 || m.name == "" || strings.TrimSpace(m.sql) == "" {
			t.Errorf("migration %d: %+v", i, m.version)
		}
	}
}

func TestJournalMigratesFromEmpty(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	ms, _ := loadMigrations()

	v, err := j.SchemaVersion(ctx)
	if err != nil || v != len(ms) {
		t.Fatalf("schema version %d (%v), want %d", v, err, len(ms))
	}
	var n, appID int
	var mode string
	if err := j.db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms) {
		t.Errorf("schema_migrations has %d rows (%v), want %d", n, err, len(ms))
	}
	if err := j.db.QueryRowContext(ctx, "PRAGMA application_id").Scan(&appID); err != nil || appID != applicationID {
		t.Errorf("application_id %#x (%v), want %#x", appID, err, applicationID)
	}
	if err := j.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode %q (%v), want wal", mode, err)
	}
	for _, table := range []string{"incidents", "incident_steps", "replay_jobs", "guard_pauses"} {
		if err := j.db.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Errorf("table %s: %v", table, err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("journal mode %v (%v), want 0600", fi.Mode(), err)
	}
	if err := j.Check(ctx); err != nil {
		t.Error(err)
	}

	// PERSIST_WAL: closing the last connection checkpoints but must not
	// unlink the -wal and -shm.
	if _, err := j.PauseGuard(ctx, "/s", j.now().Add(3600e9), "x"); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		fi, err := os.Stat(path + suffix)
		if err != nil {
			t.Errorf("after Close: %v (PERSIST_WAL not in effect)", err)
			continue
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", suffix, fi.Mode())
		}
	}
}

func TestJournalReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	inc, err := j.OpenIncident(ctx, Incident{Store: "/h/state.db", Kind: KindReplaced, Policy: "terminate"})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Transition(ctx, inc.ID, StateFrozen, Step{Name: StepFrozen, Detail: map[string]any{"pids": []int{42}}}); err != nil {
		t.Fatal(err)
	}
	job, err := j.EnqueueJob(ctx, Job{IncidentID: inc.ID, Store: "/h/state.db", Path: "/h/sessions/recovered/x/s1.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.PauseGuard(ctx, "/h/state.db", j.now().Add(3600e9), "vacuum"); err != nil {
		t.Fatal(err)
	}
	j.Close()

	j2, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	var n int
	ms, _ := loadMigrations()
	if err := j2.db.QueryRowContext(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil || n != len(ms) {
		t.Errorf("reopen re-ran migrations: %d rows (%v)", n, err)
	}
	got, err := j2.GetIncident(ctx, inc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateFrozen || got.Policy != "terminate" || !got.OpenedAt.Equal(inc.OpenedAt) {
		t.Errorf("incident after reopen: %+v", got)
	}
	steps, err := j2.Steps(ctx, inc.ID)
	if err != nil || len(steps) != 2 || steps[1].Name != StepFrozen || steps[1].To != StateFrozen {
		t.Errorf("steps after reopen: %+v (%v)", steps, err)
	}
	jobs, err := j2.ListJobs(ctx, JobFilter{IncidentID: inc.ID})
	if err != nil || len(jobs) != 1 || jobs[0].ID != job.ID || jobs[0].State != JobQueued {
		t.Errorf("jobs after reopen: %+v (%v)", jobs, err)
	}
	pauses, err := j2.ActivePauses(ctx, j2.now())
	if err != nil || len(pauses) != 1 || pauses[0].Reason != "vacuum" {
		t.Errorf("pauses after reopen: %+v (%v)", pauses, err)
	}
}

func TestJournalRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	j.Close()
	db := rawDB(t, path)
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	_, err := Open(ctx, path, nil)
	if !errors.Is(err, ErrTooNew) {
		t.Fatalf("Open on a version 99 journal = %v, want ErrTooNew", err)
	}
	for _, want := range []string{path, "99", "newer stateguard"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	var v int
	if err := rawDB(t, path).QueryRow("PRAGMA user_version").Scan(&v); err != nil || v != 99 {
		t.Errorf("refused journal was changed: user_version %d (%v)", v, err)
	}
}

func TestJournalRefusesForeignDatabase(t *testing.T) {
	ctx := context.Background()
	path := hermestest.NewStore(t)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path, nil)
	if err == nil || !strings.Contains(err.Error(), "not a stateguard journal") {
		t.Fatalf("Open on a Hermes store = %v", err)
	}
	after, _ := os.ReadFile(path)
	if string(before) != string(after) {
		t.Error("Open changed a database it refused")
	}
}

func TestJournalRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere.db")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, FileName)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if j, err := Open(context.Background(), link, nil); err == nil {
		j.Close()
		t.Fatal("Open followed a symlink")
	}
}

func TestJournalPathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "we?ird #dir %41")
	j, _ := openJournalIn(t, dir)
	j.Close()
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) == 0 || names[0] != FileName {
		t.Errorf("journal files in %q: %v", dir, names)
	}
}
