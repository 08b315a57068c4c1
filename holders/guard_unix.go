//go:build unix

package holders

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// guardOpenFlags: never follow a symlink put at the path, and never block
// opening a FIFO put there; os.OpenFile adds O_CLOEXEC.
const guardOpenFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

func isSymlinkErr(err error) bool { return errors.Is(err, syscall.ELOOP) }

// isLockConflict: F_OFD_SETLK (like F_SETLK) says EAGAIN or EACCES when
// another lock is in the way.
func isLockConflict(err error) bool {
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

// dupFile duplicates f's fd with close-on-exec set.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}
