package holders

import (
	"os"

	"golang.org/x/sys/unix"
)

func ofdReadLock(f *os.File, start, n int64) error {
	lk := unix.Flock_t{Type: unix.F_RDLCK, Whence: 0, Start: start, Len: n}
	return unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk)
}
