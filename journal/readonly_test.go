package journal

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A read-only journal lists what the agent journaled and never writes:
// not the journal, and not its WAL.
func TestOpenJournalReadOnly(t *testing.T) {
	ctx := context.Background()
	j, path := openTestJournal(t)
	inc, err := j.OpenIncident(ctx, Incident{Store: "/s/state.db", Kind: KindReplaced, State: StatePinned, Policy: "hold"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.EnqueueJob(ctx, Job{Store: "/s/state.db", Path: "/s/x.jsonl"}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	before := map[string][]byte{}
	for _, s := range []string{"", "-wal"} {
		before[s], _ = os.ReadFile(path + s)
	}

	ro, err := OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	incs, err := ro.ListIncidents(ctx, ListOptions{OpenOnly: true})
	if err != nil || len(incs) != 1 || incs[0].ID != inc.ID || incs[0].State != StatePinned {
		t.Fatalf("ListIncidents = %+v, %v", incs, err)
	}
	if steps, err := ro.Steps(ctx, inc.ID); err != nil || len(steps) == 0 {
		t.Fatalf("Steps = %+v, %v", steps, err)
	}
	if jobs, err := ro.ListJobs(ctx, JobFilter{}); err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs = %+v, %v", jobs, err)
	}
	if _, err := ro.AddStep(ctx, inc.ID, Step{Name: "tamper"}); err == nil {
		t.Fatal("a write through the read-only journal succeeded")
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	for s, b := range before {
		after, _ := os.ReadFile(path + s)
		if !bytes.Equal(b, after) {
			t.Errorf("journal%s changed under a read-only open", s)
		}
	}
}

func TestOpenJournalReadOnlyRefuses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := OpenReadOnly(ctx, filepath.Join(dir, FileName)); !errors.Is(err, ErrMissing) {
		t.Errorf("missing journal: %v, want ErrMissing", err)
	}
	_, path := openTestJournal(t)
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(ctx, link); err == nil {
		t.Error("a symlinked journal was opened")
	}
	other := filepath.Join(dir, "other.db")
	db := rawDB(t, other)
	if _, err := db.Exec("CREATE TABLE t(x)"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(ctx, other); err == nil {
		t.Error("a database that is not a journal was opened")
	}
	if _, err := rawDB(t, path).Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenReadOnly(ctx, path); !errors.Is(err, ErrTooNew) {
		t.Errorf("newer journal: %v, want ErrTooNew", err)
	}
}
