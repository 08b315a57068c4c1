//go:build unix && !linux

package holders

import (
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

// lstatFileAt is fstatat(2) of name in the directory fd without following
// a symlink; dir is the directory's path, for messages. The birth time is
// not used here.
func lstatFileAt(fd int, dir, name string) (fileid.State, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fileid.State{}, 0, &fs.PathError{Op: "lstat", Path: filepath.Join(dir, name), Err: err}
	}
	return stateOfStat(&st), 0, nil
}
