//go:build unix

package holders

import (
	"errors"
	"syscall"
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
