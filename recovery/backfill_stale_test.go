//go:build linux

package recovery

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// staleStore is a sidecar_lost store whose wal-index says frames 1..N
// were checkpointed (a finished checkpoint: nBackfill = N =
// nBackfillAttempted) but whose main holds the pre-checkpoint image of
// some of those pages, page 1 among them: what seed 2's long runs found
// (the main alone malformed, main + orphan WAL whole). Rows after the
// checkpoint are only in the WAL.
func newStaleStore(t *testing.T, stalePages ...int) (s *interruptedStore, before int) {
	t.Helper()
	src := hermestest.NewStore(t)
	dsn := hermestest.DSN(src) + "&_pragma=wal_autocheckpoint(0)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	mustExec(t, db, `INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1700000000)`)
	add := func(from, to int) {
		for i := from; i < to; i++ {
			mustExec(t, db, `INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, ?)`,
				fmt.Sprintf("row %d %0200d", i, i), 1700000001+float64(i))
		}
	}
	add(0, 5)
	mustExec(t, db, "PRAGMA wal_checkpoint(TRUNCATE)")
	old := readAll(t, src)
	before = 30
	add(5, before)
	// A reader on the WAL's frames keeps the next writes from restarting
	// it, so they follow the checkpointed frames and nBackfill stays.
	reader, err := sql.Open("sqlite", hermestest.DSN(src))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	tx, err := reader.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil || n != before {
		t.Fatalf("reader: %d rows, %v", n, err)
	}
	mustExec(t, db, "PRAGMA wal_checkpoint(PASSIVE)")
	s = &interruptedStore{dir: t.TempDir(), rows: 45}
	add(before, s.rows)

	s.main, s.wal, s.shm = filepath.Join(s.dir, "state.db"), filepath.Join(s.dir, "orphan-wal"), filepath.Join(s.dir, "orphan-shm")
	for from, to := range map[string]string{src: s.main, src + "-wal": s.wal, src + "-shm": s.shm} {
		writeFile(t, to, readAll(t, from))
	}
	f, err := os.OpenFile(s.main, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range stalePages {
		if _, err := f.WriteAt(old[(p-1)*4096:p*4096], int64(p-1)*4096); err != nil {
			t.Fatal(err)
		}
	}
	return s, before
}

func TestFinishBackfillRewritesStalePages(t *testing.T) {
	s, before := newStaleStore(t, 1, 2, 3)
	if _, err := mainAloneRows(t, s.main); err == nil {
		t.Fatal("the main with stale pages reads fine alone: the test does not reproduce the damage")
	}
	if n, err := withWALRows(t, s.main, s.wal); err != nil || n != s.rows {
		t.Fatalf("main with the orphan's WAL: %d rows, %v", n, err)
	}
	rep, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Interrupted || rep.Stale == 0 || rep.Pages != rep.Stale || rep.FromFrame == 0 || rep.FromFrame == rep.MaxFrame {
		t.Fatalf("report %+v: want no checkpoint in flight, stale pages rewritten, nBackfill short of the WAL's end", rep)
	}
	if n, err := mainAloneRows(t, s.main); err != nil || n != before {
		t.Fatalf("main alone after: %d rows, %v; want %d (the checkpointed state)", n, err, before)
	}
	if n, err := withWALRows(t, s.main, s.wal); err != nil || n != s.rows {
		t.Fatalf("main with the orphan's WAL after: %d rows, %v", n, err)
	}
	again, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
	if err != nil || again.Stale != 0 || again.Pages != 0 {
		t.Fatalf("second run: %+v, %v; want nothing to do", again, err)
	}
}

// A main that holds what its wal-index says is left alone.
func TestFinishBackfillLeavesASoundMain(t *testing.T) {
	s, _ := newStaleStore(t)
	want := readAll(t, s.main)
	rep, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
	if err != nil || rep.Stale != 0 || rep.Pages != 0 || rep.Interrupted {
		t.Fatalf("report %+v, %v; want nothing to do", rep, err)
	}
	if got := readAll(t, s.main); string(got) != string(want) {
		t.Fatal("the main was written")
	}
}

// Once a new generation has opened the store (a -shm at the path), pages
// that differ from the orphan's may be its own checkpoint's: nothing is
// written.
func TestFinishBackfillStaleLeftOnceReopened(t *testing.T) {
	s, _ := newStaleStore(t, 1, 2, 3)
	writeFile(t, s.main+"-shm", make([]byte, 32768))
	want := readAll(t, s.main)
	rep, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
	if !errors.Is(err, ErrNewGenerationWrote) || rep.Pages != 0 {
		t.Fatalf("report %+v, %v; want ErrNewGenerationWrote and nothing written", rep, err)
	}
	if got := readAll(t, s.main); string(got) != string(want) {
		t.Fatal("the main was written")
	}
}

// Through the store's directory, as the agent calls it: the main is
// opened write-only there and read through the read-only pin.
func TestFinishBackfillStaleThroughTheStoreDir(t *testing.T) {
	s, before := newStaleStore(t, 1, 2, 3)
	st, err := store.ResolveStore(s.main)
	if err != nil {
		t.Fatal(err)
	}
	src := s.source(t)
	pinned, err := os.Open(s.main)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	rep, err := FinishBackfill(context.Background(), st, pinned, src.WAL, src.SHM)
	if err != nil || rep.Stale == 0 {
		t.Fatalf("report %+v, %v; want the stale pages rewritten", rep, err)
	}
	if n, err := mainAloneRows(t, s.main); err != nil || n != before {
		t.Fatalf("main alone after: %d rows, %v; want %d", n, err, before)
	}
}
