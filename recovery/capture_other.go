//go:build unix && !linux && !darwin

package recovery

func renameNoReplace(oldDir int, oldName string, newDir int, newName string) error {
	return renameCheckFirst(oldDir, oldName, newDir, newName)
}

// freeBytes is unknown here: the capture relies on ENOSPC alone.
func freeBytes(d capDir) int64 { return -1 }
