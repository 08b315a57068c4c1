//go:build unix

package store

import (
	"errors"
	"syscall"
)

// noFollowFlags are added to every raw open of a store file: never follow a
// symlink, and never block if the path became a FIFO since the Lstat.
const noFollowFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// isLoop reports the error O_NOFOLLOW gives for a symlink: the path was
// swapped for a link since the lstat.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }
