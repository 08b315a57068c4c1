//go:build linux

package recovery

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
	"github.com/stateguard/stateguard/walsalvage"
)

// interruptedStore is a store whose writer was frozen inside a
// checkpoint, built from real SQLite files: a writer commits rows with
// checkpoints off; its main, -wal and -shm are copied as they are; then
// what SQLite's checkpoint does first is done to the copies: the -shm
// gets nBackfillAttempted = mxFrame, and the main gets the newest WAL
// image of its first few pages in page order, as if the writer had been
// stopped after those writes. oracle is the main SQLite's own full
// checkpoint of the same files writes.
type interruptedStore struct {
	dir            string // main, -wal, -shm of the torn copy
	main, wal, shm string
	oracle         []byte
	rows           int
}

func newInterruptedStore(t *testing.T, pagesWritten int) *interruptedStore {
	t.Helper()
	src := hermestest.NewStore(t)
	db, err := sql.Open("sqlite", hermestest.DSN(src)+"&_pragma=wal_autocheckpoint(0)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	defer db.Close()
	mustExec(t, db, `INSERT INTO sessions (id, source, started_at) VALUES ('s1', 'cli', 1700000000)`)
	s := &interruptedStore{dir: t.TempDir(), rows: 40}
	for i := range s.rows {
		mustExec(t, db, `INSERT INTO messages (session_id, role, content, timestamp) VALUES ('s1', 'user', ?, ?)`,
			fmt.Sprintf("row %d %0200d", i, i), 1700000001+float64(i))
	}
	// The orphan's -wal and -shm are not at the path any more (sidecar_lost:
	// unlinked, held by fds); here they sit under other names.
	s.main, s.wal, s.shm = filepath.Join(s.dir, "state.db"), filepath.Join(s.dir, "orphan-wal"), filepath.Join(s.dir, "orphan-shm")
	for from, to := range map[string]string{src: s.main, src + "-wal": s.wal, src + "-shm": s.shm} {
		if err := os.WriteFile(to, readAll(t, from), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.oracle = checkpointedMain(t, s.main, s.wal)

	// The interrupted checkpoint's first steps, on the copies.
	shm := readAll(t, s.shm)
	ne := binary.NativeEndian
	mx := ne.Uint32(shm[16:])
	ne.PutUint32(shm[96+32:], mx) // nBackfillAttempted
	writeFile(t, s.shm, shm)
	walBytes := readAll(t, s.wal)
	w, err := walsalvage.ReadWAL(context.Background(), bytes.NewReader(walBytes), int64(len(walBytes)))
	if err != nil {
		t.Fatal(err)
	}
	newest := w.Newest(int(mx))
	pages := slices.Sorted(func(yield func(uint32) bool) {
		for p := range newest {
			if !yield(p) {
				return
			}
		}
	})
	if len(pages) <= pagesWritten {
		t.Fatalf("the WAL has %d pages, fewer than the %d to write", len(pages), pagesWritten)
	}
	f, err := os.OpenFile(s.main, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range pages[:pagesWritten] {
		img, err := w.ReadPage(bytes.NewReader(walBytes), newest[p])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(img, int64(p-1)*int64(len(img))); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// checkpointedMain is the main SQLite makes of main+wal with a full
// checkpoint, on copies.
func checkpointedMain(t *testing.T, main, wal string) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state.db")
	writeFile(t, p, readAll(t, main))
	writeFile(t, p+"-wal", readAll(t, wal))
	db, err := sql.Open("sqlite", "file:"+p)
	if err != nil {
		t.Fatal(err)
	}
	var busy, logged, done int
	if err := db.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &done); err != nil || busy != 0 {
		t.Fatalf("checkpoint: %d %v", busy, err)
	}
	db.Close()
	return readAll(t, p)
}

// mainAloneRows reads the main as the new generation does, without the
// orphan's WAL: on a copy, with no -wal beside it.
func mainAloneRows(t *testing.T, main string) (int, error) {
	return withWALRows(t, main, "")
}

// withWALRows checks and counts the messages of a copy of main, with a
// copy of wal as its -wal when wal is not empty.
func withWALRows(t *testing.T, main, wal string) (int, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state.db")
	writeFile(t, p, readAll(t, main))
	if wal != "" {
		writeFile(t, p+"-wal", readAll(t, wal))
	}
	db, err := sql.Open("sqlite", "file:"+p)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var ic string
	if err := db.QueryRow("PRAGMA integrity_check").Scan(&ic); err != nil {
		return 0, err
	}
	if ic != "ok" {
		return 0, fmt.Errorf("integrity_check: %s", ic)
	}
	var n int
	err = db.QueryRow("SELECT count(*) FROM messages").Scan(&n)
	return n, err
}

func (s *interruptedStore) source(t *testing.T) BackfillSource {
	t.Helper()
	open := func(p string, flag int) *os.File {
		f, err := os.OpenFile(p, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	return BackfillSource{Main: open(s.main, os.O_RDWR), WAL: open(s.wal, os.O_RDONLY), SHM: open(s.shm, os.O_RDONLY)}
}

// TestFinishInterruptedBackfill: the torn main alone is malformed (the
// state TestSidecarLostSnapshotCapture met when its writer was frozen in a
// checkpoint); after FinishInterruptedBackfill it is byte for byte what
// SQLite's own checkpoint writes, and sound with every row.
func TestFinishInterruptedBackfill(t *testing.T) {
	s := newInterruptedStore(t, 1)
	if _, err := mainAloneRows(t, s.main); err == nil {
		t.Fatal("the half-checkpointed main reads fine alone: the test does not reproduce the damage")
	}
	// With the orphan's WAL the torn main is sound and has every row: what
	// a capture pairs (main + orphan WAL) was never the problem.
	if n, err := withWALRows(t, s.main, s.wal); err != nil || n != s.rows {
		t.Fatalf("torn main with its WAL: %d rows, %v", n, err)
	}
	rep, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Interrupted || rep.FromFrame != 0 || rep.ToFrame != rep.MaxFrame || rep.Pages == 0 {
		t.Fatalf("report %+v", rep)
	}
	if got := readAll(t, s.main); !bytes.Equal(got, s.oracle) {
		t.Fatalf("finished main (%d bytes) differs from SQLite's checkpoint (%d bytes)", len(got), len(s.oracle))
	}
	if n, err := mainAloneRows(t, s.main); err != nil || n != s.rows {
		t.Fatalf("finished main: %d rows, %v", n, err)
	}
	// A second run finds the same wal-index and writes the same bytes.
	if _, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(readAll(t, s.main), s.oracle) {
		t.Fatal("a second run changed the main")
	}
}

// TestFinishInterruptedBackfillRefuses: nothing is written when the -shm
// is not about this WAL, is damaged, or the new generation has frames of
// its own; and nothing is done when no checkpoint was interrupted.
func TestFinishInterruptedBackfillRefuses(t *testing.T) {
	ne := binary.NativeEndian
	for name, spoil := range map[string]func(t *testing.T, s *interruptedStore){
		"other salts": func(t *testing.T, s *interruptedStore) {
			b := readAll(t, s.shm)
			for _, off := range []int{32, 48 + 32} {
				b[off] ^= 1
			}
			// Keep the header's own checksum right: only the salts lie.
			c1, c2 := store.WALChecksum(nativeBigEndian(), 0, 0, b[:40])
			for _, off := range []int{40, 48 + 40} {
				ne.PutUint32(b[off:], c1)
				ne.PutUint32(b[off+4:], c2)
			}
			writeFile(t, s.shm, b)
		},
		"torn header": func(t *testing.T, s *interruptedStore) {
			b := readAll(t, s.shm)
			b[48+16] ^= 1 // the second copy's mxFrame
			writeFile(t, s.shm, b)
		},
		"new generation wrote": func(t *testing.T, s *interruptedStore) {
			writeFile(t, s.main+"-wal", make([]byte, store.WALHeaderSize+24+4096))
		},
		"orphan wal at the path": func(t *testing.T, s *interruptedStore) {
			if err := os.Link(s.wal, s.main+"-wal"); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newInterruptedStore(t, 1)
			spoil(t, s)
			before := readAll(t, s.main)
			_, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
			if err == nil {
				t.Fatal("finished anyway")
			}
			t.Log(err)
			if name == "new generation wrote" && !errors.Is(err, ErrNewGenerationWrote) {
				t.Fatalf("error %v, want ErrNewGenerationWrote", err)
			}
			if !bytes.Equal(readAll(t, s.main), before) {
				t.Fatalf("main changed although it failed: %v", err)
			}
		})
	}
	t.Run("not interrupted", func(t *testing.T) {
		s := newInterruptedStore(t, 1)
		b := readAll(t, s.shm)
		ne.PutUint32(b[96+32:], 0)
		writeFile(t, s.shm, b)
		before := readAll(t, s.main)
		rep, err := FinishInterruptedBackfill(context.Background(), s.main, s.source(t))
		if err != nil || rep.Interrupted || rep.Pages != 0 || !bytes.Equal(readAll(t, s.main), before) {
			t.Fatalf("report %+v, %v", rep, err)
		}
	})
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
