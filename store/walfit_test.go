package store

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// fitOf runs CheckWALFit on the store's files, looking again while a
// live writer moves the WAL under the read.
func fitOf(t *testing.T, db string) WALFit {
	t.Helper()
	open := func(p string) *os.File {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	main, wal, shm := open(db), open(db+"-wal"), open(db+"-shm")
	defer main.Close()
	defer wal.Close()
	defer shm.Close()
	for tries := 0; ; tries++ {
		st, err := main.Stat()
		if err != nil {
			t.Fatal(err)
		}
		fit, err := CheckWALFit(main, st.Size(), wal, shm)
		if errors.Is(err, ErrWALMoved) && tries < 100 {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return fit
	}
}

// A store's own writer, committing and checkpointing every few commits
// (its WAL restarted again and again), never leaves a WAL the check says
// does not fit its main.
func TestWALFitsLiveWriter(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 500, CheckpointEvery: 7})
	checked := map[string]bool{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		fit := fitOf(t, db)
		if fit.Mismatch != "" {
			t.Fatalf("the live writer's own WAL: %s (%+v)", fit.Mismatch, fit.Backlog)
		}
		for _, c := range fit.Checks {
			checked[c] = true
		}
	}
	w.WaitAcks(t, 100)
	for _, c := range []string{"page size", "page count", "page-1 counter", "backfill"} {
		if !checked[c] {
			t.Errorf("check %q never ran (ran: %v)", c, checked)
		}
	}
}

// A backup copied over the main in place while a writer's WAL is live
// (cp, rsync --inplace): the WAL needs pages the backup lacks, or its
// page-1 images were written over a change counter the backup does not
// have.
func TestWALFitRewrittenMain(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Rate: 300, CheckpointEvery: -1, AutoCheckpoint: -1})
	w.WaitAcks(t, 30)
	backup := t.TempDir() + "/backup.db"
	hermestest.VacuumInto(t, db, backup)
	w.AcksGrow(t, 30)
	if fit := fitOf(t, db); fit.Mismatch != "" {
		t.Fatalf("before the rewrite: %s", fit.Mismatch)
	}
	b, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, b, 0o600); err != nil { // O_TRUNC, same inode: cp
		t.Fatal(err)
	}
	// Which check sees it depends on the backup (a smaller database: the
	// page count; an older page 1: the counter).
	fit := fitOf(t, db)
	if fit.Mismatch == "" {
		t.Fatalf("after the rewrite: no mismatch (checks %v)", fit.Checks)
	}
}

// After a checkpoint copied every frame (nothing written since, the WAL
// not restarted), a main page that differs from its copied image is a
// rewrite; one cut short is too.
func TestWALFitBackfilledPages(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 40, CheckpointEvery: 40, Linger: true})
	w.WaitAcks(t, 40)
	var fit WALFit
	hermestest.Eventually(t, "the writer's checkpoint", 10*time.Second, func() bool {
		fit = fitOf(t, db)
		return fit.Backlog.IndexOK && fit.Backlog.Backfilled == fit.Backlog.Committed && fit.Cut.Frame > 0
	})
	if fit.Mismatch != "" {
		t.Fatalf("after the checkpoint: %s", fit.Mismatch)
	}
	raw, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseMainHeader(raw[:100])
	if err != nil {
		t.Fatal(err)
	}
	// A page the WAL holds, at its newest image's place in the main.
	walRaw, err := os.ReadFile(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := ParseWALHeader(walRaw)
	frames, err := committedFrames(bytesReader(walRaw), wh, WALBacklog{})
	if err != nil || len(frames) == 0 {
		t.Fatalf("frames of the wal: %d %v", len(frames), err)
	}
	page := frames[len(frames)-1].page
	if page == 1 {
		page = frames[0].page
	}
	last := int64(page-1) * int64(h.PageSize)
	f, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte{raw[last+200] ^ 0xff}, last+200); err != nil {
		t.Fatal(err)
	}
	if fit = fitOf(t, db); !strings.Contains(fit.Mismatch, "which a checkpoint copied") {
		t.Fatalf("a copied page changed: mismatch %q (checks %v)", fit.Mismatch, fit.Checks)
	}
	if err := f.Truncate(int64(len(raw)) - int64(h.PageSize)); err != nil {
		t.Fatal(err)
	}
	if fit = fitOf(t, db); fit.Mismatch == "" {
		t.Fatalf("main cut short by a page: no mismatch (checks %v)", fit.Checks)
	}
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
