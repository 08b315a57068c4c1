package supervisor

// F_OFD_SETLK is Linux's: the test takes a write lock the way a
// connection in EXCLUSIVE locking mode holds it.

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/control"
	"github.com/stateguard/stateguard/holders"
	"github.com/stateguard/stateguard/internal/hermestest"
)

// A write lock in the guard's way (a connection in EXCLUSIVE locking
// mode) leaves the store unavailable with guard.failed, and the guard arms
// by itself once the lock is gone (tick retry; no file changes).
func TestGuardRetriesRefusedLock(t *testing.T) {
	home, db := testHome(t)
	// A store with its -wal and -shm and no process on it: our own guard
	// keeps the writer's close from removing them.
	w := hermestest.StartWriter(t, hermestest.WriterOptions{DB: db, Count: 3, Linger: true})
	own, err := holders.ArmGuard(db, guardFiles(readGen(t, db)), requireWAL)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	own.Close()
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Start: 0x40000002 + 7, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}

	a := startAgent(t, home, guardOn)
	st := waitGuard(t, a, db, control.GuardUnavailable, 10*time.Second)
	if st.Reason != "lock refused" {
		t.Fatalf("guard %+v, want unavailable: lock refused", st)
	}
	lk.Type = unix.F_UNLCK
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatal(err)
	}
	waitGuard(t, a, db, control.GuardArmed, 5*time.Second)
	waitGuarded(t, fileID(t, db), fileID(t, db+"-shm"))
}
