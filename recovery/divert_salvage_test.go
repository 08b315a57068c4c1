//go:build linux

package recovery

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
	"github.com/stateguard/stateguard/walsalvage"
)

// TestDivertSalvaged: the test writer commits into a store whose WAL is
// then taken while the main is rewritten in place with an empty backup
// (cp over state.db), so the orphan WAL has no main it fits. The rows
// salvaged from its page images are diverted like a capture's, replayed,
// and every acknowledged row is in the healthy store exactly once, its
// session created from the salvaged session row; a second divert of the
// incident writes nothing.
func TestDivertSalvaged(t *testing.T) {
	e := newDivertEnv(t)
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(e.dir, "backup.db")
	hermestest.CopyFile(t, e.healthy, backup, 0o600)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: e.healthy, Count: 12, Linger: true, CheckpointEvery: -1, ToolEvery: 5})
	acks := w.WaitAcks(t, 12)
	capture := filepath.Join(e.dir, "capture")
	if err := os.Mkdir(capture, 0o700); err != nil {
		t.Fatal(err)
	}
	hermestest.CopyFile(t, e.healthy+"-wal", filepath.Join(capture, "state.db-wal"), 0o600)
	w.Kill()
	<-w.Done()
	// The operator's cp: same inode, the backup's bytes, sidecars gone.
	writeFile(t, e.healthy, readAll(t, backup))
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(e.healthy + s); err != nil {
			t.Fatal(err)
		}
	}

	wal, err := os.Open(filepath.Join(capture, "state.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	defer wal.Close()
	st, _ := wal.Stat()
	res, err := walsalvage.Salvage(context.Background(), wal, st.Size(), walsalvage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// 12 acknowledged commits; the tool turns (seq 5, 10) are two rows each.
	if res.Report.Rows.Messages != 14 || res.Report.Rows.Sessions != 1 || res.Report.Unrecoverable.Messages != 0 {
		t.Fatalf("salvage report %+v", res.Report)
	}

	req := e.request(capture, "inc-salvage", KindSidecarLost)
	req.ProfileHome = e.home
	rep, err := DivertSalvaged(context.Background(), req, res)
	if err != nil {
		t.Fatal(err)
	}
	if rep.ReplayRows != 14 || rep.Sessions != 1 || len(rep.Files) != 1 || !rep.Files[0].NewSession || rep.Files[0].Session == nil {
		t.Fatalf("divert report %+v", rep)
	}
	if s := rep.Files[0].Session; s.Model.String != "test-model" || s.ProfileName.String != "test" {
		t.Fatalf("session template %+v, want the salvaged row's model and profile", s)
	}
	if n := e.replayAll(e.healthyWriter(), rep, false); n != 14 {
		t.Fatalf("replayed %d rows, want 14", n)
	}
	checkRows(t, readOnly(t, e.healthy), acks)

	again, err := DivertSalvaged(context.Background(), req, res)
	if err != nil || !again.Existing {
		t.Fatalf("second divert: %+v %v", again, err)
	}
}

// TestDivertUnpairedCapture: a capture whose WAL was built on another
// main than the one it holds (the main rewritten in place with an older
// backup under a live WAL, as cp does) is refused by Divert as
// ErrCaptureUnpaired instead of diverting whatever the mix of pages
// decodes to; DivertWALImages then reads the rows from the WAL's page
// images, and the rows committed after the cut reach the healthy store
// exactly once.
func TestDivertUnpairedCapture(t *testing.T) {
	e := newDivertEnv(t)
	db := e.orphan.path
	e.orphan.close()
	backup := filepath.Join(e.dir, "backup.db")
	hermestest.CopyFile(t, db, backup, 0o600) // the schema only: an old backup
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "old", Count: 400, CheckpointEvery: 50})
	w1.WaitAcks(t, 400)
	<-w1.Done()
	cut := time.Now()
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "new", Count: 12, Linger: true, CheckpointEvery: -1})
	acks := w2.WaitAcks(t, 12)
	kill := stopWriter(t, w2)
	src := openPinned(t, db)
	// cp backup.db state.db: same inode, the backup's bytes.
	writeFile(t, db, readAll(t, backup))
	c, err := WriteCapture(context.Background(), src, CaptureRequest{DBPath: db, PID: w2.Pid, Kind: KindRewritten,
		IncidentID: "inc-unpaired", Now: time.Date(2026, 10, 1, 7, 0, 0, 0, time.UTC)})
	kill()
	if err != nil {
		t.Fatal(err)
	}
	if err := hermestest.CreateStore(e.healthy); err != nil {
		t.Fatal(err)
	}
	req := e.request(c.Dir, "inc-unpaired", KindRewritten)
	req.ProfileHome, req.ReplacedAt = e.home, cut
	if r, err := Divert(context.Background(), req); !errors.Is(err, ErrCaptureUnpaired) {
		t.Fatalf("divert of an unpaired capture: %+v %v, want ErrCaptureUnpaired", r, err)
	}
	rep, sr, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if sr == nil || sr.Rows.Messages < 12 || !slices.Contains(sr.SessionsSeen, "new") {
		t.Fatalf("salvage report %+v", sr)
	}
	e.replayAll(e.healthyWriter(), rep, false)
	checkRows(t, readOnly(t, e.healthy), acks)
}

