package supervisor

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// A replay whose final checkpoint is refused (a reader's snapshot older
// than its rows) is logged as replay.uncheckpointed and run again, not
// reported done: once the reader is gone the retry checkpoints, and the
// main file alone holds every row exactly once.
func TestReplayRefusedCheckpointRetried(t *testing.T) {
	home, db := testHome(t)
	reader, err := sql.Open("sqlite", hermestest.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	ctx := context.Background()
	conn, err := reader.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	logs := new(hermestest.LogBuffer)
	a := startAgent(t, home, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	jsonl := filepath.Join(t.TempDir(), "replayed.jsonl")
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"role": "user", "content": "row %d", "timestamp": %d.5}`+"\n", i, 1732912345+i)
	}
	if err := os.WriteFile(jsonl, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	job, err := a.journal.EnqueueJob(ctx, journal.Job{Store: db, Path: jsonl})
	if err != nil {
		t.Fatal(err)
	}
	hermestest.Eventually(t, "replay.uncheckpointed", 20*time.Second, func() bool {
		return len(logs.Records(t, EventReplayUncheckpointed)) > 0
	})
	if j, err := a.journal.GetJob(ctx, job.ID); err != nil || j.State == journal.JobDone {
		t.Fatalf("job with its rows only in the -wal: %+v %v, want it not done", j, err)
	}
	if rows := mainOnlyRows(t, db); rows["row 0"] != 0 {
		t.Fatalf("main alone has the replayed rows under the reader's snapshot: %v", rows)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	hermestest.Eventually(t, "the job's retry", 30*time.Second, func() bool {
		j, err := a.journal.GetJob(ctx, job.ID)
		return err == nil && j.State == journal.JobDone
	})
	main := mainOnlyRows(t, db)
	for i := range 5 {
		if c := fmt.Sprintf("row %d", i); main[c] != 1 {
			t.Fatalf("%q %d times in the main file, want 1 (all: %v)", c, main[c], main)
		}
	}
}
