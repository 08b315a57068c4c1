package recovery

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames without ever replacing an existing target
// (renameat2 RENAME_NOREPLACE); a filesystem without it falls back to a
// check then rename, which only a concurrent creator of the same name
// could race.
func renameNoReplace(oldDir int, oldName string, newDir int, newName string) error {
	err := unix.Renameat2(oldDir, oldName, newDir, newName, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		return renameCheckFirst(oldDir, oldName, newDir, newName)
	}
	return err
}
