//go:build linux || darwin

package recovery

import "golang.org/x/sys/unix"

// freeBytes is the space an unprivileged writer may still use on d's
// filesystem, or -1 when unknown.
func freeBytes(d capDir) int64 {
	var st unix.Statfs_t
	if err := unix.Fstatfs(d.fd, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
