package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setNondumpable makes /proc/<pid> root's: a scan by the writer's own
// user can no longer read its fds or maps, only its locks.
func setNondumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