// A rewritten capture whose WAL is empty (a TRUNCATE checkpoint emptied
// it before the rewrite) holds no committed frame: SQLite would read no row from it, so the salvage has none to
// divert, and that is a divert, not a failure (early chaos runs
// ended such incidents unrecoverable: "read wal header: 0 of 32 bytes").
func TestDivertWALImagesEmptyWAL(t *testing.T) {
	_, req, _ := cutFixture(t, func(o *sqlStore) { o.checkpoint() })
	req.Kind = KindRewritten
	if st, err := os.Stat(filepath.Join(req.Capture, "state.db-wal")); err != nil || st.Size() != 0 {
		t.Fatalf("captured -wal: %v, want an empty one", err)
	}
	rep, sr, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatalf("divert of a capture with an empty WAL: %v", err)
	}
	if sr == nil || sr.FramesCommitted != 0 || rep.ReplayRows != 0 || rep.PreReplacementRows != 0 || len(rep.Files) != 0 {
		t.Fatalf("report %+v, salvage %+v: want nothing diverted", rep, sr)
	}
}

// A mispaired capture with no main image (the main was renamed over and
// no process held it, so only the quarantined -wal/-shm were captured):
// Divert says ErrCaptureUnpaired, the engine's cue for DivertWALImages,
// which diverts the rows committed after the cut from the page images.
// Early chaos runs failed such incidents ("has no main image") 18
// times on seed 1.
func TestDivertCaptureWithoutMain(t *testing.T) {
	e, req, _ := cutFixture(t, nil)
	capture := req.Capture
	// The same orphan captured again without its main.
	var src CaptureSource
	_, src.WAL, src.SHM = hermestest.OpenGeneration(t, e.orphan.path)
	c, err := WriteCapture(context.Background(), src, CaptureRequest{
		DBPath: e.orphan.path, PID: os.Getpid(), Kind: KindMispaired, IncidentID: "inc-nomain",
		Now: time.Date(2026, 10, 1, 7, 0, 1, 0, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	if c.Dir == capture {
		t.Fatal("same capture directory")
	}
	req.Capture, req.IncidentID, req.Kind = c.Dir, "inc-nomain", KindMispaired
	if _, err := Divert(context.Background(), req); !errors.Is(err, ErrCaptureUnpaired) {
		t.Fatalf("divert of a capture without a main: %v, want ErrCaptureUnpaired", err)
	}
	rep, _, err := DivertWALImages(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	replay, _ := divertContents(t, rep)
	if !slices.Equal(replay, []string{"row 5", "row 6", "row 7"}) {
		t.Fatalf("replay %v (cut note %q), want rows 5-7", replay, rep.CutNote)
	}
}
