//go:build linux

package recovery

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/store"
)

// TestDivertPreviousGeneration is TestToolTable/cp's four lost rows: the
// rows a writer committed were checkpointed into the main, its next
// commit restarted the WAL and it was stopped after writing the new
// header, before its first frame; then cp overwrote the main with a
// backup. SQLite reads no frame from that WAL, so the capture pairs with
// the backup and a paired divert finds nothing missing; the rows are only
// in the previous generation's frames beyond the new header. Divert
// refuses the pairing (ErrCaptureUnpaired) and DivertWALImages salvages
// them, so they reach the healthy store exactly once.
func TestDivertPreviousGeneration(t *testing.T) {
	e := newDivertEnv(t)
	db := e.orphan.path
	e.orphan.close()
	backup := filepath.Join(e.dir, "backup.db")
	hermestest.CopyFile(t, db, backup, 0o600) // the schema only: an old backup
	began := time.Now()
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "old", Count: 12, Linger: true, CheckpointEvery: -1})
	acks := w1.WaitAcks(t, 12)
	w1.Kill()
	<-w1.Done()
	old := readAll(t, db+"-wal")
	// A second writer appends to that generation, checkpoints it into the
	// main after each commit, and so restarts the WAL at its second.
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "next", Count: 2, Linger: true, CheckpointEvery: 1})
	w2.WaitAcks(t, 2)
	w2.Kill()
	<-w2.Done()
	restarted := readAll(t, db+"-wal")
	oh, _ := store.ParseWALHeader(old)
	nh, _ := store.ParseWALHeader(restarted)
	if nh.Salt1 != oh.Salt1+1 {
		t.Fatalf("the second writer did not restart the WAL once: salt-1 %08x, then %08x", oh.Salt1, nh.Salt1)
	}
	// Stopped after the new header: the old frames are all there is.
	writeFile(t, db+"-wal", append(append([]byte{}, restarted[:store.WALHeaderSize]...), old[store.WALHeaderSize:]...))
	// cp backup.db state.db: same inode, the backup's bytes.
	writeFile(t, db, readAll(t, backup))
	c, err := WriteCapture(context.Background(), openPinned(t, db), CaptureRequest{DBPath: db, PID: w1.Pid, Kind: KindRewritten,
		IncidentID: "inc-prevgen", Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	req := e.request(c.Dir, "inc-prevgen", KindRewritten)
	req.ProfileHome, req.ReplacedAt = e.home, began
	if r, err := Divert(context.Background(), req); !errors.Is(err, ErrCaptureUnpaired) {
		t.Fatalf("divert of a capture whose rows are in the previous generation: %+v %v, want ErrCaptureUnpaired", r, err)
	}
	rep, sr, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if sr == nil || sr.Previous == nil || !sr.Previous.FirstVerified || sr.Rows.Messages != 12 {
		t.Fatalf("salvage report %+v", sr)
	}
	e.replayAll(e.healthyWriter(), rep, false)
	checkRows(t, readOnly(t, e.healthy), acks)
}

// TestDivertPreviousGenerationAtCut is the same store with the cut a
// rewrite gate reads there: frame 0 of the restarted WAL, the writer
// stopped before its first frame. Every row of the previous generation
// was committed before that cut (before the restart), so the restore
// rolled them all back: none is replayed, all go to pre-replacement/.
// Before the previous generation's rows counted as rows at the cut, the
// cut held no row and all 12 were replayed over the backup.
func TestDivertPreviousGenerationAtCut(t *testing.T) {
	e := newDivertEnv(t)
	db := e.orphan.path
	e.orphan.close()
	backup := filepath.Join(e.dir, "backup.db")
	hermestest.CopyFile(t, db, backup, 0o600)
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "old", Count: 12, Linger: true, CheckpointEvery: -1})
	w1.WaitAcks(t, 12)
	w1.Kill()
	<-w1.Done()
	old := readAll(t, db+"-wal")
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "next", Count: 2, Linger: true, CheckpointEvery: 1})
	w2.WaitAcks(t, 2)
	w2.Kill()
	<-w2.Done()
	restarted := readAll(t, db+"-wal")
	nh, _ := store.ParseWALHeader(restarted)
	writeFile(t, db+"-wal", append(append([]byte{}, restarted[:store.WALHeaderSize]...), old[store.WALHeaderSize:]...))
	cutAt := time.Now()
	writeFile(t, db, readAll(t, backup))
	c, err := WriteCapture(context.Background(), openPinned(t, db), CaptureRequest{DBPath: db, PID: w1.Pid, Kind: KindRewritten,
		IncidentID: "inc-prevgen-cut", Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	req := e.request(c.Dir, "inc-prevgen-cut", KindRewritten)
	req.ProfileHome, req.ReplacedAt = e.home, cutAt
	req.Cut = &FrameCut{WALCut: store.WALCut{Frame: 0, Salt1: nh.Salt1, Salt2: nh.Salt2}, At: cutAt}
	rep, sr, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if sr == nil || sr.Previous == nil || sr.Rows.Messages != 12 {
		t.Fatalf("salvage report %+v", sr)
	}
	if rep.ReplayRows != 0 || rep.PreReplacementRows != 12 {
		t.Fatalf("divert at %s: %d rows replayed, %d pre-replacement (%s); want 0 and 12: the previous generation was committed before the cut",
			req.Cut, rep.ReplayRows, rep.PreReplacementRows, rep.CutNote)
	}
}
