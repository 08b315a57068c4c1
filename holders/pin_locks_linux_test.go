package holders

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
	"github.com/stateguard/stateguard/store"
)

// A pin whose fd turns out to be another file than the one wanted (the
// holder closed it and the number was reused) must not drop this
// process's POSIX locks on that file: here it is the -shm of a store the
// agent reads, as when a pin met a store's current -shm.
func TestPinOfAnotherFileKeepsTheAgentsSHMLocks(t *testing.T) {
	db, w := startStore(t)
	w.AcksGrow(t, 2)
	shm := idOf(t, db+"-shm")
	// Only this process's locks: the writer takes and drops its own
	// while it commits, so a count of all of them moves on its own.
	posix := func() int {
		n := 0
		for _, l := range locksOn(t, shm) {
			if l.Class == "POSIX" && l.PID == os.Getpid() {
				n++
			}
		}
		return n
	}
	before := posix()
	ro, err := store.OpenReadOnly(db)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tx, err := ro.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRow("SELECT count(*) FROM messages").Scan(&n); err != nil {
		t.Fatal(err)
	}
	held := posix()
	if held <= before {
		t.Fatalf("the read transaction added no POSIX lock of ours on the -shm (%d, before %d)", held, before)
	}
	f, err := os.Open(db + "-shm") // an fd of ours on the -shm, as a holder's would be
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	other := fileid.ID{Dev: shm.Dev, Ino: shm.Ino + 1_000_000}
	if _, err := Pin(os.Getpid(), int(f.Fd()), other); !errors.Is(err, fileid.ErrIdentityChanged) {
		t.Fatalf("pin of the -shm as another inode: %v, want ErrIdentityChanged", err)
	}
	if got := posix(); got != held {
		t.Fatalf("POSIX locks on the -shm after a refused pin: %d, want %d", got, held)
	}
	p, err := Pin(os.Getpid(), int(f.Fd()), shm)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(p.Fd()), &st); err != nil || fileid.FromStat(&st) != shm {
		t.Fatalf("pinned %v (%v), want %v", fileid.FromStat(&st), err, shm)
	}
}
