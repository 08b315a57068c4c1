//go:build linux || darwin

package store

import "golang.org/x/sys/unix"

// FreeBytes is the space an unprivileged writer may still use on the
// filesystem of the directory fd, or -1 when unknown.
func FreeBytes(dirfd int) int64 {
	var st unix.Statfs_t
	if err := unix.Fstatfs(dirfd, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
