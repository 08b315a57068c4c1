package holders

import (
	"os"
	"testing"

	"github.com/stateguard/stateguard/internal/hermestest"
)

// A read lock on an orphan's -shm checkpoint byte makes its own
// checkpoints busy (nothing is backfilled) and lets its writes go on;
// once the lock's fd is closed, the checkpoint runs.
func TestLockSHMCheckpointHoldsOffCheckpoints(t *testing.T) {
	db := hermestest.NewStore(t)
	c := hermestest.OpenNoCheckpoint(t, db)
	if _, err := c.Exec("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)"); err != nil {
		t.Fatal(err)
	}
	shm, err := os.Open(db + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if err := LockSHMCheckpoint(shm); err != nil {
		t.Fatal(err)
	}
	checkpoint := func() (busy, log, done int) {
		t.Helper()
		if err := c.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil {
			t.Fatal(err)
		}
		return
	}
	if busy, _, done := checkpoint(); busy != 1 || done > 0 {
		t.Fatalf("checkpoint under the lock: busy %d, %d frames backfilled; want busy and none", busy, done)
	}
	if _, err := c.Exec("INSERT INTO sessions (id, source, started_at) VALUES ('t', 'cli', 2)"); err != nil {
		t.Fatalf("a write under the lock: %v", err)
	}
	shm.Close()
	if busy, log, done := checkpoint(); busy != 0 || done != log {
		t.Fatalf("checkpoint after the lock: busy %d, %d of %d frames; want all", busy, done, log)
	}
}

// An orphan that had checkpointed its whole WAL just before it was
// pinned restarts that WAL (new salts, frames from 1) at its next write,
// and the capture can no longer show the store at its incident's frame
// cut ("the orphan restarted its WAL after the cut": the divert falls
// back to the timestamps and replays rolled-back rows). Under the lock
// the write appends instead: the salts stay.
func TestLockSHMCheckpointHoldsOffWALRestart(t *testing.T) {
	db := hermestest.NewStore(t)
	c := hermestest.OpenNoCheckpoint(t, db)
	if _, err := c.Exec("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)"); err != nil {
		t.Fatal(err)
	}
	var busy, log, done int
	if err := c.QueryRow("PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &log, &done); err != nil || busy != 0 || done != log {
		t.Fatalf("checkpoint before the lock: busy %d, %d of %d frames, %v", busy, done, log, err)
	}
	salts := func() [8]byte {
		t.Helper()
		b, err := os.ReadFile(db + "-wal")
		if err != nil || len(b) < 32 {
			t.Fatalf("read -wal header: %v", err)
		}
		return [8]byte(b[16:24])
	}
	before := salts()
	shm, err := os.Open(db + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	if err := LockSHMCheckpoint(shm); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec("INSERT INTO sessions (id, source, started_at) VALUES ('t', 'cli', 2)"); err != nil {
		t.Fatalf("a write under the lock: %v", err)
	}
	if after := salts(); after != before {
		t.Fatalf("the write restarted the WAL under the lock (salts %x, then %x)", before, after)
	}
}
