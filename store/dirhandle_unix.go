//go:build unix

package store

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/stateguard/stateguard/fileid"
)

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC

// openDirByComponents opens path one component at a time from "/", each
// with O_NOFOLLOW|O_DIRECTORY, so no symlink anywhere in it is followed.
func openDirByComponents(path string) (int, error) {
	fd, err := unix.Open("/", dirFlags, 0)
	if err != nil {
		return -1, fmt.Errorf("open /: %w", err)
	}
	walked := ""
	for _, c := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		if c == "" {
			continue
		}
		if c == ".." {
			unix.Close(fd)
			return -1, fmt.Errorf("open directory %s: \"..\" in path", path)
		}
		walked += "/" + c
		next, err := unix.Openat(fd, c, dirFlags|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return -1, dirOpenError(path, walked, err)
		}
		fd = next
	}
	return fd, nil
}

// dirOpenError says which component is the symlink when that is the cause.
func dirOpenError(path, at string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if lerr := unix.Lstat(at, &st); lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("open directory %s: %w: %s is a symlink; stateguard reaches store directories only through real directories", path, ErrSymlinkInPath, at)
		}
	}
	return fmt.Errorf("open directory %s: %w", path, err)
}

func fstatDir(fd int) (DirID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return DirID{UID: -1, GID: -1}, err
	}
	return DirID{ID: fileid.FromStat(&st), UID: int(st.Uid), GID: int(st.Gid)}, nil
}

func closeFd(fd int) { _ = unix.Close(fd) }
