//go:build unix

package holders

import (
	"os"

	"golang.org/x/sys/unix"
)

// ExclusiveLocker reports the pid of a process that holds a POSIX write
// lock on the SHARED range of the main database file f: a SQLite
// connection that has taken the file EXCLUSIVE. In WAL mode a connection
// does that only as the last closer (to checkpoint and unlink its -wal
// and -shm) or in locking_mode=EXCLUSIVE, which uses no -shm at all. One
// F_GETLK, which sets no lock; OFD locks (the agent's own) show pid -1
// and are not reported.
func ExclusiveLocker(f *os.File) (pid int, ok bool) {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: sharedFirst, Len: sharedSize}
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &lk); err != nil {
		return 0, false
	}
	if lk.Type != unix.F_WRLCK || lk.Pid <= 0 {
		return 0, false
	}
	return int(lk.Pid), true
}
