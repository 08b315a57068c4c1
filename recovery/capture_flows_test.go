//go:build linux

package recovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// TestMispairedQuarantineThenCapture: the main is renamed over but the old
// generation's -wal/-shm stay at the path. While the writer is frozen they
// are quarantined into a staging capture (before any new opener could
// recover them into the new main); after the kill the capture adopts them,
// holds every acknowledged row, and the next writer gets a clean store.
func TestMispairedQuarantineThenCapture(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true})
	before := len(w.WaitAcks(t, 120))
	ids := map[string]fileid.ID{"main": statID(t, db), "-wal": statID(t, db+"-wal"), "-shm": statID(t, db+"-shm")}
	fresh := filepath.Join(dir, "fresh.db")
	if err := hermestest.CreateStore(fresh); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fresh, db); err != nil {
		t.Fatal(err)
	}
	w.WaitAcks(t, before+30)
	kill := stopWriter(t, w)
	pinned := pinFromProc(t, w.Pid, db, ids)

	req := CaptureRequest{DBPath: db, PID: w.Pid, Kind: KindMispaired, IncidentID: "inc-m"}
	staging, err := StageCapture(req)
	if err != nil {
		t.Fatal(err)
	}
	moved, err := QuarantineSidecars(db, staging, map[string]fileid.ID{"-wal": ids["-wal"], "-shm": ids["-shm"]})
	if err != nil || len(moved) != 2 {
		t.Fatalf("quarantine: %v %v", moved, err)
	}
	kill()
	acks := w.Acks(t)

	req.Staging = staging
	c, err := WriteCapture(context.Background(), CaptureSource{Main: pinned["main"], WAL: pinned["-wal"], SHM: pinned["-shm"]}, req)
	if err != nil {
		t.Fatal(err)
	}
	if o := c.Manifest.Stateguard.Origins; o["state.db-wal"] != "quarantined" || o["state.db-shm"] != "quarantined" || len(c.Manifest.PathGeneration) != 0 {
		t.Fatalf("origins %v, path generation %v", o, c.Manifest.PathGeneration)
	}
	checkModes(t, c.Dir)
	checkHashes(t, c.Dir, c.Manifest)
	p, err := PrivateCopy(context.Background(), c.Dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, hermestest.OpenDB(t, "file:"+p), acks)

	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 5})
	<-w2.Done()
	healthy := hermestest.OpenDB(t, "file:"+db+"?mode=ro")
	checkRows(t, healthy, w2.Acks(t))
	var n int
	if err := healthy.QueryRow(`SELECT count(*) FROM messages WHERE session_id != 's2'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the new store holds %d rows of the old WAL (%v)", n, err)
	}
}

// TestSidecarLostSnapshotCapture: the -wal/-shm are unlinked under a live
// writer, which goes on committing into its orphan WAL. At detection the
// shared main is snapshotted under a read transaction on the new
// generation; a second writer then checkpoints into the main. The capture
// (snapshot + orphan WAL) still holds every row the first writer
// acknowledged, and the healthy store stays sound.
func TestSidecarLostSnapshotCapture(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "state.db")
	w1 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Create: true, CheckpointEvery: 20})
	before := len(w1.WaitAcks(t, 100))
	ids := map[string]fileid.ID{"-wal": statID(t, db+"-wal"), "-shm": statID(t, db+"-shm")}
	// The agent's long-lived fd on the current main; it is closed only
	// after every SQLite connection of this process on it (cleanups run
	// last-registered first).
	mainFD, err := os.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mainFD.Close() })
	for _, s := range []string{"-wal", "-shm"} {
		if err := os.Remove(db + s); err != nil {
			t.Fatal(err)
		}
	}
	w1.WaitAcks(t, before+50)
	kill := stopWriter(t, w1)
	pinned := pinFromProc(t, w1.Pid, db, ids)
	// The freeze may have caught the writer inside a checkpoint, with
	// the shared main half written: finish it, as the agent does, before
	// the new generation reads the main alone.
	finishCheckpoint(t, db, pinned)

	reader := hermestest.OpenDB(t, "file:"+db)
	tx, err := reader.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	if err := tx.QueryRow(`SELECT count(*) FROM messages`).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(dir, "state.db.stateguard-snapshot")
	if err := SnapshotMain(context.Background(), db, mainFD, snap); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(snap); err != nil || fi.Mode() != 0o600 {
		t.Fatalf("snapshot: %v %v", fi, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Session: "s2", Count: 40, CheckpointEvery: 5})
	<-w2.Done()
	kill()
	acks := w1.Acks(t)

	c, err := WriteCapture(context.Background(), CaptureSource{WAL: pinned["-wal"], SHM: pinned["-shm"], MainSnapshot: snap},
		CaptureRequest{DBPath: db, PID: w1.Pid, Kind: KindSidecarLost, IncidentID: "inc-s"})
	if err != nil {
		t.Fatal(err)
	}
	sg := c.Manifest.Stateguard
	if sg.MainSource != "snapshot" || sg.Origins["state.db"] != "link" || c.Manifest.Main.Identity.ID() != statID(t, db) || sg.WALHeader == nil {
		t.Fatalf("stateguard %+v main %+v", sg, c.Manifest.Main)
	}
	if err := os.Remove(snap); err != nil {
		t.Fatal(err)
	}
	checkModes(t, c.Dir)
	p, err := PrivateCopy(context.Background(), c.Dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	checkRows(t, hermestest.OpenDB(t, "file:"+p), acks)
	checkRows(t, hermestest.OpenDB(t, "file:"+db+"?mode=ro"), w2.Acks(t))

	// A main that is no longer the file at the path is refused.
	if err := os.Rename(db, db+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SnapshotMain(context.Background(), db, mainFD, filepath.Join(dir, "again")); err == nil {
		t.Fatal("SnapshotMain accepted an fd that is not the main at the path")
	}
}

// finishCheckpoint runs FinishInterruptedBackfill on the shared main with
// the orphan's pinned -wal and -shm. Its writable fd is closed at once,
// before this process opens any SQLite connection on the store.
func finishCheckpoint(t *testing.T, db string, pinned map[string]*os.File) BackfillReport {
	t.Helper()
	main, err := os.OpenFile(db, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer main.Close()
	rep, err := FinishInterruptedBackfill(context.Background(), db, BackfillSource{Main: main, WAL: pinned["-wal"], SHM: pinned["-shm"]})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Interrupted {
		t.Logf("the writer was frozen inside a checkpoint: %+v", rep)
	}
	return rep
}
