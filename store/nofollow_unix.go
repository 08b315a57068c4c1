//go:build unix

package store

import (
	"errors"
	"syscall"
)

// isLoop reports the error O_NOFOLLOW gives for a symlink: the path was
// swapped for a link since the lstat.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }
