//go:build linux

package supervisor

import (
	"database/sql"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/journal"
)

// cpOverCheckpointer restores a backup with cp over a live store whose
// writer checkpoints after every commit (its pages go into the main all
// the time). Once the incident has killed the writer it returns the
// agent, how many rewrite.raced events it logged (a checkpoint of the
// writer landed in the main after cp's first write) and what an
// integrity check of the restored store says.
func cpOverCheckpointer(tb testing.TB, noGate bool) (*Agent, string, int, error) {
	home, db := testHome(tb)
	var logs hermestest.LogBuffer
	a := startAgent(tb, home, func(o *Options) {
		o.Guard, o.NoOpenGate = true, noGate
		o.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("agent log:\n%s", logs.String())
		}
	})
	if a.rw.mw == nil || !a.rw.mw.Attributed() {
		tb.Skip("no fanotify: in-place rewrites are not caught at their first write here")
	}
	if !noGate && !a.rw.mw.Gated() {
		tb.Skip("no fanotify permission events: opens are not held here")
	}
	w := hermestest.StartWriter(tb, hermestest.WriterOptions{DB: db, Rate: 1000, CheckpointEvery: 1, Linger: true})
	waitHolder(tb, a, db, w.Pid)
	w.WaitAcks(tb, 200)
	walBackup(tb, db, filepath.Join(home, "backup.db"))
	w.AcksGrow(tb, 50)
	cmd := exec.Command("cp", "backup.db", "state.db")
	cmd.Dir = home
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("cp: %v: %s", err, out)
	}
	waitExit(tb, w, 30*time.Second) // the incident's release (policy kill)
	return a, db, len(logs.Records(tb, EventRewriteRaced)), storeWhole(db)
}

// storeWhole runs SQLite's integrity check and the FTS5 ones.
func storeWhole(path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	var ic string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil || ic != "ok" {
		return fmt.Errorf("integrity_check of %s: %q %v", path, ic, err)
	}
	for _, tbl := range []string{"messages_fts", "messages_fts_trigram"} {
		if _, err := db.Exec("INSERT INTO " + tbl + "(" + tbl + ") VALUES('integrity-check')"); err != nil {
			return fmt.Errorf("FTS5 integrity check of %s in %s: %w", tbl, path, err)
		}
	}
	return nil
}

// TestCpOverCheckpointingWriterNeverRaces: with opens held (permission
// events), cp's open waits until the writer is frozen and stopped, so no
// checkpoint of the writer lands in the main after cp's first write: no
// rewrite.raced, and the restored store is whole, every time.
func TestCpOverCheckpointingWriterNeverRaces(t *testing.T) {
	needFanotify(t)
	for i := range 3 {
		a, db, raced, whole := cpOverCheckpointer(t, false)
		if raced > 0 || whole != nil {
			t.Fatalf("trial %d: %d rewrite.raced events, store: %v", i, raced, whole)
		}
		inc := waitIncident(t, a, db, 30*time.Second, journal.StateResolved, journal.StateFailed, journal.StateUnrecoverable)
		if inc.Kind != journal.KindRewritten || inc.State != journal.StateResolved || !inc.Detail.RewriteConfirmed {
			t.Fatalf("trial %d: incident %s kind %s state %s confirmed %v error %q, want a confirmed rewritten, resolved",
				i, inc.ID, inc.Kind, inc.State, inc.Detail.RewriteConfirmed, inc.Detail.Error)
		}
	}
}

// BenchmarkCpOverCheckpointingWriter counts, per cp over a store whose
// writer checkpoints after every commit, the rewrite.raced events and the
// restored stores that are not whole, with opens held (gate) and with
// detection at the first write only (first-write). One trial per
// iteration:
//
//	go test -run '^$' -bench CpOverCheckpointingWriter -benchtime=20x ./supervisor/
func BenchmarkCpOverCheckpointingWriter(b *testing.B) {
	for _, bc := range []struct {
		name   string
		noGate bool
	}{{"gate", false}, {"first-write", true}} {
		b.Run(bc.name, func(b *testing.B) {
			racedTrials, corrupt := 0, 0
			for i := 0; i < b.N; i++ {
				_, _, raced, whole := cpOverCheckpointer(b, bc.noGate)
				if raced > 0 {
					racedTrials++
				}
				if whole != nil {
					corrupt++
					b.Logf("trial %d: %v", i, whole)
				}
			}
			b.ReportMetric(float64(racedTrials)/float64(b.N), "raced/op")
			b.ReportMetric(float64(corrupt)/float64(b.N), "corrupt/op")
		})
	}
}
