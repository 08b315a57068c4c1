//go:build unix

package supervisor

import (
	"errors"
	"syscall"
)

// processAlive sends signal 0: no error, or EPERM (it exists but is not
// ours to signal), means a process with that pid exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
