//go:build unix && !linux && !darwin

package recovery

import "golang.org/x/sys/unix"

func fileIDOf(st *unix.Stat_t) FileID { return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} }

func renameNoReplace(oldDir int, oldName string, newDir int, newName string) error {
	return renameCheckFirst(oldDir, oldName, newDir, newName)
}

// freeBytes is unknown here: the capture relies on ENOSPC alone.
func freeBytes(d capDir) int64 { return -1 }
