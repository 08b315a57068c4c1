package recovery

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames without ever replacing an existing target
// (renameatx_np RENAME_EXCL), falling back to check then rename on a
// volume without it.
func renameNoReplace(oldDir int, oldName string, newDir int, newName string) error {
	err := unix.RenameatxNp(oldDir, oldName, newDir, newName, unix.RENAME_EXCL)
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) {
		return renameCheckFirst(oldDir, oldName, newDir, newName)
	}
	return err
}
