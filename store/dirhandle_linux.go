package store

import (
	"errors"

	"golang.org/x/sys/unix"
)

// openDirNoSymlinks resolves path with openat2(RESOLVE_NO_SYMLINKS), which
// refuses a symlink (and /proc magic link) in any component in one system
// call. Kernels before 5.6, and sandboxes that filter openat2, get the
// component walk instead.
func openDirNoSymlinks(path string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		Flags:   dirFlags,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.E2BIG):
		return openDirByComponents(path)
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR):
		// Find the component for the message.
		fd, cerr := openDirByComponents(path)
		if cerr == nil {
			unix.Close(fd) // raced back to a directory: still refused
			return -1, dirOpenError(path, path, err)
		}
		return -1, cerr
	}
	return -1, dirOpenError(path, path, err)
}
