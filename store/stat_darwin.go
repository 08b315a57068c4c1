package store

import (
	"errors"
	"os"
	"syscall"
)

// fileStateOf converts an Lstat/Fstat result. Darwin's st_dev is an int32;
// it is widened through uint32 so a device number with the high bit set
// does not sign-extend, matching the vst_dev libproc reports.
func fileStateOf(fi os.FileInfo) FileState {
	fs := FileState{Exists: true, Size: fi.Size(), Mode: fi.Mode(), UID: -1, GID: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		fs.ID = FileID{Dev: uint64(uint32(st.Dev)), Ino: st.Ino}
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
