package store

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCloseCheckpointerBusy: while another connection holds the WAL's
// checkpointer lock, SQLite cannot start the final checkpoint at all (it
// reports -1 frames and -1 backfilled); Close must not take those equal
// counts for "every frame is in the main".
func TestCloseCheckpointerBusy(t *testing.T) {
	path := newHermesStore(t)
	idle := rawDB(t, path) // not the last closer: its close would checkpoint
	if err := idle.Ping(); err != nil {
		t.Fatal(err)
	}
	w, err := OpenWritable(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendOne(t, w, "s1", "replayed")
	shm, err := os.OpenFile(path+"-shm", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer shm.Close()
	// WAL_CKPT_LOCK: byte 120+1 of the wal-index, as SQLite locks it.
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 121, Len: 1}
	if err := unix.FcntlFlock(shm.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	w.closeBudget = 100 * time.Millisecond
	if err := w.Close(); !errors.Is(err, ErrCheckpointIncomplete) {
		t.Fatalf("Close with the checkpointer lock held elsewhere: %v, want ErrCheckpointIncomplete", err)
	}
	if n := mainAloneCount(t, path); n != 0 {
		t.Fatalf("main alone has %d messages, want the row only in the -wal", n)
	}
}
