package store

import (
	"errors"
	"os"
	"syscall"
)

// fileStateOf converts an Lstat/Fstat result. Linux st_dev is the kernel's
// dev_t as userspace sees it, the same number /proc/<pid>/fdinfo and
// /proc/<pid>/maps are decoded to, so identities compare across packages.
func fileStateOf(fi os.FileInfo) FileState {
	fs := FileState{Exists: true, Size: fi.Size(), Mode: fi.Mode(), UID: -1, GID: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fs.ID = FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
		fs.Nlink = uint64(st.Nlink)
		fs.UID = int(st.Uid)
		fs.GID = int(st.Gid)
	}
	return fs
}

// identitySupported reports whether fileStateOf yields real (dev, ino).
const identitySupported = true

// noFollowFlags are added to every raw open of a store file: never follow a
// symlink, and never block if the path became a FIFO since the Lstat.
const noFollowFlags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK

// isLoop reports the error O_NOFOLLOW gives for a symlink: the path was
// swapped for a link since the lstat.
func isLoop(err error) bool { return errors.Is(err, syscall.ELOOP) }
