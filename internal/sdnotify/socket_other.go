//go:build unix && !linux

package sdnotify

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// dgramSocket: no SOCK_CLOEXEC here; the fork lock keeps an exec from
// running between the socket and the flag.
func dgramSocket() (int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM, 0)
	if err == nil {
		unix.CloseOnExec(fd)
	}
	return fd, err
}
