package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// backlogOf reads the store's -wal and -shm raw, the way the agent reads
// the guard's fds (this test process has no SQLite connection on them).
func backlogOf(t *testing.T, db string, withSHM bool) WALBacklog {
	t.Helper()
	wal, err := os.Open(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer wal.Close()
	var shm *os.File
	if withSHM {
		if shm, err = os.Open(db + "-shm"); err != nil {
			t.Fatal(err)
		}
		defer shm.Close()
	}
	var b WALBacklog
	if shm != nil {
		b, err = ReadWALBacklog(wal, shm)
	} else {
		b, err = ReadWALBacklog(wal, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A live writer's WAL with no checkpoint: the wal-index and a walk of the
// frames agree on the last committed frame, nothing is backfilled.
// Without the -shm (or with a damaged one) the walk alone answers, and
// cannot vouch for any checkpoint.
func TestWALBacklogUncheckpointed(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 20, CheckpointEvery: -1, Linger: true})
	w.WaitAcks(t, 20)

	idx := backlogOf(t, db, true)
	if !idx.IndexOK || idx.Committed == 0 || idx.Backfilled != 0 || !idx.Pending() {
		t.Fatalf("from the wal-index: %+v, want committed frames, none backfilled, pending", idx)
	}
	walk := backlogOf(t, db, false)
	if walk.IndexOK || walk.Committed != idx.Committed || !walk.Pending() {
		t.Fatalf("from the frames: %+v, want the index's %d committed frames, pending", walk, idx.Committed)
	}

	// A -shm that is not a wal-index of this WAL is not trusted.
	wal, err := os.Open(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer wal.Close()
	b, err := ReadWALBacklog(wal, bytes.NewReader(make([]byte, 32768)))
	if err != nil || b.IndexOK || b.Committed != idx.Committed {
		t.Fatalf("with a zeroed -shm: %+v %v", b, err)
	}
	// A WAL whose first frame is torn has nothing committed.
	raw, err := os.ReadFile(db + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	raw[WALHeaderSize+WALFrameHeaderSize] ^= 0xff
	if b, err := ReadWALBacklog(bytes.NewReader(raw), nil); err != nil || b.Committed != 0 || b.Pending() {
		t.Fatalf("first frame damaged: %+v %v, want nothing committed", b, err)
	}
	if b, err := ReadWALBacklog(bytes.NewReader(raw[:10]), nil); err != nil || b.Pending() {
		t.Fatalf("torn header: %+v %v", b, err)
	}
}

// A PASSIVE checkpoint that copied every frame leaves a WAL whose loss
// costs nothing: the wal-index says backfilled == committed.
func TestWALBacklogCheckpointed(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 10, CheckpointEvery: 5, Linger: true})
	w.WaitAcks(t, 10)
	deadline := time.Now().Add(10 * time.Second)
	var b WALBacklog
	for b = backlogOf(t, db, true); b.Pending(); b = backlogOf(t, db, true) {
		if time.Now().After(deadline) {
			t.Fatalf("writer's checkpoint never showed: %+v", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !b.IndexOK || b.Committed == 0 || b.Backfilled != b.Committed {
		t.Fatalf("after the writer's checkpoint: %+v", b)
	}
}

// CheckpointIdle copies the WAL into the main and truncates it, next to a
// connection that is open but idle; it refuses files other than the ones
// the caller vouches for.
func TestCheckpointIdle(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 15, CheckpointEvery: -1, Linger: true})
	w.WaitAcks(t, 15)
	g, err := ReadGeneration(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wrong := g.IDs()
	wrong.SHM = wrong.WAL
	if _, err := resolved(t, db).CheckpointIdle(ctx, wrong); !errors.Is(err, ErrGenerationMoved) {
		t.Fatalf("CheckpointIdle with the wrong -shm = %v, want ErrGenerationMoved", err)
	}
	cp, err := resolved(t, db).CheckpointIdle(ctx, g.IDs())
	if err != nil || !cp.Done {
		t.Fatalf("CheckpointIdle = %+v, %v", cp, err)
	}
	if fi, err := os.Stat(db + "-wal"); err != nil || fi.Size() != 0 {
		t.Fatalf("-wal after the checkpoint: %v %v, want it there and empty", fi, err)
	}
	if b := backlogOf(t, db, true); b.Pending() {
		t.Fatalf("backlog after the checkpoint: %+v", b)
	}
	// The main file alone now has every row.
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	copyPath := t.TempDir() + "/main.db"
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawDB(t, copyPath).QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil || n != 15 {
		t.Fatalf("messages in the main file alone: %d %v, want 15", n, err)
	}
}

// While BeginRead holds its snapshot no checkpoint can truncate the WAL
// under it; once it ends, one can.
func TestBeginReadHoldsOffCheckpoints(t *testing.T) {
	db := newHermesStore(t)
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 10, CheckpointEvery: -1, Linger: true})
	w.WaitAcks(t, 10)
	g, err := ReadGeneration(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	end, err := BeginRead(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if cp, err := resolved(t, db).CheckpointIdle(ctx, g.IDs()); err != nil || cp.Done {
		end()
		t.Fatalf("checkpoint under a held read: %+v %v, want not done", cp, err)
	}
	end()
	if cp, err := resolved(t, db).CheckpointIdle(ctx, g.IDs()); err != nil || !cp.Done {
		t.Fatalf("checkpoint after the read ended: %+v %v", cp, err)
	}
}
