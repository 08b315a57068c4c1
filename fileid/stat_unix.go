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

// ModeOf converts raw st_mode bits (stat, fstatat, statx) to an
// fs.FileMode, as os.Lstat does, for callers that stat without os.
func ModeOf(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}
