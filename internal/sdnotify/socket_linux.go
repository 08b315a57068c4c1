package sdnotify

import "golang.org/x/sys/unix"

func dgramSocket() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
}
