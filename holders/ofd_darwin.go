package holders

import (
	"os"

	"golang.org/x/sys/unix"
)

// fOFDSetLK is F_OFD_SETLK in <sys/fcntl.h> (private on macOS, and what
// Hermes' own guard uses there).
const fOFDSetLK = 90

func ofdReadLock(f *os.File, start, n int64) error {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: start, Len: n}
	return unix.FcntlFlock(f.Fd(), fOFDSetLK, &lk)
}
