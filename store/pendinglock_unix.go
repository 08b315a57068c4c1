//go:build unix

package store

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sqlitePendingByte is where SQLite's lock bytes start in every database
// file (PENDING_BYTE, 0x40000000): a connection takes a read lock on it
// before each SHARED lock on the main.
const sqlitePendingByte = 0x40000000

// errNewConnectionsWaiting means another process is taking an exclusive
// lock on the main (it holds or wants PENDING): the idle checkpoint is
// skipped, as for any busy store.
var errNewConnectionsWaiting = errors.New("another connection holds the main's PENDING lock")

// holdNewConnections write-locks the main's PENDING byte through f (opened
// for writing), so no connection can take the SHARED lock it needs to
// start, while the ones that already hold it go on. SQLite itself does
// this before an exclusive lock. The idle checkpoint holds it while it
// copies the WAL into the main: a connection that opened the store after
// its -wal and -shm were unlinked (a fresh pair, which no lock of the
// checkpoint's covers) would otherwise read the main half backfilled
// ("database disk image is malformed"). Such a connection waits in its
// busy handler instead, for as long as the copy takes.
func holdNewConnections(f *os.File) (release func(), err error) {
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: sqlitePendingByte, Len: 1}
	if err := unix.FcntlFlock(f.Fd(), ofdSetLK, &lk); err != nil {
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
			return nil, errNewConnectionsWaiting
		}
		return nil, fmt.Errorf("lock the PENDING byte of %s: %w", f.Name(), err)
	}
	return func() {
		lk.Type = unix.F_UNLCK
		_ = unix.FcntlFlock(f.Fd(), ofdSetLK, &lk)
	}, nil
}
