package fileid

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

// Supported reports whether Of yields real identities on this OS.
const Supported = true

// Of converts an Lstat/Fstat result. Linux st_dev is the kernel's dev_t as
// userspace sees it, the number /proc/<pid>/fdinfo and /proc/<pid>/maps
// decode to.
func Of(fi fs.FileInfo) State {
	s := State{Exists: true, Size: fi.Size(), Mode: fi.Mode(), UID: -1, GID: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ID = ID{Dev: st.Dev, Ino: st.Ino}
		s.Nlink, s.UID, s.GID = uint64(st.Nlink), int(st.Uid), int(st.Gid)
	}
	return s
}

// FromStat is the identity in a raw stat result (fstatat, fstat on an fd).
func FromStat(st *unix.Stat_t) ID { return ID{Dev: st.Dev, Ino: st.Ino} }
