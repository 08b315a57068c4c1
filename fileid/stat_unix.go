//go:build linux || darwin

package fileid

import (
	"io/fs"
	"syscall"
)

// Supported reports whether Of yields real identities on this OS.
const Supported = true

// Of converts an Lstat/Fstat result.
func Of(fi fs.FileInfo) State {
	s := State{Exists: true, Size: fi.Size(), Mode: fi.Mode(), UID: -1, GID: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ID = ID{Dev: devOf(st), Ino: st.Ino}
		s.Nlink, s.UID, s.GID = uint64(st.Nlink), int(st.Uid), int(st.Gid)
	}
	return s
}
